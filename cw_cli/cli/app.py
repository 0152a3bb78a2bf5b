"""The `cw` command line: framework commands from the registry, plus run and cluster commands."""

from __future__ import annotations

import os
from typing import Annotated, Callable, Optional

import typer

from cw_cli import __version__
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.output import err, out
from cw_cli.cli.run import make_run_command
from cw_cli.frameworks.registry import FrameworkRegistry

NamespaceOption = Annotated[Optional[str], typer.Option("--namespace", "-n", help="Namespace (default: the context's).")]
ContextOption = Annotated[Optional[str], typer.Option("--context", help="kubeconfig context.")]
OutputOption = Annotated[
    str, typer.Option("--output", "-o", help="table, json or yaml (fields: docs/output.md).", metavar="FORMAT")
]


def complete_run(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a RUN argument: the runs in the namespace, read through the API server.

    Fast (a short request timeout) and silent: no cluster, no kubeconfig or no permission means
    no candidates, never a traceback in the middle of the user's command line.
    """
    try:
        import warnings

        os.environ.setdefault("CW_REQUEST_TIMEOUT", "3")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from cw_cli.k8s.inspect import run_names

            params = ctx.params or {}
            names = run_names(_kube(params.get("context"), params.get("namespace")))
        return [name for name in names if name.startswith(incomplete or "")]
    except Exception:  # noqa: BLE001 - completion must never fail loudly
        return []


#: The RUN argument of status, logs, delete (and metrics): completes run names.
RunArgument = Annotated[
    str, typer.Argument(help="Run name.", metavar="RUN", autocompletion=complete_run, show_default=False)
]
OptionalRunArgument = Annotated[
    Optional[str], typer.Argument(help="Run name.", metavar="RUN", autocompletion=complete_run, show_default=False)
]


def _version(value: bool) -> None:
    if value:
        out().print(f"cw {__version__}")
        raise typer.Exit()


def root(
    debug: Annotated[bool, typer.Option("--debug", help="Show details and tracebacks of errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Launch LLM post-training runs (SFT, DPO, GRPO) on a Kubernetes GPU cluster."""
    if debug:
        os.environ["CW_DEBUG"] = "1"


def _kube(context: str | None, namespace: str | None):  # type: ignore[no-untyped-def]
    from cw_cli.k8s.connection import ClusterTarget, connect

    return connect(ClusterTarget(context=context, namespace=namespace))


def _age(created: "object") -> str:
    from datetime import datetime, timezone

    if not isinstance(created, datetime):
        return "?"
    seconds = int((datetime.now(timezone.utc) - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@handle_errors
def list_command(
    namespace: NamespaceOption = None,
    context: ContextOption = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="Runs of every namespace.")] = False,
    state: Annotated[
        Optional[list[str]],
        typer.Option("--state", help="Only runs in this state (repeatable): pending, queued, running, failed, ...", metavar="STATE"),
    ] = None,
    framework: Annotated[
        Optional[list[str]], typer.Option("--framework", help="Only runs of this framework (repeatable).", metavar="NAME")
    ] = None,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Only the runs of this sweep.", metavar="NAME")] = None,
    output: OutputOption = "table",
) -> None:
    """List the runs in the namespace, with state, GPUs, age and why a failed run failed."""
    from rich.markup import escape
    from rich.table import Table

    from cw_cli.cli.formats import check_output, check_states, dump, list_dict, state_key
    from cw_cli.k8s.inspect import STALLED, list_runs

    output = check_output(output)
    states = check_states(state) if state else None
    kube = _kube(context, namespace)
    runs = list_runs(kube, all_namespaces=all_namespaces)
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
        where = "any namespace" if all_namespaces else f"namespace {kube.namespace}"
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


@handle_errors
def status_command(
    run: RunArgument, namespace: NamespaceOption = None, context: ContextOption = None, output: OutputOption = "table"
) -> None:
    """Show a run's Job, pods and services; say why a pod is Pending or why the run failed."""
    from rich.markup import escape
    from rich.table import Table

    from cw_cli.cli.formats import check_output, dump, status_dict
    from cw_cli.k8s.inspect import run_status

    output = check_output(output)
    view = run_status(_kube(context, namespace), run)
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


@handle_errors
def logs_command(
    run: RunArgument,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream new lines until the pod ends.")] = False,
    role: Annotated[str, typer.Option("--role", help="trainer, server or reward.")] = "trainer",
    rank: Annotated[Optional[int], typer.Option("--rank", help="Node rank of a multi-node trainer.")] = None,
    tail: Annotated[Optional[int], typer.Option("--tail", help="Only the last N lines.")] = None,
    namespace: NamespaceOption = None,
    context: ContextOption = None,
) -> None:
    """Print (or follow) the log of one pod of a run, through the API server."""
    from rich.markup import escape

    from cw_cli.k8s.operations import stream_logs

    if role not in ("trainer", "server", "reward"):
        from cw_cli.errors import ConfigError

        raise ConfigError([f"--role {role!r}: expected trainer, server or reward"])
    kube = _kube(context, namespace)
    stdout = out().file
    for line in stream_logs(kube, run, role, rank, follow, tail, notice=lambda m: err().print(escape(m))):
        stdout.write(line + "\n")
        stdout.flush()


@handle_errors
def delete_command(
    run: OptionalRunArgument = None,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Delete every run of this sweep.", metavar="NAME")] = None,
    namespace: NamespaceOption = None,
    context: ContextOption = None,
) -> None:
    """Delete every object of a run, or of every run of a sweep (and nothing else)."""
    from cw_cli.errors import ConfigError
    from cw_cli.k8s.operations import delete_run, delete_sweep

    if (run is None) == (sweep is None):
        raise ConfigError(["give a run name or --sweep NAME (not both)"], hint="cw delete RUN, or cw delete --sweep NAME")
    kube = _kube(context, namespace)
    if sweep is not None:
        runs = delete_sweep(kube, sweep)
        err().print(f"deleted the {len(runs)} run(s) of sweep {sweep}: {', '.join(runs)}")
        return
    deleted = delete_run(kube, run)
    err().print(f"deleted {', '.join(deleted)}")


def make_frameworks_command(registry: FrameworkRegistry) -> Callable[[], None]:
    """`cw frameworks` for a given registry."""

    @handle_errors
    def frameworks_command() -> None:
        """List the frameworks (built-in and plugins) and the plugins that failed to load."""
        from rich.markup import escape
        from rich.table import Table

        table = Table("FRAMEWORK", "TYPES", "VERSION", "SOURCE", "DESCRIPTION", box=None)
        for loaded in registry.all():
            table.add_row(loaded.name, ", ".join(loaded.types), loaded.plugin.version, loaded.source, loaded.plugin.description)
        out().print(table)
        for failure in registry.failures:
            err().print(f"[red]failed to load[/] {escape(failure.source)}: {escape(failure.error)}")

    return frameworks_command


def schema_command() -> None:
    """Print the JSON Schema of cw's config fields (for editors)."""
    import json

    from cw_cli.config.models import ClusterSpec

    schema = ClusterSpec.model_json_schema()
    schema["title"] = "cw run config"
    schema["description"] = "cw's cluster fields; any other top-level key is the framework's own config."
    schema["additionalProperties"] = True
    out().file.write(json.dumps(schema, indent=2) + "\n")


def _add_framework_commands(app: typer.Typer, registry: FrameworkRegistry) -> None:
    for loaded in registry.all():
        sub = typer.Typer(help=loaded.plugin.description, no_args_is_help=True)
        for type_name, training_type in loaded.types.items():
            alias = f" (same as {training_type.value})" if type_name != training_type.value else ""
            sub.command(type_name, help=f"{loaded.name} {type_name}{alias}: launch a run.")(
                make_run_command(registry, loaded.name, type_name)
            )
        app.add_typer(sub, name=loaded.name)


def _add_cluster_commands(app: typer.Typer) -> None:
    from cw_cli.cli.cluster import cluster_app  # a broken import must fail loudly, not hide the command

    app.add_typer(cluster_app, name="cluster", help="A local test cluster (real control plane, fake GPU nodes).")


def build_app(registry: FrameworkRegistry) -> typer.Typer:
    """A fresh `cw` application whose framework commands come from ``registry``."""
    app = typer.Typer(
        name="cw",
        help="Launch LLM post-training runs (SFT, DPO, GRPO) on a Kubernetes GPU cluster.",
        no_args_is_help=True,
        add_completion=True,  # `cw --install-completion`; RUN arguments complete run names
        pretty_exceptions_enable=False,
    )
    app.callback()(root)
    app.command("list")(list_command)
    from cw_cli.cli.metrics import metrics_command  # light: the parsing and plotting load when run
    app.command("metrics")(metrics_command)
    app.command("status")(status_command)
    app.command("logs")(logs_command)
    app.command("delete")(delete_command)
    app.command("frameworks")(make_frameworks_command(registry))
    app.command("schema")(schema_command)
    _add_framework_commands(app, registry)
    _add_cluster_commands(app)
    return app


def main() -> None:
    """Console-script entry point."""
    registry = FrameworkRegistry().load_all()
    try:
        build_app(registry)()
    finally:
        registry.cleanup()
