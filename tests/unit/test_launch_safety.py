"""The launch path's safety nets, without a cluster: rollback, request timeouts, the in-cluster wait."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from cw_cli.errors import ClusterUnreachable, Conflict
from cw_cli.k8s.submit import CreatedObject, remove_objects


class _RecordingKube:
    """Just enough of Kube for remove_objects: records deletes, can misbehave on demand."""

    def __init__(self, *, foreign: set[str] = frozenset(), unreachable_after: int | None = None, on_delete=None):
        self.deleted: list[tuple[str, str, str | None]] = []
        self.foreign = foreign
        self.unreachable_after = unreachable_after
        self.on_delete = on_delete

    def delete(self, kind: str, name: str, uid: str | None = None) -> bool:
        if self.on_delete:
            self.on_delete()
        if self.unreachable_after is not None and len(self.deleted) >= self.unreachable_after:
            raise ClusterUnreachable("cannot reach the API server")
        if name in self.foreign:
            raise Conflict("precondition failed: UID in precondition does not match")
        self.deleted.append((kind, name, uid))
        return True


OBJECTS = [CreatedObject("Job", "r-trainer", "u1"), CreatedObject("ConfigMap", "r-config", "u2"),
           CreatedObject("Deployment", "r-server", "u3")]  # fmt: skip


def test_rollback_deletes_newest_first_and_only_with_its_own_uids():
    kube = _RecordingKube(foreign={"r-config"})
    assert remove_objects(kube, OBJECTS) == []
    # The ConfigMap there now is another launch's (UID precondition failed): left alone, not "left over".
    assert kube.deleted == [("Deployment", "r-server", "u3"), ("Job", "r-trainer", "u1")]


def test_rollback_lists_what_is_left_once_the_server_stops_answering():
    kube = _RecordingKube(unreachable_after=1)
    assert remove_objects(kube, OBJECTS) == ["ConfigMap/r-config", "Job/r-trainer"]


def test_a_second_ctrl_c_does_not_abandon_a_rollback():
    def press_ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # let a handler run, if one would

    # Python's own Ctrl-C handler, whatever the process inherited (a CI runner may start it ignored).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        kube = _RecordingKube(on_delete=press_ctrl_c)
        assert remove_objects(kube, OBJECTS) == []
        assert [name for _, name, _ in kube.deleted] == ["r-server", "r-config", "r-trainer"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored afterwards
    finally:
        signal.signal(signal.SIGINT, inherited)


@pytest.fixture
def frozen_api_server(tmp_path: Path):
    """A TCP server on 127.0.0.1 that accepts connections and never answers, and a kubeconfig for it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "frozen",
        "clusters": [{"name": "frozen", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "contexts": [{"name": "frozen", "context": {"cluster": "frozen", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    yield kubeconfig, accepted
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


@pytest.mark.parametrize("command", [["list"], ["delete", "some-run"]])
def test_a_frozen_api_server_gets_one_attempt_bounded_by_the_request_timeout(frozen_api_server, command):
    from cw_cli.k8s.queries import RUN_KINDS, WHOLE_KINDS

    kubeconfig, accepted = frozen_api_server
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "CW_REQUEST_TIMEOUT": "2"}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "cw_cli", *command], env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    assert "cannot reach the API server" in result.stderr
    # One attempt per read, bounded by 2 s: the kinds are read at once (one connection each;
    # the list table needs only the owners and servers), not retried (a retry would open more
    # connections) and not waited for 30 s.
    assert len(accepted) == len(WHOLE_KINDS if command == ["list"] else RUN_KINDS)
    assert elapsed < 7, elapsed


def _wait_script(timeout_s: int) -> list[str]:
    from unit_helpers import CONFIGS, plan_for  # the repository's own GRPO example has servers

    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", services_timeout_s=timeout_s)
    job = next(m for m in plan.manifests if m["kind"] == "Job")
    return job["spec"]["template"]["spec"]["initContainers"][0]["command"]


def test_the_trainer_stops_waiting_for_a_server_at_its_deadline():
    command = _wait_script(1)
    assert command[-1] == "1"
    unused = socket.socket()
    unused.bind(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    unused.close()  # nothing listens there: every try is refused at once
    argv = [sys.executable if part == "python3" else part for part in command]
    argv[-2] = f"http://127.0.0.1:{port}/health"
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "did not answer within 1 s" in result.stderr
