"""`cw <framework> <type> CONFIG [options]`: one command per framework and training type."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from msgspec import Struct

from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import context_option, namespace_option
from cw_cli.cli.plain import printable, say
from cw_cli.errors import Interrupted, RunFailed
from cw_cli.frameworks.registry import FrameworkRegistry

if TYPE_CHECKING:  # the kubernetes-backed modules load only when a command needs the cluster
    from cw_cli import api
    from cw_cli.config.yaml_source import YamlSource


#: `--dry-run` prints the plan for reading: applied as is, the suspended Job would never start.
DRY_RUN_HEADER = (
    "# cw --dry-run: the run's objects. `kubectl apply -f` of this output starts the run (the\n"
    "# trainer's init containers wait for its servers), but only cw's own launch also links every\n"
    "# object to the Job or JobSet (ownerReferences, so its TTL removes the run), creates nothing if the\n"
    "# name is taken and removes a half-made run. Run the same command without --dry-run for that.\n"
)


F = TypeVar("F", bound=Callable[..., Any])
#: Seconds the main thread gets to act on Ctrl-C during --wait before the watchdog ends cw.
INTERRUPT_GRACE_S = 1.0


def launch_options(function: F) -> F:
    """CONFIG and the options that size, name and place a run: shared by a launch and `cw estimate`."""
    decorators = [
        click.argument("config", type=click.Path(path_type=Path)),
        click.option("--gpu", type=int, help="GPUs per trainer node."),
        click.option("--cpu", help="CPU per trainer pod, e.g. 32."),
        click.option("--memory", help="Memory per trainer pod, e.g. 256Gi."),
        click.option("--image", help="Trainer image."),
        click.option("--nodes", type=int, help="Trainer nodes (one pod each)."),
        click.option("--name", help="Run name (default: generated, unique)."),
        click.option("--pull", is_flag=True, help="Always pull the image."),
        click.option("--set", "set_", multiple=True, metavar="KEY=VALUE",
                     help="key=value for any config key, dotted keys nest, value typed as YAML; repeatable."),
        namespace_option,
        context_option,
    ]  # fmt: skip
    for decorator in reversed(decorators):  # as if stacked above the function, first on top
        function = decorator(function)
    return function


def gpu_memory_option(function: F) -> F:
    """``--gpu-memory``: one GPU's memory for the memory estimate."""
    return click.option(
        "--gpu-memory", metavar="SIZE",
        help="Memory of one GPU for the memory estimate, e.g. 80GB or 141GB (default: gpu_memory / gpu_type in the "
        "config, else the nodes' nvidia.com/gpu.memory labels).",
    )(function)  # fmt: skip


