"""cw's notifications from the trainer pod: the run succeeded, failed (and why), stalled, restarted.

Shipped verbatim into the run's ConfigMap (key ``cw_notify.py``, mounted at /etc/cw beside
``cw_entrypoint.py``) when the config has ``notify:``, so it is one file with no cw imports
(standard library only; Apprise is imported only in the sender process).

``cw_entrypoint.py`` calls :func:`begin` once the run's folder is claimed and
:meth:`Notifier.ended` with the pod's exit code. Only the first pod of a run (node rank 0) sends.

* ``begin`` records the attempt in ``<run>/.cw/notify.json``; a folder that already records one
  means this pod is a restart (after a stall, a warned stop, an OOM kill, a lost node): it sends
  ``restarted`` with the previous attempt's end and the checkpoint it resumes from. It also
  keeps the last 64 KiB of the pod's stderr (a copy: everything still reaches the log) so that a
  failure can say why (CUDA out of memory, an NCCL timeout, the exception's last line).
* ``ended`` sends ``succeeded`` (exit 0), ``stalled`` (75, from ``.cw/stall.json``) or ``failed``
  (anything else, with the reason); 143 (a warned stop with a checkpoint: the pod is restarted
  and resumes) is no failure and sends nothing.

Sending never blocks or fails the run: each message goes through a child process (this file
with ``--send``) that a watchdog kills after :data:`SEND_TIMEOUT_S` (plus the time an install of
Apprise may take); every error is one ``[cw-notify]`` line in the log. Apprise comes from the
image when it has it, else it is pip-installed at start-up, in the background and time-boxed,
into a folder of its own (:data:`LIB_DIRS`, not the trainer's environment); without it the run
goes on without notifications.

Environment: ``CW_NOTIFY`` (JSON, set by cw: ``run``, ``urls`` with ``{KEY}`` placeholders,
``events``, ``keys``: placeholder -> the variable holding the Secret's value, read from the
Secret by the pod itself), ``CW_NOTIFY_SEND_TIMEOUT`` (seconds, default 10).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

NOTIFY_ENV = "CW_NOTIFY"
TIMEOUT_ENV = "CW_NOTIFY_SEND_TIMEOUT"
LIB_ENV = "CW_NOTIFY_LIB"  # where Apprise is installed when the image lacks it (default: LIB_DIRS)
SEND_TIMEOUT_S = 10.0
INSTALL_TIMEOUT_S = 120.0
APPRISE_REQUIREMENT = "apprise>=1.9,<3"
#: Where Apprise is installed when the image lacks it: pod-local first, the run's folder if /tmp is read-only.
LIB_DIRS = ("/tmp/cw-notify-lib",)
STATE_FILE = "notify.json"
STALL_FILE = "stall.json"
STALL_EXIT = 75  # cw_fault.STALL_EXIT
STOPPED_EXIT = 143  # cw_fault.STOPPED_EXIT
TAIL_BYTES = 64 * 1024
PLACEHOLDER = re.compile(r"\{([-._a-zA-Z0-9]{1,253})\}")  # cw_cli.features.notify.config.PLACEHOLDER
_PREFIX = "[cw-notify]"
# The texts cw status matches in a failed trainer's log (cw_cli/diagnosis/logs.py), held equal by a unit test.
CUDA_OOM = r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"
CUDA_OOM_SIZE = r"Tried to allocate ([\d.]+ [KMGT]?i?B)"
NCCL_TIMEOUT = r"Watchdog caught collective operation timeout|NCCL operations have failed or timed out|NCCL operation timed out"
_EXCEPTION = r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$"
_LAUNCHER_ERRORS = r"^(subprocess\.CalledProcessError|(torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError)\b"
_SIGNALS = {137: "SIGKILL", 143: "SIGTERM", 139: "SIGSEGV", 134: "SIGABRT", 130: "SIGINT"}


def log(message: str) -> None:
    """One line in the pod's log (stderr)."""
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- what is said


