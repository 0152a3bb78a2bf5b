"""`cw list`, `cw status`, `cw logs` and `cw delete`: watching and removing runs, through
:mod:`cw_cli.api` like every run command (tests/unit/test_cli_goes_through_the_api.py)."""

from __future__ import annotations

import sys
from datetime import datetime, timezone

import click

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.formats import check_output, check_states, dump, list_dict, state_key, status_dict
from cw_cli.cli.options import cluster_options, output_option, run_argument
from cw_cli.cli.plain import echo, printable, table
from cw_cli.errors import ConfigError
from cw_cli.labels import LOG_ROLES, TRAINER
from cw_cli.render.naming import MAX_RUN_NAME, is_run_name


def _age(created: object) -> str:

    if not isinstance(created, datetime):
        return "?"
    seconds = int((datetime.now(timezone.utc) - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@click.command("list")
@cluster_options
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

    output = check_output(output)
    states = check_states(list(state)) if state else None
    session = api.Session(context=context, namespace=namespace)
    # The table shows no object names: the owners and servers alone find every run.
    runs = session.runs(all_namespaces=all_namespaces, objects=output != "table")
    if states:
        runs = [run for run in runs if state_key(run.state) in states]
    if framework:
        runs = [run for run in runs if run.framework in framework]
    if sweep:
        runs = [run for run in runs if run.sweep == sweep]
    if output != "table":
        click.echo(dump(list_dict(runs), output), nl=False)
        return
    if not runs:
        where = "any namespace" if all_namespaces else f"namespace {session.namespace}"
        echo(f"no {'matching ' if state or framework or sweep else ''}runs in {where}", err=True)
        return
    pipelines = sorted({run.pipeline for run in runs if run.pipeline})
    if pipelines:  # a pipeline's runs together, under its name
        runs = sorted(runs, key=lambda run: run.pipeline or "")
    columns = ["RUN", *(["PIPELINE"] if pipelines else []), "FRAMEWORK", "TYPE", "STATE", "GPUS", "STEP", "ETA", "RESTARTS", "AGE",
               "REASON"]  # fmt: skip
    rows = [
        [*([run.namespace] if all_namespaces else []), run.name,
         *([f"{run.pipeline}/{run.stage}" if run.pipeline else ""] if pipelines else []), run.framework, run.training_type, run.state,
         str(run.gpus), f"{run.progress.step}/{run.progress.total}" if run.progress else "",
         run.progress.eta() if run.progress else "", "" if run.restarts is None else str(run.restarts),
         _age(run.created), run.failure or ""]
        for run in runs
    ]  # fmt: skip
    click.echo(table([*(["NAMESPACE"] if all_namespaces else []), *columns], rows), nl=False)
    if pipelines and not all_namespaces:
        _later_stages(session, pipelines, {(run.pipeline, run.stage) for run in runs})
    for run in runs:
        if run.stalled:
            echo(f"{run.name}: its launcher stopped before starting it; `cw delete {run.name}` removes it", err=True, fg="yellow")
    if any(run.state == "Failed" for run in runs):
        echo("`cw status RUN` says why a run failed, with the fix and its last log lines", err=True)


def _later_stages(session: api.Session, pipelines: list[str], shown: set[tuple[str | None, str | None]]) -> None:
    """A line per pipeline naming its stages not created yet (waiting, or skipped after a failure),
    and one naming its created stages that are no run of the table (evaluations), with their state."""
    from cw_cli.api.pipelines import stage_states

    for pipeline in pipelines:
        states = stage_states(session, pipeline)
        later = {stage: state for stage, state in states.items() if state in ("Waiting", "Skipped")}
        if later:
            text = ", ".join(f"{stage} {state.lower()}" for stage, state in later.items())
            echo(f"pipeline {printable(pipeline)}: not created yet: {printable(text)}", err=True)
        others = {stage: state for stage, state in states.items() if stage not in later and (pipeline, stage) not in shown}
        if others:
            text = ", ".join(f"{stage} {state.lower()}" for stage, state in others.items())
            echo(f"pipeline {printable(pipeline)}: evaluations: {printable(text)}", err=True)


@click.command("status")
@run_argument()
@cluster_options
@output_option
@handle_errors
def status_command(run: str, namespace: str | None, context: str | None, output: str) -> None:
    """Show a run's Job, pods and services; say why a pod is Pending or why the run failed."""

    output = check_output(output)
    check_run_argument(run)
    view = api.Session(context=context, namespace=namespace).run(run).status()
    if output != "table":
        click.echo(dump(status_dict(view), output), nl=False)
        return
    # Everything below comes from the cluster (labels, annotations, messages, logs): printed
    # through printable(), so no control sequence in it reaches the terminal.
    p = printable
    bold = lambda text: click.style(p(text), bold=True)  # noqa: E731
    echo(f"run {bold(view.name)}  {p(view.framework)} {p(view.training_type)}  state: {bold(view.state)}  GPUs: {view.gpus}")
    echo("objects: " + p(", ".join(view.objects)))
    if view.restarts:
        counted_by = view.restarts_counted_by  # an owner that restarts the whole gang
        what = f"gang restarts: {view.restarts} ({counted_by}; " if counted_by else f"restarts: {view.restarts} (trainer pods replaced; "
        echo(what + "each resumes from the last complete checkpoint)")
    if view.progress is not None:
        echo(f"progress: {view.progress.line()}")
        checkpoint = view.progress.checkpoint_line()
        if checkpoint:
            echo(f"last checkpoint: {p(checkpoint)}")
    if view.sweep:
        echo(f"sweep: {p(view.sweep)} (cw list --sweep {p(view.sweep)})")
    if "wandb" in view.links:
        echo(f"W&B: {p(view.links['wandb'])}")
    if "tensorboard" in view.links:
        echo(f"TensorBoard event files: {p(view.links['tensorboard'])} (on the checkpoint volume)")
    if view.pods:
        rows = [[pod.name, pod.role, pod.rank or "", pod.phase, "yes" if pod.ready else "no", pod.node or ""]
                for pod in view.pods]  # fmt: skip
        click.echo(table(["POD", "ROLE", "RANK", "PHASE", "READY", "NODE"], rows), nl=False)
    if view.queue:
        echo(p(view.queue, lines=True))
    for name, ready in view.services:
        echo(f"service {p(name)}: {p(ready)}")
    explained = {e.line() for e in view.explanations}
    for problem in view.problems:
        if problem not in explained:
            echo(p(problem, lines=True), fg="yellow")
    if view.failure:
        echo(click.style(f"{'failed' if view.state == 'Failed' else 'problem'}:", fg="red", bold=True) + f" {p(view.failure, lines=True)}")
    for explanation in view.explanations:
        echo(p(explanation.line(), lines=True), fg="yellow")
        if explanation.fix:
            echo(f"  fix: {p(explanation.fix.replace('RUN', view.name), lines=True)}")
        if explanation.log:
            where = f"{explanation.pod} {explanation.container}" if explanation.container else explanation.pod
            echo(f"  last log lines ({p(where or '')}):")
            for line in explanation.log:
                echo(f"    {p(line)}")


@click.command("logs")
@run_argument()
@click.option("--follow", "-f", is_flag=True, help="Stream new lines until the pod ends.")
@click.option("--role", default=TRAINER, show_default=True, help=f"{', '.join(LOG_ROLES[:-1])} or {LOG_ROLES[-1]}.")
@click.option("--rank", type=int, help="Node rank of a multi-node trainer.")
@click.option("--tail", type=int, help="Only the last N lines.")
@cluster_options
@handle_errors
def logs_command(
    run: str, follow: bool, role: str, rank: int | None, tail: int | None, namespace: str | None, context: str | None
) -> None:
    """Print (or follow) the log of one pod of a run, through the API server."""


    if role not in LOG_ROLES:
        raise ConfigError([f"--role {role!r}: expected {', '.join(LOG_ROLES)}"])
    check_run_argument(run)
    for flag, value in (("--rank", rank), ("--tail", tail)):
        if value is not None and value < 0:
            raise ConfigError([f"{flag} {value}: expected 0 or more"])
    handle = api.Session(context=context, namespace=namespace).run(run)
    stdout = sys.stdout
    for line in handle.logs(role=role, rank=rank, follow=follow, tail=tail, notice=lambda m: echo(m, err=True)):
        stdout.write(line + "\n")
        stdout.flush()


@click.command("delete")
@run_argument(required=False)
@click.option("--sweep", metavar="NAME", help="Delete every run of this sweep.")
@cluster_options
@handle_errors
def delete_command(run: str | None, sweep: str | None, namespace: str | None, context: str | None) -> None:
    """Delete every object of a run, or of every run of a sweep (and nothing else)."""

    if (run is None) == (sweep is None):
        raise ConfigError(["give a run name or --sweep NAME (not both)"], hint="cw delete RUN, or cw delete --sweep NAME")
    if run is not None:
        check_run_argument(run)
    session = api.Session(context=context, namespace=namespace)
    if sweep is not None:
        runs = session.delete_sweep(sweep)
        echo(f"deleted the {len(runs)} run(s) of sweep {sweep}: {', '.join(runs)}", err=True)
        return
    assert run is not None  # checked above: a run or a sweep
    deleted = session.run(run).delete()
    echo(f"deleted {', '.join(deleted)}", err=True)




def check_run_argument(run: str) -> None:
    """Refuse what cannot be a run's name before asking the cluster (exit 2, not 3 or 4)."""

    if not is_run_name(run):

        raise ConfigError(
            [f"RUN {printable(run[:80])!r} is not a run name: at most {MAX_RUN_NAME} lower-case letters, digits or '-', "
             "starting with a letter"],
            hint="`cw list` shows the runs",
        )  # fmt: skip
