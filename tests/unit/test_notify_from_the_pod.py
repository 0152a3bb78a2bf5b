"""The trainer pod tells the user (issue 34 item 6): cw_entrypoint.py, run for real as the pod runs it
(with cw_fault.py and cw_notify.py beside it), sends through Apprise's json:// to a webhook receiver
on 127.0.0.1: success, failure with the reason cw status gives, stall and restart. A target that
is closed or never answers neither fails nor holds up the run: the exit code is the command's."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cw_cli.diagnosis import logs as diagnosis_logs
from cw_cli.features.notify import FEATURE
from cw_cli.features.notify.pod import cw_notify
from cw_cli.frameworks.runtime_files import RUNTIME_DIR

pytest.importorskip("apprise")

ENTRYPOINT = RUNTIME_DIR / "cw_entrypoint.py"  # replaced by its copy in the pod's folder (below)


@pytest.fixture(scope="module", autouse=True)
def _pod_folder(tmp_path_factory):
    """cw's pod-side files laid out as the ConfigMap lays them out: the feature's cw_notify.py
    beside the entrypoint, which imports it from its own folder."""
    global ENTRYPOINT
    folder = tmp_path_factory.mktemp("pod")
    for source in [*RUNTIME_DIR.glob("cw_*.py"), *FEATURE.pod_files.values()]:
        shutil.copy(source, folder / source.name)
    ENTRYPOINT = folder / "cw_entrypoint.py"


class Receiver:
    """A webhook on 127.0.0.1 that records each POST (path and JSON body)."""

    def __init__(self) -> None:
        self.got: list[dict] = []
        received = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, **json.loads(body)})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    got = Receiver()
    yield got
    got.close()


def _settings(urls: list[str], events: list[str] | None = None) -> str:
    return json.dumps({"run": "r1", "urls": urls, "events": events or list(cw_notify_events()),
                       "keys": {"TOKEN": "CW_NOTIFY_SECRET_0"}})  # fmt: skip


def cw_notify_events() -> tuple[str, ...]:
    return ("succeeded", "failed", "stalled", "restarted")


def _pod(run_dir: Path, script: str, settings: str, **env: str) -> tuple[int, str, float]:
    """Run the entrypoint as the trainer container does; (exit code, stderr, seconds)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    environ = {**os.environ, "CW_NOTIFY": settings, "CW_NOTIFY_SECRET_0": "s3cr3t-value", "HOSTNAME": "r1-trainer-0-abc",
               **env}  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "--no-resume", "--", sys.executable, "-c", textwrap.dedent(script)],
        cwd=run_dir, env=environ, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, done.stderr, time.monotonic() - started


def _url(receiver: Receiver) -> str:
    return f"json://127.0.0.1:{receiver.port}/hook/{{TOKEN}}"


def test_a_succeeded_run_is_told_with_the_secret_filled_in_the_pod(tmp_path, receiver):
    code, err, _ = _pod(tmp_path / "run", "print('training done')", _settings([_url(receiver)]))
    assert code == 0, err
    [sent] = receiver.got
    assert sent["path"] == "/hook/s3cr3t-value"  # {TOKEN} came from the Secret's variable, in the pod
    assert sent["title"] == "cw: r1 succeeded" and sent["type"] == "success"
    assert "exit code 0" in sent["message"] and "cw status r1" in sent["message"] and "r1-trainer-0-abc" in sent["message"]
    assert "s3cr3t-value" not in err  # the log never shows the secret


def test_a_failure_says_why_as_cw_status_does_and_keeps_its_exit_code(tmp_path, receiver):
    script = """
        import sys
        print("Traceback (most recent call last):", file=sys.stderr)
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 79.1 GiB", file=sys.stderr)
        sys.exit(1)
    """
    code, err, _ = _pod(tmp_path / "run", script, _settings([_url(receiver)]))
    assert code == 1
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in err  # the log still gets every line
    [sent] = receiver.got
    assert sent["title"] == "cw: r1 failed" and sent["type"] == "failure"
    assert "ran out of GPU memory" in sent["message"] and "it tried to allocate 2.00 GiB more" in sent["message"]
    assert "exit code 1" in sent["message"]


def test_an_oom_kill_and_an_exception_are_named():
    assert "memory limit (OOMKilled" in cw_notify.failure_reason(137, "step 3\n")
    assert "exit code 137 (SIGKILL)" in cw_notify.failure_reason(137, "")
    said = cw_notify.failure_reason(1, "Traceback...\n  File x\nValueError: dataset has no column 'prompt'\nwandb: done\n")
    assert said == "exit code 1: ValueError: dataset has no column 'prompt'"
    launched = ("Traceback...\nFileNotFoundError: Couldn't find any data file at /data/x.\nTraceback...\n"
                "subprocess.CalledProcessError: Command '['python3', 'sft.py']' returned non-zero exit status 1.\n")
    assert cw_notify.failure_reason(1, launched) == "exit code 1: FileNotFoundError: Couldn't find any data file at /data/x."
    torchrun = "RuntimeError: boom\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    assert cw_notify.failure_reason(1, torchrun) == "exit code 1: RuntimeError: boom"


def test_the_pod_matches_the_same_log_texts_as_cw_status():
    assert cw_notify.CUDA_OOM == diagnosis_logs._CUDA_OOM
    assert cw_notify.CUDA_OOM_SIZE == diagnosis_logs._CUDA_OOM_SIZE
    assert cw_notify.NCCL_TIMEOUT == diagnosis_logs._NCCL_TIMEOUT