def failure_reason(code: int, tail: str) -> str:
    """Why the command failed, in cw status's words: the exit code, and what the log's tail shows.

    Args:
        code: The pod's exit code.
        tail: The last lines of the command's stderr.
    """
    lines = [line.rstrip() for line in tail.splitlines() if line.strip()]
    said = f"exit code {code}" + (f" ({_SIGNALS[code]})" if code in _SIGNALS else "")
    oom = _last(lines, CUDA_OOM)
    if oom is not None:
        size = next((m.group(1) for m in map(re.compile(CUDA_OOM_SIZE).search, lines[: oom + 1][::-1]) if m), None)
        wanted = f" (it tried to allocate {size} more)" if size else ""
        return f"the trainer ran out of GPU memory: torch.OutOfMemoryError, CUDA out of memory{wanted}; {said}"
    if _last(lines, NCCL_TIMEOUT) is not None:
        return f"an NCCL collective timed out (one rank stalled or died first); {said}"
    if code == 137:
        return (f"{said}: killed, most often for passing the pod's memory limit (OOMKilled; CPU memory, not GPU "
                "memory): raise `memory:`")  # fmt: skip
    # A launcher (accelerate, torchrun) ends with its own error about the rank that failed: the rank's is the cause.
    own = [i for i, line in enumerate(lines) if re.search(_EXCEPTION, line) and not re.search(_LAUNCHER_ERRORS, line)]
    error = own[-1] if own else _last(lines, _EXCEPTION)
    if error is not None:
        return f"{said}: {_cut(lines[error])}"
    return said + (f": {_cut(lines[-1])}" if lines else "")