def make_run_command(registry: FrameworkRegistry, framework_name: str, type_name: str, short_help: str) -> click.Command:
    """Build the click command ``cw <framework_name> <type_name>``."""

    @click.command(type_name, help=f"Run `{framework_name} {type_name}` on the cluster.", short_help=short_help)
    @launch_options
    @click.option("--dry-run", is_flag=True, help="Print the manifests; touch nothing.")
    @click.option("--server-dry-run", is_flag=True, help="Have the API server validate everything; persist nothing.")
    @click.option("--services", is_flag=True, help="Deploy only the services of a multi-service type.")
    @click.option("--ttl", help="With --services: how long the servers live, e.g. 6h, 90m.")
    @click.option("--wait", is_flag=True, help="Block until the run ends; exit 0 on success, 1 on failure.")
    @click.option("--timeout", type=float, help="Seconds to wait for services (and with --wait, the run).")
    @click.option("--local", is_flag=True, help="Run the trainer's command here as a local process (debugging).")
    @click.option("--resume", is_flag=True, help="Continue the checkpoints in the run's folder even though the config changed.")
    @click.option("--sweep", multiple=True, metavar="KEY=V1,V2",
                  help="key=v1,v2,...: one run per value (several --sweep: every combination); --name names the sweep.")
    @click.option("--resume-sweep", is_flag=True, help="Keep a sweep's runs if one fails; run again to create the rest.")
    @gpu_memory_option
    @click.option("--force", is_flag=True, help="Launch even if the memory estimate says the run cannot fit its GPUs.")
    @handle_errors
    def command(
        config: Path,
        gpu: int | None,
        cpu: str | None,
        memory: str | None,
        image: str | None,
        nodes: int | None,
        name: str | None,
        pull: bool,
        set_: tuple[str, ...],
        namespace: str | None,
        context: str | None,
        dry_run: bool,
        server_dry_run: bool,
        services: bool,
        ttl: str | None,
        wait: bool,
        timeout: float | None,
        local: bool,
        resume: bool,
        sweep: tuple[str, ...],
        resume_sweep: bool,
        gpu_memory: str | None,
        force: bool,
    ) -> None:
        from cw_cli import api

        if gpu_memory is not None:
            _check_gpu_memory(gpu_memory)  # before anything is printed or planned
        if local and gpu is None:
            gpu = _local_gpu_count()  # the config's GPU count is for cluster nodes, not this machine
        # A dry run has a session too: a multi-node or queued run's workload depends on what the
        # cluster serves, so the dry run asks it where it can (and says so where it cannot).
        session = None if local else api.Session(context=context, namespace=namespace, registry=registry)
        options: dict[str, Any] = dict(
            name=name, namespace=namespace, gpu=gpu, cpu=cpu, memory=memory, image=image, nodes=nodes, pull=pull,
            set=list(set_), services=services, ttl=ttl, timeout=timeout, resume=resume, local=local,
        )  # fmt: skip
        source = api.read_config(config)  # once: it also says whether this is a sweep
        if sweep or resume_sweep or api.has_sweep(source):
            if local or services or server_dry_run:
                raise click.UsageError("a sweep cannot be combined with --local, --services or --server-dry-run")
            options.pop("name")
            check = MemoryCheck(gpu_memory, force, _estimate_command(framework_name, type_name, config))
            _sweep(session, source, framework_name, type_name, registry, list(sweep), name, options,
                   dry_run, wait, timeout, resume_sweep, check)  # fmt: skip
            return
        if session is None:
            planned = api.plan(source, framework_name, type_name, registry=registry, **options)
        else:
            planned = session.plan(source, framework_name, type_name, if_reachable=dry_run, **options)
        _print_notices(planned.notices)
        if dry_run:
            verdict = _estimate_lines([planned], gpu_memory)  # first: a model config.json it refuses prints nothing
            click.echo(DRY_RUN_HEADER + planned.to_yaml(), nl=False)
            _print_notices(verdict)
            return
        if local:
            from cw_cli.cli.local_run import run_locally

            raise click.exceptions.Exit(run_locally(planned.plan))
        assert session is not None
        check = MemoryCheck(gpu_memory, force, _estimate_command(framework_name, type_name, config))
        _apply(session, planned, server_dry_run, wait, timeout, services, check)

    return command


class MemoryCheck(Struct, frozen=True):
    """The pre-launch memory check's options: ``--gpu-memory``, ``--force``, and the estimate command to name."""

    gpu_memory: str | None
    force: bool
    command: str


def _check_gpu_memory(value: str) -> None:
    from cw_cli.cli.options import check_gpu_memory_flag

    check_gpu_memory_flag(value)  # the same rule as the config's `gpu_memory` (0 is no GPU)


def _estimate_command(framework_name: str, type_name: str, config: Path) -> str:
    return f"cw estimate {framework_name} {type_name} {config}"


def _estimate_lines(runs: list[api.PlannedRun], gpu_memory: str | None) -> list[str]:
    """A dry run's memory verdict, as notes: offline (no node list), never a refusal of a run
    (a model config.json no model could have is refused, as a launch refuses it)."""
    from cw_cli import api

    said: list[str] = []
    for planned in runs:
        result = api.estimate_run(planned, gpu_memory=gpu_memory, allow_meta_device=False)
        lines = [result.summary()]
        if result.estimate is not None and result.gpu.memory is None:
            lines += list(result.gpu.notes)
        elif result.fits is False:
            lines += api.refusal_lines(result)
        said += [line for line in lines if line not in said]
    return said


