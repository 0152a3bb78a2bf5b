"""`cw <framework> <type> CONFIG [options]`: one command per framework and training type."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from msgspec import Struct

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import gpu_memory_option, launch_flags, take_launch_options
from cw_cli.cli.plain import printable, say
from cw_cli.config.options import LAUNCH_ONLY_FIELDS, SIZING_FIELDS
from cw_cli.errors import Interrupted, RunFailed
from cw_cli.frameworks.registry import FrameworkRegistry

if TYPE_CHECKING:  # the kubernetes-backed modules load only when a command needs the cluster
    from cw_cli.config.options import LaunchOptions
    from cw_cli.config.yaml_source import YamlSource


#: `--dry-run` prints the plan for reading: applied as is, the suspended Job would never start.
DRY_RUN_HEADER = (
    "# cw --dry-run: the run's objects. `kubectl apply -f` of this output starts the run (the\n"
    "# trainer's init containers wait for its servers), but only cw's own launch also links every\n"
    "# object to the Job or JobSet (ownerReferences, so its TTL removes the run), creates nothing if the\n"
    "# name is taken and removes a half-made run. Run the same command without --dry-run for that.\n"
)


#: Seconds the main thread gets to act on Ctrl-C during --wait before the watchdog ends cw.
INTERRUPT_GRACE_S = 1.0
#: The launch options a launch takes: every field of LaunchOptions, in the order --help lists them.
LAUNCH_FIELDS = (*SIZING_FIELDS, *LAUNCH_ONLY_FIELDS)


class MemoryCheck(Struct, frozen=True):
    """The pre-launch memory check's options: ``--gpu-memory``, ``--force``, and the estimate command to name."""

    gpu_memory: str | None
    force: bool
    command: str


class LaunchCommand(Struct, frozen=True):
    """What ``cw FRAMEWORK TYPE CONFIG`` is asked to do besides the run's own options.

    Attributes:
        framework: The framework's name.
        training_type: The training type.
        config: The config file.
        context: ``--context``.
        dry_run: ``--dry-run``: print the plan.
        server_dry_run: ``--server-dry-run``: the API server validates, nothing persists.
        wait: ``--wait``: block until the run ends.
        sweep: ``--sweep`` axes.
        resume_sweep: ``--resume-sweep``.
        memory: The memory check's flags.
    """

    framework: str
    training_type: str
    config: Path
    context: str | None
    dry_run: bool
    server_dry_run: bool
    wait: bool
    sweep: tuple[str, ...]
    resume_sweep: bool
    memory: MemoryCheck


def make_run_command(registry: FrameworkRegistry, framework_name: str, type_name: str, short_help: str) -> click.Command:
    """Build the click command ``cw <framework_name> <type_name>``: the launch options of
    :data:`~cw_cli.cli.options.LAUNCH_FLAGS`, then what the command does with the run."""

    @click.command(type_name, help=f"Run `{framework_name} {type_name}` on the cluster.", short_help=short_help)
    @launch_flags(LAUNCH_FIELDS)
    @click.option("--dry-run", is_flag=True, help="Print the manifests; touch nothing.")
    @click.option("--server-dry-run", is_flag=True, help="Have the API server validate everything; persist nothing.")
    @click.option("--wait", is_flag=True, help="Block until the run ends; exit 0 on success, 1 on failure.")
    @click.option("--sweep", multiple=True, metavar="KEY=V1,V2",
                  help="key=v1,v2,...: one run per value (several --sweep: every combination); --name names the sweep.")
    @click.option("--resume-sweep", is_flag=True, help="Keep a sweep's runs if one fails; run again to create the rest.")
    @gpu_memory_option
    @click.option("--force", is_flag=True, help="Launch even if the memory estimate says the run cannot fit its GPUs.")
    @handle_errors
    def command(
        config: Path, context: str | None, dry_run: bool, server_dry_run: bool, wait: bool, sweep: tuple[str, ...],
        resume_sweep: bool, gpu_memory: str | None, force: bool, **flags: Any,
    ) -> None:  # fmt: skip
        memory = MemoryCheck(gpu_memory, force, f"cw estimate {framework_name} {type_name} {config}")
        asked = LaunchCommand(framework_name, type_name, config, context, dry_run, server_dry_run, wait, tuple(sweep),
                              resume_sweep, memory)  # fmt: skip
        launch(registry, asked, take_launch_options(flags))

    return command


def launch(registry: FrameworkRegistry, asked: LaunchCommand, options: LaunchOptions) -> None:
    """Plan the run (or sweep) once, then print it (``--dry-run``), run it here (``--local``) or
    submit exactly that plan."""

    if asked.memory.gpu_memory is not None:
        _check_gpu_memory(asked.memory.gpu_memory)  # before anything is printed or planned
    if options.local and options.gpu is None:
        options = options.with_(gpu=_local_gpu_count())  # the config's GPU count is for cluster nodes, not this machine
    # A dry run has a session too: a multi-node or queued run's workload depends on what the
    # cluster serves, so the dry run asks it where it can (and says so where it cannot).
    session = None if options.local else api.Session(context=asked.context, namespace=options.namespace, registry=registry)
    source = api.read_config(asked.config)  # once: it also says whether this is a sweep
    if asked.sweep or asked.resume_sweep or api.has_sweep(source):
        if options.local or options.services or asked.server_dry_run:
            raise click.UsageError("a sweep cannot be combined with --local, --services or --server-dry-run")
        _sweep(session, source, registry, asked, options)
        return
    if session is None:
        planned = api.plan(source, asked.framework, asked.training_type, options, registry=registry)
    else:
        planned = session.plan(source, asked.framework, asked.training_type, options, if_reachable=asked.dry_run)
    _print_notices(planned.notices)
    if asked.dry_run:
        _print_dry_run([planned], asked.memory.gpu_memory, planned.to_yaml())
        return
    if options.local:
        from cw_cli.cli.local_run import run_locally

        raise click.exceptions.Exit(run_locally(planned.plan))
    assert session is not None
    _apply(session, planned, asked, options)