def _last(lines: list[str], pattern: str) -> int | None:
    compiled = re.compile(pattern)
    return next((i for i in range(len(lines) - 1, -1, -1) if compiled.search(lines[i])), None)


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def stall_text(run_dir: Path) -> str:
    """The stall ``cw_fault`` recorded in ``<run>/.cw/stall.json``, as cw status says it."""
    try:
        stall = json.loads((run_dir / ".cw" / STALL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stall = None
    if not isinstance(stall, dict):  # unreadable, or not cw_fault's
        return "no step for longer than the stall timeout"
    return (f"no step since {stall.get('stalled_since', '?')} after step {stall.get('last_step', '?')} (timeout "
            f"{stall.get('timeout_s', '?')} s); stacks in {run_dir / str(stall.get('stacks', '.cw'))}")  # fmt: skip


def message(event: str, run: str, detail: str) -> tuple[str, str, str]:
    """(title, body, Apprise notify type) of one event."""
    titles = {
        "succeeded": (f"cw: {run} succeeded", "success"),
        "failed": (f"cw: {run} failed", "failure"),
        "stalled": (f"cw: {run} stalled; restarting from its last checkpoint", "warning"),
        "restarted": (f"cw: {run} restarted", "warning"),
    }
    title, kind = titles[event]
    host = os.environ.get("HOSTNAME", "")
    body = detail + (f"\npod: {host}" if host else "") + f"\nmore: cw status {run}"
    return title, body, kind


# --------------------------------------------------------------------------- the notifier


class _Tail:
    """A copy of the last bytes written to this process's stderr (fd 2) and its children's.

    fd 2 becomes a pipe that a daemon thread copies to the real stderr, keeping the last
    :data:`TAIL_BYTES`. The thread never stops reading, whatever happens to the copy: a writer
    never waits on it.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.lock = threading.Lock()
        self.original = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self.read_end = read_end
        self.thread = threading.Thread(target=self._copy, name="cw-notify-tail", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        while True:
            try:
                chunk = os.read(self.read_end, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self.lock:
                self.buffer += chunk
                del self.buffer[:-TAIL_BYTES]
            try:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(self.original, view) :]
            except OSError:
                pass  # the log is gone: keep draining, never block the writers

    def stop(self) -> str:
        """Give fd 2 back and return the tail (what was written until now)."""
        sys.stderr.flush()
        os.dup2(self.original, 2)  # the pipe's last writer here is gone; children still holding it are dead
        self.thread.join(timeout=0.5)
        with self.lock:
            return self.buffer.decode("utf-8", errors="replace")


class Notifier:
    """Sends one run's events from its first pod (see the module's docstring)."""

    def __init__(self, settings: dict[str, Any], run_dir: Path, capture: bool = True) -> None:
        self.settings = settings
        self.run = str(settings.get("run") or run_dir.name)
        self.events = set(settings.get("events") or ())
        self.run_dir = run_dir
        self.senders: list[tuple[subprocess.Popen, float]] = []
        self.tail: _Tail | None = None
        self.attempt = 1
        if capture and "failed" in self.events:
            try:
                self.tail = _Tail()
            except OSError as exc:
                log(f"cannot keep the log's tail, a failure will give only its exit code: {exc}")
        self.lib = _lib_dir(run_dir)
        self.install: tuple[subprocess.Popen, float] | None = None
        if not _importable():
            self.install = self._start([sys.executable, os.path.abspath(__file__), "--install", str(self.lib)],
                                       INSTALL_TIMEOUT_S)  # fmt: skip

    def started(self, resume_note: str = "") -> None:
        """Record this attempt; send ``restarted`` when an earlier one of the run used the folder."""
        _safely(self._started, resume_note)

    def _started(self, resume_note: str) -> None:
        state = self._state()
        previous = state.get("attempt")
        self.attempt = int(previous) + 1 if isinstance(previous, int) else 1
        state.update(attempt=self.attempt, started=time.time())
        self._save(state)
        if self.attempt == 1 or "restarted" not in self.events:
            return
        end = state.get("end") if isinstance(state.get("end"), dict) else None
        if end and end.get("attempt") == previous:
            why = str(end.get("reason", ""))
        else:
            why = "the previous pod ended without a word from cw: killed (the memory limit, a lost node, a deletion)"
        self.send("restarted", f"attempt {self.attempt}, after {why}" + (f"; {resume_note}" if resume_note else ""))

    def ended(self, code: int) -> None:
        """Send the attempt's end (``code``: the pod's exit code) and wait for the senders, bounded."""
        _safely(self._ended, code)

    def _ended(self, code: int) -> None:
        tail = self.tail.stop() if self.tail is not None else ""
        self.tail = None
        if code == 0:
            event, reason = "succeeded", "the command finished (exit code 0)"
        elif code == STALL_EXIT:
            event, reason = "stalled", f"a stall: {stall_text(self.run_dir)}"
        elif code == STOPPED_EXIT:
            event, reason = "", "a warned stop (SIGTERM: preemption, eviction, a drain) that saved a checkpoint"
        else:
            event, reason = "failed", failure_reason(code, tail)
        state = self._state()
        state["end"] = {"attempt": state.get("attempt", self.attempt), "code": code, "reason": reason, "time": time.time()}
        self._save(state)
        if event and event in self.events:
            self.send(event, reason if event != "succeeded" else f"{reason}; outputs in {self.run_dir}")
        self.wait()

    def send(self, event: str, detail: str) -> None:
        """Start the sender of one event (returns at once)."""
        title, body, kind = message(event, self.run, detail)
        payload = {"urls": self.settings.get("urls", []), "keys": self.settings.get("keys", {}), "title": title,
                   "body": body, "type": kind, "lib": str(self.lib)}  # fmt: skip
        limit = _send_timeout()
        if self.install is not None and self.install[0].poll() is None:  # still installing Apprise: its time too
            limit += max(0.0, self.install[1] - time.monotonic())
        self._start([sys.executable, os.path.abspath(__file__), "--send"], limit, json.dumps(payload))

    def wait(self) -> None:
        """Wait for the senders, each at most until its deadline (then it is killed)."""
        for process, deadline in self.senders:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                log(f"a notification was not sent within its time limit; gave up (pid {process.pid})")
        self.senders = []

    def detach(self) -> None:
        """Give stderr back before the entrypoint ``exec``s the command (nothing is told at its end)."""
        if self.tail is not None:
            self.tail.stop()
            self.tail = None

    def _start(self, argv: list[str], limit: float, stdin: str | None = None) -> tuple[subprocess.Popen, float] | None:
        # The children write to the real stderr, not into the tail (which may be gone before they end).
        stderr = self.tail.original if self.tail is not None else None
        try:
            process = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                       stderr=stderr)  # fmt: skip
        except OSError as exc:
            log(f"cannot start the notification process: {exc}")
            return None
        deadline = time.monotonic() + limit
        if stdin is not None:
            threading.Thread(target=_feed, args=(process, stdin), daemon=True).start()
        if argv[-1] == "--send":
            self.senders.append((process, deadline))
        threading.Thread(target=_watchdog, args=(process, deadline), daemon=True).start()
        return process, deadline

    def _state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.run_dir / ".cw" / STATE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, state: dict[str, Any]) -> None:
        path = self.run_dir / ".cw" / STATE_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            log(f"cannot record the attempt in {path} (a restart will not be told): {exc}")


def _safely(function: Any, *args: Any) -> None:
    """Run ``function``; any error is one line in the log (notifications never stop a run)."""
    try:
        function(*args)
    except Exception as exc:  # noqa: BLE001
        log(f"notification error: {type(exc).__name__}: {exc}")


def _feed(process: subprocess.Popen, text: str) -> None:
    try:
        assert process.stdin is not None
        process.stdin.write(text.encode("utf-8"))
        process.stdin.close()
    except OSError:
        pass


def _watchdog(process: subprocess.Popen, deadline: float) -> None:
    try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _send_timeout() -> float:
    try:
        return max(1.0, float(os.environ.get(TIMEOUT_ENV, SEND_TIMEOUT_S)))
    except ValueError:
        return SEND_TIMEOUT_S


def _importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("apprise") is not None


def _lib_dir(run_dir: Path) -> Path:
    for folder in [os.environ.get(LIB_ENV, ""), *LIB_DIRS]:
        if not folder:
            continue
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            if os.access(folder, os.W_OK):
                return Path(folder)
        except OSError:
            continue
    return run_dir / ".cw" / "notify-lib"


def _first_pod(environ: dict[str, str] | os._Environ) -> bool:
    return all(environ.get(name, "0") in ("", "0") for name in ("CW_NODE_RANK", "NODE_RANK", "JOB_COMPLETION_INDEX"))


def begin(run_dir: str | os.PathLike, environ: dict[str, str] | None = None) -> Notifier | None:
    """The run's notifier (call :meth:`Notifier.started` next), or None: no ``notify``, or not the first pod.

    Never raises: a broken setting is one line in the log and the run goes on.
    """
    env = os.environ if environ is None else environ
    raw = env.get(NOTIFY_ENV)
    if not raw or not _first_pod(env):
        return None
    try:
        settings = json.loads(raw)
        return Notifier(settings, Path(run_dir))
    except Exception as exc:  # noqa: BLE001 - notifications never stop a run
        log(f"notifications are off for this pod: {type(exc).__name__}: {exc}")
        return None


# --------------------------------------------------------------------------- the child processes


def _apprise(lib: str) -> Any:
    """Apprise from the image, else from ``lib``, else installed there now (once: a lock)."""
    try:
        import apprise

        return apprise
    except ImportError:
        pass
    sys.path.insert(0, lib)
    try:
        import apprise

        return apprise
    except ImportError:
        pass
    import fcntl

    Path(lib).mkdir(parents=True, exist_ok=True)
    with open(Path(lib) / ".lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing it: wait for it
        try:
            import apprise

            return apprise
        except ImportError:
            pass
        install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check",
                   "--target", lib, APPRISE_REQUIREMENT]  # fmt: skip
        done = subprocess.run(install, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ImportError(f"Apprise is not in the image and pip could not install it ({last})")
        import importlib

        importlib.invalidate_caches()
        import apprise

        return apprise


def fill(url: str, keys: dict[str, str], environ: dict[str, str] | os._Environ) -> str:
    """``url`` with each ``{KEY}`` replaced by the Secret's value (from the variable ``keys[KEY]``).

    Raises:
        KeyError: A key the Secret does not have (its variable is unset).
    """

    def value(match: re.Match) -> str:
        variable = keys.get(match.group(1), "")
        if variable not in environ:
            raise KeyError(match.group(1))
        return environ[variable]

    return PLACEHOLDER.sub(value, url)


def send_now(payload: dict[str, Any], environ: dict[str, str] | os._Environ | None = None) -> int:
    """Send one message to every URL of ``payload`` (the ``--send`` child). Returns 0 when all got it."""
    import logging

    env = os.environ if environ is None else environ
    logging.getLogger("apprise").setLevel(logging.CRITICAL)  # its lines may name a URL; cw says one line
    try:
        apprise = _apprise(str(payload.get("lib") or LIB_DIRS[0]))
    except (ImportError, OSError, subprocess.TimeoutExpired) as exc:
        log(f"no notification sent: {exc}")
        return 1
    targets = apprise.Apprise()
    urls = list(payload.get("urls") or [])
    for index, url in enumerate(urls):
        try:
            filled = fill(url, payload.get("keys") or {}, env)
        except KeyError as exc:
            log(f"notify.urls[{index}]: the Secret has no key {exc.args[0]!r}; that target is skipped")
            continue
        if not targets.add(filled):
            log(f"notify.urls[{index}]: Apprise does not understand this URL; that target is skipped")
    if not len(targets):
        return 1
    kinds = {"success": apprise.NotifyType.SUCCESS, "failure": apprise.NotifyType.FAILURE,
             "warning": apprise.NotifyType.WARNING}  # fmt: skip
    ok = targets.notify(title=payload["title"], body=payload["body"],
                        notify_type=kinds.get(str(payload.get("type")), apprise.NotifyType.INFO))  # fmt: skip
    if ok:
        log(f"sent {payload['title']!r} to {len(targets)} target(s)")
        return 0
    log(f"{payload['title']!r}: not every target took it ({len(targets)} tried); the run goes on")
    return 1


def main(argv: list[str]) -> int:
    """``--send`` (the payload on stdin) or ``--install LIB``."""
    try:
        if argv[:1] == ["--send"]:
            return send_now(json.loads(sys.stdin.read()))
        if argv[:1] == ["--install"] and len(argv) == 2:
            _apprise(argv[1])
            return 0
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback in the trainer's log
        log(f"notification error: {type(exc).__name__}: {exc}")
        return 1
    log("usage: cw_notify.py --send < PAYLOAD | --install LIB")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
