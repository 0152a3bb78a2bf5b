"""`cw eval RUN`: one model of a run (a checkpoint, the final model, the best, or the base model for
comparison) scored by lm-evaluation-harness in a Job on the cluster; the scores land beside it."""

from __future__ import annotations

import click

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import cluster_options, run_argument
from cw_cli.cli.plain import printable, say
from cw_cli.errors import ConfigError


@click.command("eval")
@run_argument()
@click.option("--checkpoint", default="final", show_default=True,
              help="final, latest, best (the best evaluated so far), a step number, or base (the model the run started from).")
@click.option("--tasks", default=None, metavar="TASK[,TASK...]",
              help="lm-eval tasks, or local task YAMLs (default: the run's eval: tasks).")
@click.option("--environments", default=None, metavar="ENV[,ENV...]",
              help="verifiers environments to score with vf-eval instead of lm-eval tasks (hub ids, or one the run shipped).")
@click.option("--metric", default=None, metavar="TASK/METRIC", help="The deciding score (default: the run's eval: metric).")
@click.option("--limit", type=float, default=None, help="Samples per task (default: the run's eval: limit).")
@click.option("--gpu", type=int, default=None, help="GPUs of the evaluation pod: vLLM on a GPU, transformers on CPU.")
@click.option("--cpu", default=None, help="CPU of the evaluation pod (default: the run's eval.cpu, else 4, at most the trainer's).")
@click.option("--memory", default=None,
              help="Memory of the evaluation pod (default: the run's eval.memory, else 32Gi, at most the trainer's).")
@click.option("--wait", is_flag=True, help="Wait until the evaluation ends; exit 1 if it fails.")
@click.option("--timeout", type=float, help="With --wait: seconds to wait.")
@cluster_options
@handle_errors
def eval_command(
    run: str, checkpoint: str, tasks: str | None, environments: str | None, metric: str | None, limit: float | None,
    gpu: int | None, cpu: str | None, memory: str | None, wait: bool, timeout: float | None, namespace: str | None, context: str | None,
) -> None:  # fmt: skip
    """Evaluate a run's model with lm-evaluation-harness (or verifiers' vf-eval); scores go to its folder, cw artifacts and cw metrics."""
    from cw_cli.cli.runs import check_run_argument
    from cw_cli.config.quantity import MAX_DURATION_S

    check_run_argument(run)
    if timeout is not None and not (wait and 0 < timeout <= MAX_DURATION_S):  # checked before any Job exists
        problem = "--timeout is for --wait" if not wait else f"--timeout {timeout:g}: expected a positive number of seconds, at most a year"
        raise ConfigError([problem], hint="e.g. --wait --timeout 3600")
    names = [t.strip() for t in (tasks or "").split(",") if t.strip()]
    envs = [e.strip() for e in (environments or "").split(",") if e.strip()]
    session = api.Session(context=context, namespace=namespace)
    started = session.run(run).evaluate(checkpoint=checkpoint, tasks=names, metric=metric, limit=limit, gpu=gpu,
                                        cpu=cpu, memory=memory, environments=envs)  # fmt: skip
    say(f"evaluation {click.style(started.name, bold=True)} of {started.checkpoint} started: "
        f"scores to {printable(started.scores)} on the run's volume")
    say(f"next: cw logs {run} --role eval -f   cw artifacts {run}")
    if wait:
        from cw_cli.cli.heartbeat import Heartbeat

        with Heartbeat(f"waiting for evaluation {started.name}") as beat:  # a line every 30 s on a pipe: not a hang
            started.wait(timeout, lambda line: beat.note(f"  {printable(line)}"))
        say(f"evaluation {started.name} succeeded", fg="green")