def _check_gpu_memory(value: str) -> None:
    from cw_cli.cli.options import check_gpu_memory_flag

    check_gpu_memory_flag(value)  # the same rule as the config's `gpu_memory` (0 is no GPU)


def _estimate_lines(runs: list[api.PlannedRun], gpu_memory: str | None) -> list[str]:
    """A dry run's memory verdict, as notes: offline (no node list), never a refusal of a run
    (a model config.json no model could have is refused, as a launch refuses it)."""

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


def _print_dry_run(runs: list[api.PlannedRun], gpu_memory: str | None, manifests: str, title: str = "") -> None:
    """The plan as a dry run prints it, then the memory verdict (computed first: a model
    config.json it refuses prints nothing)."""
    verdict = _estimate_lines(runs, gpu_memory)
    click.echo(DRY_RUN_HEADER + title + manifests, nl=False)
    _print_notices(verdict)


def _sweep(
    session: api.Session | None, config: YamlSource, registry: FrameworkRegistry, asked: LaunchCommand,
    options: LaunchOptions,
) -> None:  # fmt: skip

    fw, kind, axes = asked.framework, asked.training_type, list(asked.sweep)
    if session is None:
        planned = api.plan_sweep(config, fw, kind, options, sweep=axes, registry=registry)
    else:
        planned = session.plan_sweep(config, fw, kind, options, sweep=axes, if_reachable=asked.dry_run)
    _print_notices(planned.runs[0].notices)
    if asked.dry_run:
        title = f"# sweep {planned.name}: {len(planned.runs)} runs\n"
        _print_dry_run(planned.runs, asked.memory.gpu_memory, planned.to_yaml(), title)
        return
    assert session is not None
    from cw_cli.cli.interrupts import termination_as_interrupt

    say(f"sweep {click.style(planned.name, bold=True)}: {len(planned.runs)} runs in namespace {session.namespace} ({session.kube.host})")
    with termination_as_interrupt():
        runs = session.submit_sweep(
            planned, resume=asked.resume_sweep, progress=lambda line: say(f"  {printable(line, lines=True)}"),
            check_memory=True, force=asked.memory.force, gpu_memory=asked.memory.gpu_memory,
        )  # fmt: skip
    say(f"next: cw list --sweep {planned.name}   cw delete --sweep {planned.name}")
    if asked.wait:
        _wait_for_sweep(planned.name, runs, options.timeout)


def _wait_for_sweep(name: str, runs: list[api.Run], timeout: float | None) -> None:
    failed = []
    for run in runs:
        try:
            run.wait(timeout)
            say(f"  {run.name}: {click.style('succeeded', fg='green')}")
        except RunFailed as exc:
            failed.append(run.name)
            say(f"  {run.name}: {click.style(printable(exc.message, lines=True), fg='red')}")
    if failed:
        raise RunFailed(f"{len(failed)} of {len(runs)} runs of sweep {name} failed: {', '.join(failed)}")
    say(f"all {len(runs)} runs of sweep {name} succeeded", fg="green")


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


def _apply(session: api.Session, planned: api.PlannedRun, asked: LaunchCommand, options: LaunchOptions) -> None:
    """Check the run's memory, submit the plan that was made (nothing is rendered again), then
    follow it with ``--wait``."""
    from cw_cli.cli.interrupts import interrupt_within, termination_as_interrupt

    plan = planned.plan

    def progress(line: str) -> None:
        say(f"  {printable(line, lines=True)}")  # may quote the cluster (an event, a server's state)

    # Before anything is said about the launch: a run that cannot fit is refused here, creating nothing.
    verdict: list[str] = []
    memory, timeout = asked.memory, options.timeout
    session.check_memory(planned, gpu_memory=memory.gpu_memory, force=memory.force, dry_run=asked.server_dry_run,
                         progress=verdict.append, command=memory.command)  # fmt: skip
    say(f"run {click.style(plan.run_name, bold=True)} in namespace {session.namespace} ({session.kube.host})")
    for line in verdict:
        progress(line)
    with termination_as_interrupt():
        run = session.submit(planned, server_dry_run=asked.server_dry_run, progress=progress)
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
                if not asked.wait:
                    return
                if options.services:
                    run.wait_for_servers(timeout, progress)
                    say("services are Ready", fg="green")
                elif plan.owner_name:
                    run.wait(timeout, progress)
                    simulated = run.simulated_nodes()
                    if simulated:
                        say(f"run {plan.run_name} succeeded on a simulated node ({', '.join(simulated)}): nothing was trained "
                            "(KWOK starts no container; `cw cluster up` as root with containerd gives the test cluster a "
                            "real node)", fg="yellow")  # fmt: skip
                    else:
                        say(f"run {plan.run_name} succeeded", fg="green")
        except KeyboardInterrupt:
            # The run is launched and complete: stopping the watch must not stop the run.
            raise Interrupted(
                stopped, hint=f"cw status {plan.run_name} to follow it, cw delete {plan.run_name} to stop it"
            ) from None
