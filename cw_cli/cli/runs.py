"""`cw list`, `cw status`, `cw logs` and `cw delete`: watching and removing runs."""

from __future__ import annotations

import click

from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import context_option, kube, namespace_option, output_option, run_argument
from cw_cli.cli.output import err, out


def _age(created: "object") -> str:
    from datetime import datetime, timezone

    if not isinstance(created, datetime):
        return "?"
    seconds = int((datetime.now(timezone.utc) - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@click.command("list")
@namespace_option
@context_option
@click.option("--all-namespaces", "-A", is_flag=True, help="Runs of every namespace.")
@click.option("--state", "state", multiple=True, metavar="STATE",
              help="Only runs in this state (repeatable): pending, queued, running, failed, ...")
@click.option("--framework", multiple=True, metavar="NAME", help="Only runs of this framework (repeatable).")
@click.option("--sweep", metavar="NAME", help="Only the runs of this sweep.")
@output_option
@handle_errors
def list_command(
    namespace: str | None,
    context: str | None,
    all_namespaces: bool,
    state: tuple[str, ...],
    framework: tuple[str, ...],
    sweep: str | None,
    output: str,
) -> None:
    """List the runs in the namespace, with state, GPUs, age and why a failed run failed."""
    from rich.markup import escape
    from rich.table import Table

    from cw_cli.cli.formats import check_output, check_states, dump, list_dict, state_key
    from cw_cli.k8s.inspect import STALLED, list_runs

    output = check_output(output)
    states = check_states(state) if state else None
    client = kube(context, namespace)
    runs = list_runs(client, all_namespaces=all_namespaces)
    if states:
        runs = [run for run in runs if state_key(run.state) in states]
    if framework:
        runs = [run for run in runs if run.framework in framework]
    if sweep:
        runs = [run for run in runs if run.sweep == sweep]
    if output != "table":
        out().file.write(dump(list_dict(runs), output))
        return
    if not runs:
        where = "any namespace" if all_namespaces else f"namespace {client.namespace}"
        err().print(f"no {'matching ' if state or framework or sweep else ''}runs in {where}")
        return
    columns = ["RUN", "FRAMEWORK", "TYPE", "STATE", "GPUS", "AGE", "REASON"]
    table = Table(*(["NAMESPACE"] if all_namespaces else []), *columns, box=None)
    for run in runs:
        row = [run.name, run.framework, run.training_type, run.state, str(run.gpus), _age(run.created), run.failure or ""]
        table.add_row(*[escape(cell) for cell in ([run.namespace] if all_namespaces else []) + row])
    out().print(table)
    for run in runs:
        if run.state == STALLED:
            err().print(f"[yellow]{run.name}: its launcher stopped before starting it; `cw delete {run.name}` removes it[/]")
    if any(run.state == "Failed" for run in runs):
        err().print("`cw status RUN` says why a run failed, with the fix and its last log lines")


@click.command("status")
@run_argument()
@namespace_option
@context_option
@output_option
@handle_errors
def status_command(run: str, namespace: str | None, context: str | None, output: str) -> None:
    """Show a run's Job, pods and services; say why a pod is Pending or why the run failed."""
    from rich.markup import escape
    from rich.table import Table

    from cw_cli.cli.formats import check_output, dump, status_dict
    from cw_cli.k8s.inspect import run_status

    output = check_output(output)
    view = run_status(kube(context, namespace), run)
    if output != "table":
        out().file.write(dump(status_dict(view), output))
        return
    console = out()
    console.print(f"run [bold]{view.name}[/]  {view.framework} {view.training_type}  state: [bold]{view.state}[/]  GPUs: {view.gpus}")
    console.print("objects: " + ", ".join(view.objects))
    if view.restarts is not None:
        console.print(f"gang restarts: {view.restarts} (JobSet; each resumes from the last checkpoint)")
    if view.sweep:
        console.print(f"sweep: {escape(view.sweep)} (cw list --sweep {escape(view.sweep)})")
    if "wandb" in view.links:
        console.print(f"W&B: {escape(view.links['wandb'])}")
    if "tensorboard" in view.links:
        console.print(f"TensorBoard event files: {escape(view.links['tensorboard'])} (on the checkpoint volume)")
    if view.pods:
        table = Table("POD", "ROLE", "RANK", "PHASE", "READY", "NODE", box=None)
        for pod in view.pods:
            table.add_row(pod.name, pod.role, pod.rank or "", pod.phase, "yes" if pod.ready else "no", pod.node or "")
        console.print(table)
    if view.queue:
        console.print(escape(view.queue))
    for name, ready in view.services:
        console.print(f"service {name}: {ready}")
    explained = {e.line() for e in view.explanations}
    for problem in view.problems:
        if problem not in explained:
            console.print(f"[yellow]{escape(problem)}[/]")
    if view.failure:
        console.print(f"[bold red]{'failed' if view.state == 'Failed' else 'problem'}:[/] {escape(view.failure)}")
    for explanation in view.explanations:
        console.print(f"[yellow]{escape(explanation.line())}[/]")
        if explanation.fix:
            console.print(f"  fix: {escape(explanation.fix.replace('RUN', view.name))}")
        if explanation.log:
            where = f"{explanation.pod} {explanation.container}" if explanation.container else explanation.pod
            console.print(f"  last log lines ({escape(where or '')}):")
            for line in explanation.log:
                console.print(f"    {escape(line)}")


@click.command("logs")
@run_argument()
@click.option("--follow", "-f", is_flag=True, help="Stream new lines until the pod ends.")
@click.option("--role", default="trainer", show_default=True, help="trainer, server or reward.")
@click.option("--rank", type=int, help="Node rank of a multi-node trainer.")
@click.option("--tail", type=int, help="Only the last N lines.")
@namespace_option
@context_option
@handle_errors
def logs_command(
    run: str, follow: bool, role: str, rank: int | None, tail: int | None, namespace: str | None, context: str | None
) -> None:
    """Print (or follow) the log of one pod of a run, through the API server."""
    from rich.markup import escape

    from cw_cli.k8s.operations import stream_logs

    from cw_cli.labels import ROLES

    if role not in ROLES:
        from cw_cli.errors import ConfigError

        raise ConfigError([f"--role {role!r}: expected trainer, server or reward"])
    client = kube(context, namespace)
    stdout = out().file
    for line in stream_logs(client, run, role, rank, follow, tail, notice=lambda m: err().print(escape(m))):
        stdout.write(line + "\n")
        stdout.flush()


@click.command("delete")
@run_argument(required=False)
@click.option("--sweep", metavar="NAME", help="Delete every run of this sweep.")
@namespace_option
@context_option
@handle_errors
def delete_command(run: str | None, sweep: str | None, namespace: str | None, context: str | None) -> None:
    """Delete every object of a run, or of every run of a sweep (and nothing else)."""
    from cw_cli.errors import ConfigError
    from cw_cli.k8s.operations import delete_run, delete_sweep

    if (run is None) == (sweep is None):
        raise ConfigError(["give a run name or --sweep NAME (not both)"], hint="cw delete RUN, or cw delete --sweep NAME")
    client = kube(context, namespace)
    if sweep is not None:
        runs = delete_sweep(client, sweep)
        err().print(f"deleted the {len(runs)} run(s) of sweep {sweep}: {', '.join(runs)}")
        return
    deleted = delete_run(client, run)
    err().print(f"deleted {', '.join(deleted)}")


