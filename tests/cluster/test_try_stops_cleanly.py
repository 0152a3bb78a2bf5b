"""`cw try` and `cw serve --forward` when something goes wrong, on the real API server and as the
documented Roles: SIGTERM while `cw try` waits for its answer deletes the server and exits 130 (it
exited 143 and left the server); a server that answers HTTP 500 is exit 1 with its body, in one
line; `--forward` on a port that is taken is exit 2 before any server is started (before, the
server was started and lived its whole lifetime for nothing)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client
from test_cw_end_to_end import run_cw
from test_try_and_serve_on_the_cluster import _launch, _route_port_forward


class _SlowOrFailing(BaseHTTPRequestHandler):
    mode = "slow"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).mode == "slow":
            time.sleep(60)
        body = b'{"error": "CUDA out of memory"}'
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowOrFailing)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _servers(api, namespace: str) -> list:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=serve").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def test_sigterm_while_try_waits_deletes_the_server(kube_api, namespace, as_documented_roles, tmp_path, stand_in):
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    _launch(kube_api, namespace, launcher, tmp_path)
    _route_port_forward(kube_api, namespace, stand_in.server_address[1])
    _SlowOrFailing.mode = "slow"
    process = subprocess.Popen([sys.executable, "-m", "cw_cli", "try", "arts", "hi?", "--gpu", "0", "--engine", "vllm", "--timeout", "120",
                                "-n", namespace], env=cw_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    said = []
    for line in process.stderr:  # type: ignore[union-attr]
        said.append(line)
        if "asking arts-serve" in line:
            break
    else:
        pytest.fail(f"cw try never asked: {''.join(said)}")
    assert _servers(kube_api, namespace), "the server should be up while cw try asks"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 130, "".join(said) + process.stderr.read()  # type: ignore[union-attr]
    assert _servers(kube_api, namespace) == []


def test_a_server_answering_500_is_exit_1_in_one_line(kube_api, namespace, as_documented_roles, tmp_path, stand_in):
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    _launch(kube_api, namespace, launcher, tmp_path)
    _route_port_forward(kube_api, namespace, stand_in.server_address[1])
    _SlowOrFailing.mode = "fail"
    result = run_cw(cw_env, "try", "arts", "hi?", "--gpu", "0", "--engine", "vllm", "--timeout", "120", "-n", namespace, timeout=240)
    assert result.returncode == 1, result.stderr
    assert "HTTP 500" in result.stderr and "CUDA out of memory" in result.stderr and "Traceback" not in result.stderr
    assert _servers(kube_api, namespace) == []


def test_forward_on_a_taken_port_starts_no_server(kube_api, namespace, as_documented_roles, tmp_path):
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    _launch(kube_api, namespace, launcher, tmp_path)
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        result = run_cw(cw_env, "serve", "arts", "--gpu", "0", "--engine", "vllm", "--forward", str(port), "-n", namespace, timeout=180)
        assert result.returncode == 2, result.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
        assert _servers(kube_api, namespace) == []
    finally:
        taken.close()