# A "rank" that steps three times, then hangs (the supervisor's stall watch sees its heartbeats).
_HANGING_RANK = """
    import faulthandler, json, os, pathlib, signal, time
    folder = pathlib.Path(os.environ["CW_FT_DIR"])
    (folder / "stacks").mkdir(exist_ok=True)
    (folder / "ranks").mkdir(exist_ok=True)
    stacks = open(folder / "stacks" / "rank-0.txt", "w")
    faulthandler.register(signal.SIGUSR2, file=stacks, all_threads=True)
    for step in (1, 2, 3):
        beat = {"rank": 0, "pid": os.getpid(), "step": step, "beats": step, "time": time.time(), "done": False}
        (folder / "ranks" / "rank-0.json").write_text(json.dumps(beat))
        time.sleep(0.3)
    time.sleep(60)
"""


def test_a_stall_then_the_restart_are_told(tmp_path, receiver):
    run = tmp_path / "run"
    code, err, _ = _pod(run, _HANGING_RANK, _settings([_url(receiver)]), CW_STALL_TIMEOUT="1")
    assert code == 75, err
    [stall] = receiver.got
    assert stall["title"] == "cw: r1 stalled; restarting from its last checkpoint" and stall["type"] == "warning"
    assert re.search(r"no step since \S+Z after step 3 \(timeout 1\.0 s\); stacks in \S+/\.cw/stacks-", stall["message"])

    code, err, _ = _pod(run, "print('resumed and finished')", _settings([_url(receiver)]))
    assert code == 0, err
    restart, success = receiver.got[1:]
    assert restart["title"] == "cw: r1 restarted" and restart["type"] == "warning"
    assert restart["message"].startswith("attempt 2, after a stall: no step since ")
    assert success["title"] == "cw: r1 succeeded"


def test_a_pod_killed_without_a_word_is_told_as_restarted(tmp_path, receiver):
    run = tmp_path / "run"
    (run / ".cw").mkdir(parents=True)
    (run / ".cw" / "notify.json").write_text(json.dumps({"attempt": 1, "started": 0}))  # began, never ended (SIGKILL)
    code, err, _ = _pod(run, "pass", _settings([_url(receiver)], events=["restarted"]))
    assert code == 0, err
    [restart] = receiver.got  # `events` leaves the success out
    assert "attempt 2, after the previous pod ended without a word from cw: killed" in restart["message"]


def test_a_warned_stop_is_no_failure(tmp_path, receiver):
    # What cw_fault's callback leaves when the ranks stopped early with a checkpoint: the pod exits 143.
    script = """
        import json, os, pathlib, time
        record = {"step": 40, "checkpoint": "/checkpoints/r/checkpoint-40", "time": time.time()}
        (pathlib.Path(os.environ["CW_FT_DIR"]) / "stopped.json").write_text(json.dumps(record))
    """
    code, err, _ = _pod(tmp_path / "run", script, _settings([_url(receiver)]))
    assert code == 143, err
    assert receiver.got == []
    code, err, _ = _pod(tmp_path / "run", "pass", _settings([_url(receiver)], events=["restarted"]))
    [restart] = receiver.got
    assert "after a warned stop (SIGTERM: preemption, eviction, a drain) that saved a checkpoint" in restart["message"]


def test_only_the_first_pod_of_a_multi_node_run_sends(tmp_path, receiver):
    code, err, _ = _pod(tmp_path / "run", "pass", _settings([_url(receiver)]), CW_NODE_RANK="1")
    assert code == 0, err
    assert receiver.got == []


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(sock.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    yield sock.getsockname()[1]
    stop.set()
    for conn in accepted:
        conn.close()
    sock.close()


@pytest.mark.parametrize("code", [0, 3])
def test_unreachable_targets_neither_fail_nor_hold_up_the_run(tmp_path, silent_port, code):
    urls = [f"json://127.0.0.1:{_closed_port()}/x?cto=30&rto=30", f"json://127.0.0.1:{silent_port}/x?cto=30&rto=30"]
    exit_code, err, seconds = _pod(tmp_path / "run", f"raise SystemExit({code})", _settings(urls),
                                   CW_NOTIFY_SEND_TIMEOUT="2")  # fmt: skip
    assert exit_code == code
    assert seconds < 2 + 8, err  # the sender is killed at its limit; the rest is start-up
    assert "Traceback" not in err


def test_an_image_without_apprise_and_no_index_goes_on_without_notifications(tmp_path, receiver):
    # An image's Python without Apprise, whose pip cannot reach an index: the install fails, the run goes on.
    import venv

    venv.create(tmp_path / "image", with_pip=True)
    python = str(tmp_path / "image" / "bin" / "python")
    run = tmp_path / "run"
    run.mkdir()
    environ = {**os.environ, "CW_NOTIFY": _settings([_url(receiver)]), "CW_NOTIFY_LIB": str(tmp_path / "lib"),
               "PIP_INDEX_URL": f"http://127.0.0.1:{_closed_port()}/", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}  # fmt: skip
    started = time.monotonic()
    done = subprocess.run([python, str(ENTRYPOINT), "--no-resume", "--", python, "-c", "raise SystemExit(4)"],
                          cwd=run, env=environ, capture_output=True, text=True, timeout=200)  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert receiver.got == []
    notes = [line for line in done.stderr.splitlines() if line.startswith("[cw-notify]")]
    assert any("no notification sent: Apprise is not in the image and pip could not install it" in n for n in notes), done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60
