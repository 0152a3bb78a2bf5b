"""`--local`: run a plan's trainer command on this machine, streaming its output."""

from __future__ import annotations

from pathlib import Path

from cw_cli.cli.output import err, out
from cw_cli.errors import ConfigError
from cw_cli.render.plan import Plan


def run_locally(plan: Plan, checkpoint_dir: Path | None = None) -> int:
    """Run the trainer of ``plan`` as a local process (ConfigMap files in a temp folder).

    Args:
        plan: The rendered plan (single node).
        checkpoint_dir: Local folder standing in for /checkpoints (default ./cw-local/<run>).

    Returns:
        The trainer's exit code.
    """
    from cw_cli.cli.interrupts import termination_as_interrupt
    from cw_cli.localrun.runner import LocalRunError, LocalRunner

    if plan.service_deployments:
        err().print("note: services are not started with --local; the trainer must not need them")
    folder = checkpoint_dir or Path("cw-local") / plan.run_name
    try:
        # SIGTERM acts as Ctrl-C: the runner's stop() asks cw_entrypoint to save a checkpoint first.
        with termination_as_interrupt(), LocalRunner(plan.manifests, folder) as runner:
            prepared = runner.prepare()
            err().print(f"running locally: {' '.join(prepared.command)}  (outputs under {folder})")
            stdout = out().file
            code = runner.run(lambda line: (stdout.write(line.rstrip("\n") + "\n"), stdout.flush()))
    except LocalRunError as exc:
        raise ConfigError([f"--local: {exc}"]) from None
    return code
