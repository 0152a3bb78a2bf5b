"""cw as a library: plan, submit and follow runs from Python. The ``cw`` CLI is a layer over this.

A notebook or a script::

    from cw_cli import api

    session = api.Session(namespace="team-a")          # one connection, reused
    planned = session.plan("configs/trl-sft.yaml", "trl", "sft", gpu=4, set={"learning_rate": 2e-5})
    print(planned.to_yaml())                            # what would be created
    run = session.submit(planned)                       # -> Run
    run.wait()                                          # raises RunFailed if the trainer fails
    for line in run.logs(tail=20):
        print(line)

Offline, :func:`plan` renders without a cluster (what ``--dry-run`` prints). Every error is a
:class:`cw_cli.errors.CwError` subclass (``ConfigError``, ``NotFound``, ``Conflict``, ``RunFailed``,
...), each carrying the exit code the CLI uses. Nothing here prints: progress goes to an optional
callback. A launch's options are one structure, :class:`LaunchOptions` (the flags of ``cw
FRAMEWORK TYPE``), taken by :func:`plan`, :func:`plan_sweep` and :func:`estimate` as an argument
or as keywords of the same names; how a run's memory is estimated is :class:`EstimateOptions`.

One module per job: :mod:`~cw_cli.api.planning` (a config to a :class:`PlannedRun`),
:mod:`~cw_cli.api.memory` (the estimate and the refusal), :mod:`~cw_cli.api.sweeps`,
:mod:`~cw_cli.api.session` (:class:`Session`), :mod:`~cw_cli.api.run` (:class:`Run`) and
:mod:`~cw_cli.api.after_training` (artifacts, download, serve, try, export). Importing this
package loads none of its modules: each public name is imported on first use, so a command loads
only what it calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and editors; at run time each name is imported on first use
    from cw_cli.api.after_training import Evaluation, Export
    from cw_cli.api.memory import WontFit, estimate, estimate_run, refusal_lines
    from cw_cli.api.planning import (
        DICT_CONFIG_NAME,
        DRY_RUN_PROBE_TIMEOUT,
        PlannedRun,
        Progress,
        has_sweep,
        plan,
        read_config,
    )
    from cw_cli.api.run import Run
    from cw_cli.api.session import Session
    from cw_cli.api.sweeps import SWEEP_PARALLEL, PlannedSweep, plan_sweep
    from cw_cli.config.options import EstimateOptions, LaunchOptions, set_assignments

#: Public name -> the module that defines it. A command imports only the modules of the names it
#: uses (a dry run needs planning, not sweeps, sessions or the after-training calls).
_HOMES = {
    "Evaluation": "cw_cli.api.after_training", "Export": "cw_cli.api.after_training",
    "WontFit": "cw_cli.api.memory", "estimate": "cw_cli.api.memory", "estimate_run": "cw_cli.api.memory",
    "refusal_lines": "cw_cli.api.memory",
    "DICT_CONFIG_NAME": "cw_cli.api.planning", "DRY_RUN_PROBE_TIMEOUT": "cw_cli.api.planning",
    "PlannedRun": "cw_cli.api.planning", "Progress": "cw_cli.api.planning", "has_sweep": "cw_cli.api.planning",
    "plan": "cw_cli.api.planning", "read_config": "cw_cli.api.planning",
    "Run": "cw_cli.api.run", "Session": "cw_cli.api.session",
    "SWEEP_PARALLEL": "cw_cli.api.sweeps", "PlannedSweep": "cw_cli.api.sweeps", "plan_sweep": "cw_cli.api.sweeps",
    "EstimateOptions": "cw_cli.config.options", "LaunchOptions": "cw_cli.config.options",
    "set_assignments": "cw_cli.config.options",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562) and keep the name here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = [
    "DICT_CONFIG_NAME", "DRY_RUN_PROBE_TIMEOUT", "SWEEP_PARALLEL", "EstimateOptions", "Evaluation", "Export", "LaunchOptions",
    "PlannedRun", "PlannedSweep", "Progress", "Run", "Session", "WontFit", "estimate", "estimate_run", "has_sweep",
    "plan", "plan_sweep", "read_config", "refusal_lines", "set_assignments",
]  # fmt: skip
