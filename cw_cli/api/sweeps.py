"""Sweeps: every run of a grid planned (so validated) before any is created, then created all or none."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.api.planning import PlannedRun, Progress, _quiet, _registry, config_source, plan
from cw_cli.config.options import LaunchOptions, launch_options, set_assignments
from cw_cli.errors import ClusterUnreachable, ConfigError, Conflict, CwError, Interrupted

if TYPE_CHECKING:
    from concurrent.futures import Future

    from cw_cli.api.run import Run
    from cw_cli.api.session import Session
    from cw_cli.client.connection import Kube
    from cw_cli.config.yaml_source import YamlSource
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.sweep import SweepSpec

#: Runs of a sweep created at once: enough to hide request latency, few enough for the API
#: server's default in-flight limits and the client's connection pool (10).
SWEEP_PARALLEL = 8


class PlannedSweep(Struct):
    """The runs of a sweep, all planned (so all valid) before any is submitted.

    Attributes:
        name: The sweep's name (its label; each run is ``<name>-<index>``).
        runs: One planned run per point.
        points: The overrides of each run, in the same order.
    """

    name: str
    runs: list[PlannedRun]
    points: list[dict[str, Any]]

    def to_yaml(self) -> str:
        """Every run's manifests, one YAML stream."""
        return "---\n".join(run.to_yaml() for run in self.runs)


def plan_sweep(
    config: str | Path | Mapping[str, Any] | YamlSource,
    framework: str,
    training_type: str,
    options: LaunchOptions | None = None,
    *,
    sweep: list[str] | None = None,
    registry: FrameworkRegistry | None = None,
    connect: Callable[[], Kube] | None = None,
    if_reachable: bool = False,
    base_dir: Path | None = None,
    **flags: Any,
) -> PlannedSweep:
    """Plan every run of a sweep: the config's ``sweep:`` block and/or ``--sweep key=v1,v2`` flags.

    Each run is the config with one point's overrides applied after ``set`` (see
    :mod:`cw_cli.sweep`), named ``<sweep name>-<index>``, labelled with the sweep, writing to its
    own folder, grouped in W&B under the sweep's name. All are validated before this returns:
    one invalid point refuses the whole sweep, naming it.

    Args:
        config: A config file, a mapping or a file read by :func:`~cw_cli.api.read_config` (with
            or without a ``sweep`` block).
        framework: The framework.
        training_type: Its training type.
        options: The launch options common to every run, as for :func:`~cw_cli.api.plan`;
            ``name`` is the sweep's name (default: generated, unique).
        sweep: ``key=v1,v2,...`` grid axes over the file's (a flag replaces the file's values of
            its key).
        registry: Frameworks to pick from.
        connect: See :func:`~cw_cli.api.plan` (the cluster is asked once for the whole sweep).
        if_reachable: See :func:`~cw_cli.api.plan`.
        base_dir: See :func:`~cw_cli.api.plan`.
        **flags: Fields of ``options`` as keywords (``name``, ``gpu``, ``namespace``, ...).

    Raises:
        ConfigError: The sweep or one of its runs is invalid (every problem, by run).
    """
    from cw_cli import sweep as sweeps

    options = launch_options(options, flags)
    source, spec = _sweep_source(config, base_dir, sweep or [])
    sweep_name = _sweep_name(options.name, framework, training_type, source)
    points = sweeps.check_size(spec, sweep_name)
    registry = registry or _registry()
    runs: list[PlannedRun] = []
    problems: list[str] = []
    common = options.assignments()
    for run_name, point in zip(sweeps.run_names(sweep_name, len(points)), points):
        try:
            runs.append(plan(source, framework, training_type, options.with_(name=run_name, set=[*common, *set_assignments(point)]),
                             registry=registry, sweep=sweep_name, connect=connect, if_reachable=True))  # fmt: skip
        except ConfigError as exc:
            shown = ", ".join(f"{key}={value!r}" for key, value in point.items())
            problems += [f"run {run_name} ({shown}): {issue}" for issue in exc.issues]
    if problems:
        raise ConfigError(problems, hint="fix the sweep's values; no run of it was created")
    if connect is not None and not if_reachable:  # a submit follows: fail before anything is created
        _check_reachable(runs, connect)
    return PlannedSweep(sweep_name, runs, points)


def _sweep_source(
    config: str | Path | Mapping[str, Any] | YamlSource, base_dir: Path | None, flags: list[str]
) -> tuple[YamlSource, SweepSpec]:
    """The config without its ``sweep`` block, and the sweep of the block and the flags.

    Raises:
        ConfigError: Neither a block nor a flag, or either is invalid.
    """
    from cw_cli import sweep as sweeps
    from cw_cli.config.yaml_source import YamlSource, load_config_file

    path, source = config_source(config, base_dir)
    source = source or load_config_file(path)
    data = dict(source.data)
    block = data.pop(sweeps.SWEEP_KEY, None)
    spec = sweeps.from_config(block, source.where((sweeps.SWEEP_KEY,))) if block is not None else None
    spec = sweeps.combine(spec, flags)
    if spec is None:
        raise ConfigError([f"{source.path}: no `sweep` block and no --sweep"], hint="e.g. --sweep learning_rate=1e-5,2e-5")
    stripped = YamlSource(path=source.path, data=data, lines=source.lines, yaml11_numbers=source.yaml11_numbers)
    return stripped, spec