def _sweep(
    session: api.Session | None,
    config: YamlSource,
    framework_name: str,
    type_name: str,
    registry: FrameworkRegistry,
    flags: list[str],
    name: str | None,
    options: dict,
    dry_run: bool,
    wait: bool,
    timeout: float | None,
    resume_sweep: bool,
    memory: MemoryCheck,
) -> None:
    from cw_cli import api

    if session is None:
        planned = api.plan_sweep(config, framework_name, type_name, sweep=flags, name=name, registry=registry, **options)
    else:
        planned = session.plan_sweep(config, framework_name, type_name, sweep=flags, name=name, if_reachable=dry_run, **options)
    _print_notices(planned.runs[0].notices)
    if dry_run:
        verdict = _estimate_lines(planned.runs, memory.gpu_memory)
        click.echo(DRY_RUN_HEADER + f"# sweep {planned.name}: {len(planned.runs)} runs\n" + planned.to_yaml(), nl=False)
        _print_notices(verdict)
        return
    assert session is not None
    from cw_cli.cli.interrupts import termination_as_interrupt

    say(f"sweep {click.style(planned.name, bold=True)}: {len(planned.runs)} runs in namespace {session.namespace} ({session.kube.host})")
    with termination_as_interrupt():
        runs = session.submit_sweep(
            planned, resume=resume_sweep, progress=lambda line: say(f"  {printable(line, lines=True)}"),
            check_memory=True, force=memory.force, gpu_memory=memory.gpu_memory,
        )  # fmt: skip
    say(f"next: cw list --sweep {planned.name}   cw delete --sweep {planned.name}")
    if not wait:
        return
    failed = []
    for run in runs:
        try:
            run.wait(timeout)
            say(f"  {run.name}: {click.style('succeeded', fg='green')}")
        except RunFailed as exc:
            failed.append(run.name)
            say(f"  {run.name}: {click.style(printable(exc.message, lines=True), fg='red')}")
    if failed:
        raise RunFailed(f"{len(failed)} of {len(runs)} runs of sweep {planned.name} failed: {', '.join(failed)}")
    say(f"all {len(runs)} runs of sweep {planned.name} succeeded", fg="green")


def _print_notices(notices: list[str]) -> None:
    """What cw decided for the user (moved outputs, shipped files, outputs not kept), on stderr.

    Plain click output: a dry run must not pay for importing rich.
    """
    for notice in notices:
        click.echo(click.style("note:", fg="yellow") + " " + notice, err=True)


def _local_gpu_count() -> int:
    """GPUs on this machine, without importing torch: CUDA_VISIBLE_DEVICES, else nvidia-smi."""
    import shutil
    import subprocess

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    if not shutil.which("nvidia-smi"):
        return 0
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def _apply(
    session: api.Session,
    planned: api.PlannedRun,
    server_dry_run: bool,
    wait: bool,
    timeout: float | None,
    services_only: bool,
    memory: MemoryCheck,
) -> None:
    from cw_cli.cli.interrupts import interrupt_within, termination_as_interrupt

    plan = planned.plan

    def progress(line: str) -> None:
        say(f"  {printable(line, lines=True)}")  # may quote the cluster (an event, a server's state)

    # Before anything is said about the launch: a run that cannot fit is refused here, creating nothing.
    verdict: list[str] = []
    session.check_memory(planned, gpu_memory=memory.gpu_memory, force=memory.force, dry_run=server_dry_run,
                         progress=verdict.append, command=memory.command)  # fmt: skip
    say(f"run {click.style(plan.run_name, bold=True)} in namespace {session.namespace} ({session.kube.host})")
    for line in verdict:
        progress(line)
    with termination_as_interrupt():
        run = session.submit(planned, server_dry_run=server_dry_run, progress=progress)
        result = run.launch
        assert result is not None
        if result.dry_run:
            say(f"the API server accepted all {len(result.created)} objects; nothing was created", fg="green")
            return
        # From here on the run is whole and needs no cw: an interrupt stops only the watching,
        # within a second even if the main thread cannot act on it (cli/interrupts.py).
        stopped = f"stopped waiting; run {plan.run_name!r} goes on in the cluster"
        try:
            with interrupt_within(INTERRUPT_GRACE_S, f"error: {stopped}"):
                if plan.owner_name and not result.released:
                    say(f"the {plan.owner_kind} waits for Kueue to admit it")
                say(f"next: cw status {plan.run_name}   cw logs {plan.run_name} -f   cw delete {plan.run_name}")
                if not wait:
                    return
                if services_only:
                    run.wait_for_servers(timeout, progress)
                    say("services are Ready", fg="green")
                elif plan.owner_name:
                    run.wait(timeout, progress)
                    say(f"run {plan.run_name} succeeded", fg="green")
        except KeyboardInterrupt:
            # The run is launched and complete: stopping the watch must not stop the run.
            raise Interrupted(
                stopped, hint=f"cw status {plan.run_name} to follow it, cw delete {plan.run_name} to stop it"
            ) from None
