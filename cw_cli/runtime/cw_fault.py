"""cw's fault tolerance in the trainer pod: a warned stop costs at most one step, a stall is caught.

Shipped verbatim into the run's ConfigMap (key ``cw_fault.py``, mounted at /etc/cw beside
``cw_entrypoint.py``), so it is one file with no cw imports; torch and transformers are imported
only inside the trainer processes, when a ``Trainer`` is created.

Two halves:

* :func:`supervise` runs in ``cw_entrypoint.py`` (PID 1 of the trainer container) instead of
  ``os.execvp``. It starts the command in its own process group with a ``sitecustomize`` shim
  first on ``PYTHONPATH``, so every Python process of the command (the launcher and each rank)
  calls :func:`activate`. On SIGTERM (preemption, eviction, drain, deletion; the kubelet signals
  PID 1 only, and a launcher such as torchrun would SIGKILL its workers 30 s after forwarding
  it) the supervisor does not forward the signal: it writes a stop file the ranks read at each
  step end. Once the command ends it exits with :data:`STOPPED_EXIT` (143, "terminated": the Job
  or JobSet restarts the pod, which resumes) when the ranks stopped early with a checkpoint.
  It also watches the ranks' heartbeats: no step for longer than the stall timeout dumps every
  local rank's Python stacks into ``<run folder>/.cw/stacks-<time>/rank-<N>.txt``, writes
  ``<run folder>/.cw/stall.json``, kills the command and exits with :data:`STALL_EXIT` (75,
  "temporary failure": restart from the last checkpoint).
* :func:`activate` (in every process of the command) hooks the import of
  ``transformers.trainer`` so that every ``Trainer`` (TRL's trainers, Axolotl's and verifiers'
  subclass it) gets a :class:`TrainerCallback` that, at each step end, writes a heartbeat and
  asks whether a stop was requested (the stop file, or SIGTERM to the rank itself); the ranks
  agree with an all-reduce (MAX) over a gloo group so all stop at the same step, then Trainer
  saves a checkpoint and the callback ends the process (exit 0) once every rank has saved. Each
  checkpoint Trainer saves gets a ``.cw-complete`` file after all ranks wrote theirs: a save cut
  short has none, and ``cw_entrypoint.latest_checkpoint`` skips it. In a verifiers run it also
  hooks ``verifiers.rl.trainer.trainer``: ``cw_vf_resume.py`` (shipped beside this file there
  only) makes RLTrainer resume from ``CW_RESUME_CHECKPOINT``.

Environment (set by the supervisor for its command unless noted): ``CW_FT_DIR`` (a pod-local
folder: heartbeats, stop file, stack files), ``CW_FT_RUN_DIR`` (the run's folder, for
``.cw/``), ``CW_STALL_TIMEOUT`` (seconds; unset or ``auto``: derived, see
:func:`stall_timeout`), ``CW_STALL_FLOOR`` (the floor of the derived timeout, default 600 s),
``CW_STARTUP_TIMEOUT`` (seconds to the first step; unset: not watched),
``CW_FAULT_TOLERANCE=0`` (read by cw_entrypoint: exec the command as before).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FT_DIR_ENV = "CW_FT_DIR"
RUN_DIR_ENV = "CW_FT_RUN_DIR"
STALL_TIMEOUT_ENV = "CW_STALL_TIMEOUT"
STARTUP_TIMEOUT_ENV = "CW_STARTUP_TIMEOUT"
STALL_FLOOR_ENV = "CW_STALL_FLOOR"
ENABLE_ENV = "CW_FAULT_TOLERANCE"

#: Exit code after a requested stop that left a complete checkpoint: 128 + SIGTERM, so the Job
#: or JobSet treats the pod as failed (a succeeded pod would end the Job) and the next resumes.
STOPPED_EXIT = 143
#: Exit code after a stall (EX_TEMPFAIL): the pod is restarted from the last checkpoint.
STALL_EXIT = 75
#: The signal on which every rank writes its Python stacks (faulthandler).
STACK_SIGNAL = signal.SIGUSR2
#: Name of the file that marks a checkpoint all ranks finished writing.
COMPLETE_MARKER = ".cw-complete"
STOP_FILE = "stop"
STOPPED_FILE = "stopped.json"
DEFAULT_FLOOR_S = 600.0
STALL_FACTOR = 5.0
#: Step intervals seen before the timeout is derived from them alone (until then the time to
#: the first step, which includes loading the model, stands in for a step).
MIN_INTERVALS = 3
_PREFIX = "[cw-launch]"


# --------------------------------------------------------------------------- pure parts


def stall_timeout(
    intervals: Sequence[float],
    first_step_s: float,
    *,
    floor_s: float = DEFAULT_FLOOR_S,
    factor: float = STALL_FACTOR,
    explicit_s: float | None = None,
) -> float:
    """Seconds without a step after which the run counts as stalled.

    Args:
        intervals: Seconds between consecutive heartbeats seen so far (steps, evaluation batches,
            saves).
        first_step_s: Seconds from the start of the command to its first heartbeat.
        floor_s: The derived timeout is never below this.
        factor: How many times the slowest interval the run may take before it counts as stalled.
        explicit_s: The cluster's `stall_timeout`, when set: used as it is.

    Returns:
        ``explicit_s`` if given, else ``max(floor_s, factor * slowest)`` where ``slowest`` is the
        longest interval once :data:`MIN_INTERVALS` were seen, and until then the longest of those
        and the time to the first step.
    """
    if explicit_s is not None and explicit_s > 0:
        return float(explicit_s)
    basis = max(intervals) if len(intervals) >= MIN_INTERVALS else max([first_step_s, *intervals])
    return max(float(floor_s), factor * basis)


def agree(flags: Sequence[bool | int | float]) -> bool:
    """Whether the ranks stop: any rank asked (the all-reduce MAX of their flags, one per rank)."""
    return max((float(flag) for flag in flags), default=0.0) > 0


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "", "auto") else None
    except ValueError:
        return None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _mkdirs(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _say(message: str) -> None:
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- in every rank


class _RankState:
    """What one trainer process shares between its callbacks (one per process)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.signalled = False
        self.stopping = False
        self.beats = 0
        self.last_write = 0.0
        self.group: Any = None
        self.group_ready = False
        self.stack_file: Any = None
        self._install_signals()

    def _install_signals(self) -> None:
        import faulthandler

        rank = self.rank()
        stacks = self.folder / "stacks"
        stacks.mkdir(parents=True, exist_ok=True)
        # Kept open: faulthandler writes from its C signal handler, even with the GIL held elsewhere.
        self.stack_file = open(stacks / f"rank-{rank}.txt", "a", encoding="utf-8")  # noqa: SIM115
        faulthandler.register(STACK_SIGNAL, file=self.stack_file, all_threads=True, chain=False)
        try:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:  # not the main thread: the stop file still reaches this rank
            pass

    def _on_sigterm(self, signum: int, frame: object) -> None:
        if self.signalled:  # a second SIGTERM: die as before
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.signalled = True

    @staticmethod
    def rank() -> int:
        for name in ("RANK", "LOCAL_RANK"):
            if os.environ.get(name, "").isdigit():
                return int(os.environ[name])
        return 0

    def heartbeat(self, step: int, force: bool = True, done: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_write < 1.0:
            return
        self.beats += 1
        self.last_write = now
        record = {"rank": self.rank(), "pid": os.getpid(), "step": step, "beats": self.beats, "time": now, "done": done}
        try:
            _write_json(self.folder / "ranks" / f"rank-{self.rank()}.json", record)
        except OSError:
            pass

    def stop_requested(self) -> bool:
        return self.signalled or (self.folder / STOP_FILE).exists()

    def _dist(self) -> Any:
        try:
            import torch.distributed as dist
        except ImportError:
            return None
        return dist if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 else None

    def _cpu_group(self, dist: Any) -> Any:
        # A gloo group keeps the agreement on the CPU: no device sync per step under NCCL.
        if not self.group_ready:
            self.group_ready = True
            self.group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        return self.group

    def agreed_stop(self) -> bool:
        mine = self.stop_requested()
        dist = self._dist()
        if dist is None:
            return mine
        import torch

        flag = torch.tensor([1.0 if mine else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._cpu_group(dist))
        return agree([flag.item()])

    def barrier(self) -> None:
        dist = self._dist()
        if dist is not None:
            dist.barrier(group=self._cpu_group(dist))


_STATE: _RankState | None = None
_CALLBACK_CLASS: Any = None


def _rank_state() -> _RankState | None:
    global _STATE
    folder = os.environ.get(FT_DIR_ENV)
    if not folder:
        return None
    if _STATE is None:
        _STATE = _RankState(Path(folder))
    return _STATE


def _progress_reporter() -> Any:
    """cw_progress's reporter (shipped beside this file), or None where it is not there."""
    try:
        import cw_progress
    except ImportError:
        return None
    return cw_progress.reporter()


def callback_class() -> Any:
    """The TrainerCallback cw adds to every Trainer (built on first use: it imports transformers)."""
    global _CALLBACK_CLASS
    if _CALLBACK_CLASS is not None:
        return _CALLBACK_CLASS
    from transformers import TrainerCallback

    progress = _progress_reporter()

    class CwFaultCallback(TrainerCallback):
        """Heartbeats, the agreed stop at a step boundary, and the complete-checkpoint marker."""

        def __init__(self, state: _RankState) -> None:
            self.cw = state

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.cw.heartbeat(state.global_step)
            if progress:  # cw_progress.py: the line `cw status` reads
                progress.train_begin(args, state)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if progress:
                progress.log(args, state, logs)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.cw.heartbeat(state.global_step)
            if not self.cw.stopping and self.cw.agreed_stop():
                self.cw.stopping = True
                _say(f"rank {self.cw.rank()}: stop requested: saving a checkpoint at step {state.global_step}")
                control.should_save = True
                control.should_training_stop = True

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # What follows (the final save, a push to the Hub) takes no steps: not a stall.
            self.cw.heartbeat(state.global_step, done=True)

        def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.cw.heartbeat(state.global_step, force=False)  # evaluation is progress too

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.cw.barrier()  # every rank has written its part of the checkpoint
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and checkpoint.is_dir():
                share_with_readers(checkpoint)
                marker = checkpoint / COMPLETE_MARKER
                with open(marker, "w", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": state.global_step, "time": _utc(time.time())}) + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                if progress:
                    progress.saved(state, str(checkpoint))
            self.cw.heartbeat(state.global_step)
            if self.cw.stopping:
                if state.is_world_process_zero:
                    record = {"step": state.global_step, "checkpoint": str(checkpoint), "time": time.time()}
                    _write_json(self.cw.folder / STOPPED_FILE, record)
                self.cw.barrier()
                _say(f"rank {self.cw.rank()}: checkpoint {checkpoint} is complete; exiting to be resumed")
                raise SystemExit(0)  # skips the script's final save: the run is not finished

    _CALLBACK_CLASS = CwFaultCallback
    return CwFaultCallback


def attach(trainer: Any) -> None:
    """Add cw's callback to ``trainer`` (once), when cw's supervisor runs this process."""
    state = _rank_state()
    if state is None:
        return
    cls = callback_class()
    if not any(isinstance(cb, cls) for cb in trainer.callback_handler.callbacks):
        trainer.add_callback(cls(state))


def patch_trainer(module: Any) -> None:
    """Make every ``module.Trainer`` (and subclass) call :func:`attach` at the end of ``__init__``."""
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls.__init__, "_cw_patched", False):
        return
    original = trainer_cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        attach(self)

    __init__._cw_patched = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    trainer_cls.__init__ = __init__


def _arm_process_stacks() -> None:
    """Let a hang before the first step be seen: this process writes its stacks on SIGUSR2 to
    ``stacks/pid-<pid>.txt`` until a rank's own file takes over (``_RankState``). Only processes
    with such a file are signalled: SIGUSR2 would end any other."""
    import faulthandler

    folder = os.environ.get(FT_DIR_ENV)
    if not folder:
        return
    try:
        stacks = _mkdirs(Path(folder) / "stacks")
        global _PROCESS_STACKS
        _PROCESS_STACKS = open(stacks / f"pid-{os.getpid()}.txt", "a", encoding="utf-8")  # noqa: SIM115
        faulthandler.register(STACK_SIGNAL, file=_PROCESS_STACKS, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        pass


_PROCESS_STACKS: Any = None


def _patch_verifiers(module: Any) -> None:
    """verifiers' RLTrainer resumes (``cw_vf_resume.py``, shipped beside this file in a verifiers
    run only: without it, nothing is patched)."""
    try:
        import cw_vf_resume
    except ImportError:
        return
    cw_vf_resume.patch(module)


#: Module -> what patches it once it is imported (in every process of the command).
_PATCHES = {"transformers.trainer": patch_trainer, "verifiers.rl.trainer.trainer": _patch_verifiers}


def activate() -> None:
    """Patch ``transformers.trainer.Trainer`` (and verifiers' RLTrainer) as soon as they are
    imported (called by the shim)."""
    import importlib.abc

    _arm_process_stacks()
    waiting = {}
    for target, patcher in _PATCHES.items():
        if target in sys.modules:
            patcher(sys.modules[target])
        else:
            waiting[target] = patcher
    if not waiting:
        return
    if any(getattr(finder, "cw_fault_hook", False) for finder in sys.meta_path):
        return  # already armed in this process (a second shim on the path, or a second copy of this file)

    class _Loader(importlib.abc.Loader):
        def __init__(self, inner: Any, patcher: Any) -> None:
            self.inner = inner
            self.patcher = patcher

        def create_module(self, spec: Any) -> Any:
            return self.inner.create_module(spec)

        def exec_module(self, module: Any) -> None:
            self.inner.exec_module(module)
            self.patcher(module)

    class _Finder(importlib.abc.MetaPathFinder):
        cw_fault_hook = True

        def find_spec(self, name: str, path: Any, target_module: Any = None) -> Any:
            patcher = waiting.get(name)
            if patcher is None:
                return None
            for finder in sys.meta_path:
                # Any cw hook (this one, or one another copy armed) would ask the others again: endless.
                if getattr(finder, "cw_fault_hook", False) or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target_module)
                if spec is not None:
                    if spec.loader is not None:
                        spec.loader = _Loader(spec.loader, patcher)
                    return spec
            return None

    sys.meta_path.insert(0, _Finder())


SHIM = '''"""cw: fault tolerance for the trainer (cw_fault.activate), then the image's own sitecustomize."""
import os as _os
import sys as _sys

try:
    import cw_fault as _cw_fault

    _cw_fault.activate()
except Exception as _exc:  # never stop a process from starting
    print(f"[cw-launch] fault tolerance not active in this process: {_exc}", file=_sys.stderr)


def _chain():
    import importlib.machinery
    import importlib.util

    here = _os.path.dirname(_os.path.abspath(__file__))
    paths = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
'''


# --------------------------------------------------------------------------- the supervisor


class _Watch:
    """The supervisor's view of the local ranks' heartbeats."""

    def __init__(
        self, folder: Path, started: float, explicit_s: float | None, floor_s: float, startup_s: float | None = None
    ) -> None:
        self.folder = folder
        self.started = started
        self.explicit_s = explicit_s
        self.floor_s = floor_s
        self.startup_s = startup_s
        self.seen: dict[str, int] = {}
        self.last_change: float | None = None
        self.first_s: float | None = None
        self.intervals: list[float] = []
        self.step = 0
        self.done = False

    def ranks(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted((self.folder / "ranks").glob("rank-*.json")):
            try:
                found.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
        return found

    def poll(self, now: float) -> None:
        ranks = self.ranks()
        beats = {str(r.get("rank")): int(r.get("beats", 0)) for r in ranks}
        if beats and beats != self.seen:
            if self.last_change is None:
                self.first_s = now - self.started
            else:
                self.intervals.append(now - self.last_change)
            self.last_change = now
            self.seen = beats
            self.step = max(int(r.get("step", 0)) for r in ranks)
            self.done = all(r.get("done") for r in ranks)

    def processes(self) -> list[dict[str, Any]]:
        """The local ranks, or before any heartbeat every Python process that armed its stack file."""
        return self.ranks() or [{"pid": int(p.stem[4:])} for p in (self.folder / "stacks").glob("pid-*.txt")]

    def timeout(self) -> float:
        if self.last_change is None and self.startup_s is not None:
            return self.startup_s
        return stall_timeout(
            self.intervals, self.first_s or 0.0, floor_s=self.floor_s, explicit_s=self.explicit_s
        )

    def stalled(self, now: float) -> bool:
        if self.done:
            return False
        if self.last_change is None:  # before the first step: watched only with a startup timeout
            return self.startup_s is not None and now - self.started > self.startup_s
        return now - self.last_change > self.timeout()


def _dump_stacks(ft_dir: Path, run_dir: Path, ranks: list[dict[str, Any]], stamp: str) -> Path:
    """Signal every local rank to write its stacks (SIGCONT wakes a stopped one) and copy them.

    Before any rank has stepped (no heartbeats), every Python process of the command that armed
    its own stack file (``stacks/pid-<pid>.txt``) is asked instead."""
    target = run_dir / ".cw" / f"stacks-{stamp}"
    target.mkdir(parents=True, exist_ok=True)
    stacks = ft_dir / "stacks"
    # file name (rank-N or pid-N) -> pid
    writers = {f"rank-{int(r['rank'])}": int(r["pid"]) for r in ranks} or {
        path.stem: int(path.stem[4:]) for path in sorted(stacks.glob("pid-*.txt"))
    }
    sizes: dict[str, int] = {}
    for name, pid in writers.items():
        source = stacks / f"{name}.txt"
        sizes[name] = source.stat().st_size if source.exists() else 0
        for sig in (STACK_SIGNAL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + 10
    pending = set(sizes)
    while pending and time.monotonic() < deadline:
        time.sleep(0.2)
        for name in list(pending):
            source = stacks / f"{name}.txt"
            if source.exists() and source.stat().st_size > sizes[name]:
                pending.discard(name)
    time.sleep(0.5)  # let the last writes finish
    for name, start in sizes.items():
        try:
            with open(stacks / f"{name}.txt", "rb") as fh:
                fh.seek(start)
                text = fh.read()
        except OSError:  # a rank that never armed faulthandler (it died, or hung before activate)
            text = b""
        (target / f"{name}.txt").write_bytes(text or b"(no stacks written: the process did not answer)\n")
    return target


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_all(child_pid: int, ranks: list[dict[str, Any]]) -> None:
    """SIGKILL the command and every rank: torchrun starts its workers in sessions of their own."""
    _kill_group(child_pid, signal.SIGKILL)
    for r in ranks:
        try:
            pgid = os.getpgid(int(r["pid"]))
        except (ProcessLookupError, PermissionError, KeyError, ValueError):
            continue
        if pgid != os.getpgrp():
            _kill_group(pgid, signal.SIGKILL)
        try:
            os.kill(int(r["pid"]), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def share_with_readers(folder: str | os.PathLike) -> None:
    """Make what the trainer wrote under ``folder`` readable by the volume's other users: files
    group- and world-readable, folders searchable (symbolic links left alone).

    Some files are written through ``mkstemp`` (transformers' safetensors shards among them), whose
    mode is 0600 whatever the umask; cw's reader pod runs as another, non-root user (on a volume
    with ``fsGroup`` too, 0600 gives the group nothing), and could not read the model. Found on the
    test cluster's real node.
    """
    for root, dirs, files in os.walk(os.fspath(folder)):
        for names, bits in ((dirs, 0o055), (files, 0o044)):
            for name in names:
                path = os.path.join(root, name)
                try:
                    mode = os.lstat(path).st_mode
                    if not (mode & 0o170000 == 0o120000 or mode & bits == bits):  # not a link, bits missing
                        os.chmod(path, (mode & 0o7777) | bits)
                except OSError:
                    continue  # removed meanwhile, or not ours: the reader says what it cannot read


def supervise(command: list[str], run_dir: str | os.PathLike | None = None, poll_s: float = 0.5) -> int:
    """Run ``command`` with cw's fault tolerance and return the pod's exit code.

    Args:
        command: The trainer's command (with its resume arguments).
        run_dir: The run's folder (``.cw/`` for stall reports); default the working directory.
        poll_s: How often the heartbeats and the child are looked at.

    Returns:
        The command's exit code (128 + N when a signal N ended it), :data:`STOPPED_EXIT` after a
        requested stop that saved a checkpoint, or :data:`STALL_EXIT` after a stall.
    """
    import shutil
    import subprocess
    import tempfile

    run = Path(run_dir or os.getcwd())
    try:
        ft_dir = Path(tempfile.mkdtemp(prefix="cw-ft-"))
    except OSError:  # no writable temporary folder in the image: the run's folder is writable
        ft_dir = Path(tempfile.mkdtemp(prefix="ft-", dir=_mkdirs(run / ".cw")))
    shim = ft_dir / "site"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM, encoding="utf-8")
    here = str(Path(__file__).resolve().parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), here, env.get("PYTHONPATH", "")) if p)
    env[FT_DIR_ENV] = str(ft_dir)
    env[RUN_DIR_ENV] = str(run)
    explicit = _number(env.get(STALL_TIMEOUT_ENV))
    floor = _number(env.get(STALL_FLOOR_ENV)) or DEFAULT_FLOOR_S
    watch = _Watch(ft_dir, time.monotonic(), explicit, floor, _number(env.get(STARTUP_TIMEOUT_ENV)))

    requests: list[tuple[int, float]] = []

    signalled_wall = [0.0]

    def on_signal(signum: int, frame: object) -> None:
        requests.append((signum, time.monotonic()))
        signalled_wall[0] = signalled_wall[0] or time.time()
        if len(requests) == 1 and watch.ranks():  # at once: the ranks look at each step end
            (ft_dir / STOP_FILE).write_text("stop\n", encoding="utf-8")

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    child = subprocess.Popen(command, env=env, start_new_session=True)
    handled = 0
    stalled = False
    try:
        while True:
            try:
                code = child.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            while handled < len(requests):
                signum, _ = requests[handled]
                handled += 1
                if handled == 1 and (ft_dir / STOP_FILE).exists():
                    _say(f"{signal.Signals(signum).name}: the ranks stop at the next step end and save a checkpoint")
                else:  # nothing to save yet (no rank has stepped), or asked twice: stop now
                    _say(f"{signal.Signals(signum).name}: stopping the command")
                    _kill_group(child.pid, signal.SIGTERM)
            if requests:
                continue  # stopping: a long save is no stall
            watch.poll(now)
            if watch.stalled(now):
                stalled = True
                _report_stall(watch, ft_dir, run)
                _kill_all(child.pid, watch.processes())
                child.wait()
                code = STALL_EXIT
                break
    finally:
        if child.poll() is None:
            _kill_all(child.pid, watch.processes())
            child.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    share_with_readers(run)  # the final model too, whatever the outcome
    stopped = ft_dir / STOPPED_FILE
    # The ranks stopped early (asked here, or a rank got SIGTERM itself): not a finished run.
    if not stalled and code == 0 and stopped.exists():
        record = json.loads(stopped.read_text(encoding="utf-8"))
        timing = ""
        if requests:
            saved_s = float(record.get("time", signalled_wall[0])) - signalled_wall[0]
            timing = (f" (complete {saved_s:.1f} s after the signal, the command ended after "
                      f"{time.monotonic() - requests[0][1]:.1f} s)")  # fmt: skip
        _say(f"stopped at step {record['step']} with a complete checkpoint {record['checkpoint']}{timing}; "
             "a relaunch resumes from it")  # fmt: skip
        code = STOPPED_EXIT
    shutil.rmtree(ft_dir, ignore_errors=True)
    return 128 - code if code < 0 else code


def _report_stall(watch: _Watch, ft_dir: Path, run: Path) -> None:
    """Dump the stacks, write ``.cw/stall.json`` and say so in the log."""
    now_wall = time.time()
    since = now_wall - (time.monotonic() - (watch.last_change or watch.started))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_wall))
    ranks = watch.ranks()
    stacks = _dump_stacks(ft_dir, run, ranks, stamp)
    report = {
        "stalled_since": _utc(since),
        "detected_at": _utc(now_wall),
        "timeout_s": round(watch.timeout(), 1),
        "timeout_derived": watch.explicit_s is None,
        "last_step": watch.step,
        "stacks": str(stacks.relative_to(run)),
        "ranks": sorted(int(r["rank"]) for r in ranks),
        "host": os.environ.get("HOSTNAME", ""),
        "exit_code": STALL_EXIT,
    }
    _write_json(run / ".cw" / "stall.json", report)
    _say(f"stalled since {report['stalled_since']} (no step for {report['timeout_s']} s after step "
         f"{report['last_step']}); stacks in {stacks}; restarting from the last checkpoint")  # fmt: skip