def _sweep_name(name: str | None, framework: str, training_type: str, source: YamlSource) -> str:
    """The sweep's name: the one given (checked), else a generated one that leaves room for the index."""
    from cw_cli.render.naming import generate_run_name, validate_run_name
    from cw_cli.sweep import MAX_SWEEP_NAME

    if name is not None:
        return validate_run_name(name)
    return generate_run_name(framework, training_type, source.path.stem)[:MAX_SWEEP_NAME].rstrip("-")


def _check_reachable(runs: list[PlannedRun], connect: Callable[[], Kube]) -> None:
    """Fail before a submit creates anything when the cluster could not be asked (or reached).

    Raises:
        ClusterUnreachable: A run was planned without the cluster's answers, or it is down now.
    """
    for run in runs:
        if run.request.facts.not_asked:
            raise ClusterUnreachable(run.request.facts.not_asked, hint="is the cluster up? check `kubectl cluster-info`")
    connect()


def submit_sweep(
    session: Session, planned: PlannedSweep, *, resume: bool = False, progress: Progress = _quiet,
    parallel: int = SWEEP_PARALLEL, check_memory: bool = False, force: bool = False, gpu_memory: str | int | None = None,
) -> list[Run]:  # fmt: skip
    """Create every run of a sweep, or none (:meth:`cw_cli.api.Session.submit_sweep`).

    Runs are created ``parallel`` at a time on the session's connection pool, each
    all-or-nothing as :meth:`~cw_cli.api.Session.submit`. If one fails, the runs this call
    created are deleted again before the error propagates, unless ``resume``: then what exists
    stays, and a later call with ``resume`` skips the runs already on the cluster and creates the
    rest. With ``check_memory`` every run is checked before any is created.

    Raises:
        WontFit: ``check_memory`` and a run clearly cannot fit (nothing was created).
        CwError: The first failure (its hint says what was removed).
        Interrupted: Ctrl-C; the sweep's runs created so far are removed.
    """
    session.kube  # noqa: B018 - connect once, before the threads share the connection pool
    if check_memory:
        _check_every_run(session, planned, gpu_memory, force, progress)
    futures, failure = _create_all(session, planned, resume, progress, parallel)
    if failure is None:
        return [f.result()[0] for f in futures]
    if resume and not isinstance(failure, KeyboardInterrupt):
        raise failure
    created = [f.result()[0] for f in futures if not f.cancelled() and not f.exception() and f.result()[1]]
    raise _rolled_back(created, failure)


def _check_every_run(
    session: Session, planned: PlannedSweep, gpu_memory: str | int | None, force: bool, progress: Progress
) -> None:
    """The memory check of every run before any is created; one node list for all."""
    said: set[str] = set()

    def once(line: str) -> None:  # runs that differ only in, say, the learning rate say it once
        if line not in said:
            said.add(line)
            progress(line)

    for run in planned.runs:
        session.check_memory(run, gpu_memory=gpu_memory, force=force, progress=once)


def _create_all(
    session: Session, planned: PlannedSweep, resume: bool, progress: Progress, parallel: int
) -> tuple[list[Future[tuple[Run, bool]]], BaseException | None]:
    """Submit the runs ``parallel`` at a time; on the first failure cancel the rest and let the
    runs being created finish (or roll themselves back).

    Returns:
        Each run's future (its run and whether this call created it), and the first failure.
    """
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    from cw_cli.k8s.queries import sequential_reads

    total = len(planned.runs)

    def create(index: int, run: PlannedRun) -> tuple[Run, bool]:
        try:
            with sequential_reads():  # the runs already go in parallel
                made = session.submit(run)
        except Conflict:
            if not resume:
                raise
            progress(f"[{index}/{total}] {run.name} exists: kept")
            return session.run(run.name), False
        progress(f"[{index}/{total}] created {run.name}")
        return made, True

    failure: BaseException | None = None
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = [pool.submit(create, index, run) for index, run in enumerate(planned.runs, 1)]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
            failure = next((f.exception() for f in futures if f.done() and f.exception()), None)
        except KeyboardInterrupt as exc:
            failure = exc
        if failure is not None:
            for future in futures:
                future.cancel()
            wait(futures)
    return futures, failure


def _rolled_back(created: list[Run], failure: BaseException) -> BaseException:
    """Delete the runs a failed sweep created; the error to raise says what was removed."""
    left = []
    for made in reversed(created):
        try:
            made.delete()
        except CwError:
            left.append(made.name)
    note = f"removed the sweep's {len(created)} run(s) it had created" if not left else (
        f"could not remove: {', '.join(left)}"
    )  # fmt: skip
    if isinstance(failure, KeyboardInterrupt):
        return Interrupted(f"interrupted; {note}")
    if isinstance(failure, CwError):
        failure.hint = f"{failure.hint}; {note}" if failure.hint else f"{note}; --resume-sweep keeps what was created instead"
    return failure
