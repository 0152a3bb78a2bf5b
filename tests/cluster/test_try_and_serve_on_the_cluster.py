"""`cw try RUN "question"` and `cw serve RUN` against the real API server: the server pod serves the
run's model read-only from its volume and is ended by the kubelet at its lifetime; `try` reaches
it through the API server's port-forward (kwok routes it to a small local OpenAI-compatible
server standing in for vLLM), sends the question through the chat endpoint, prints the answer
and removes the server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client
from test_artifacts_on_the_cluster import _route_exec, _volume
from test_cw_end_to_end import SFT_CONFIG, create_bound_volumes, run_cw, write_config

KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "output_dir": "outputs/sft", "gpu": 1}


class _ChatServer(BaseHTTPRequestHandler):
    asked: list[dict] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).asked.append({"path": self.path, **body})
        answer = json.dumps({"choices": [{"message": {"role": "assistant", "content": "four, said the model"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def chat_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatServer)
    _ChatServer.asked = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _launch(api: client.ApiClient, namespace: str, env: dict[str, str], tmp_path) -> None:
    create_bound_volumes(api, namespace, "ckpts")
    launched = run_cw(env, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "arts", "-n", namespace, "--wait",
                      timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    _volume(tmp_path / "volume")
    _route_exec(api, namespace, "arts-reader", tmp_path / "volume")


def _route_port_forward(api: client.ApiClient, namespace: str, port: int) -> None:
    """kwok sends the server pod's port-forward (port 8000) to the stand-in server on this machine."""
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "kwok.x-k8s.io", "v1alpha1", namespace, "portforwards",
        {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "PortForward", "metadata": {"name": "arts-serve"},
         "spec": {"forwards": [{"ports": [8000], "target": {"port": port, "address": "127.0.0.1"}}]}},
    )  # fmt: skip


def test_try_asks_the_runs_model_through_a_port_forward_and_removes_the_server(kube_api, namespace, as_documented_roles, tmp_path,
                                                                               chat_server):  # fmt: skip
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    _launch(kube_api, namespace, launcher, tmp_path)
    _route_port_forward(kube_api, namespace, chat_server.server_address[1])
    result = run_cw(cw_env, "try", "arts", "what is two plus two?", "--checkpoint", "export:final-merged", "--gpu", "0", "--engine", "vllm",
                    "--timeout", "120", "-n", namespace, timeout=240)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "four, said the model"
    assert _ChatServer.asked == [{"path": "/v1/chat/completions", "model": "arts", "max_tokens": 256,
                                  "messages": [{"role": "user", "content": "what is two plus two?"}]}]  # fmt: skip
    # The server is deleted (gone, or going: deletion is asynchronous).
    servers = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=serve")
    assert all(pod.metadata.deletion_timestamp is not None for pod in servers.items)


def test_serve_starts_a_server_that_ends_at_its_lifetime(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    _launch(kube_api, namespace, launcher, tmp_path)
    started = run_cw(cw_env, "serve", "arts", "--ttl", "2h", "--gpu", "0", "--engine", "vllm", "-n", namespace, timeout=180)
    assert started.returncode == 0, started.stderr
    assert f"kubectl port-forward -n {namespace} svc/arts-serve 8000:8000" in started.stderr
    core = client.CoreV1Api(kube_api)
    pod = core.read_namespaced_pod("arts-serve", namespace)
    assert pod.spec.active_deadline_seconds == 7200
    assert pod.spec.containers[0].command[:3] == ["vllm", "serve", "/checkpoints/arts/outputs/sft"]
    volume = pod.spec.volumes[0].persistent_volume_claim
    assert volume.claim_name == "ckpts" and volume.read_only is True
    service = core.read_namespaced_service("arts-serve", namespace)
    assert service.metadata.owner_references[0].name == "arts-serve"
    again = run_cw(cw_env, "serve", "arts", "--engine", "vllm", "-n", namespace, timeout=180)
    assert again.returncode == 5 and "has a server already" in again.stderr
    assert run_cw(cw_env, "serve", "arts", "--checkpoint", "77", "-n", namespace, timeout=180).returncode == 2


def test_serve_forward_makes_the_server_reachable_here_until_ctrl_c(kube_api, namespace, as_documented_roles, tmp_path, chat_server):
    """`cw serve --forward 0`: each local connection is a port-forward through the API server (kwok
    routes it to the stand-in server); Ctrl-C stops forwarding, exit 130, the server lives on."""
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    import os
    import re
    import signal
    import socket
    import subprocess
    import sys
    import urllib.request

    _launch(kube_api, namespace, launcher, tmp_path)
    _route_port_forward(kube_api, namespace, chat_server.server_address[1])
    process = subprocess.Popen(
        [sys.executable, "-m", "cw_cli", "serve", "arts", "--gpu", "0", "--engine", "vllm", "--forward", "0", "--timeout", "120",
         "-n", namespace], env=cw_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        said = []
        for line in process.stderr:  # type: ignore[union-attr]
            said.append(line)
            found = re.search(r"forwarding 127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
                break
        else:
            pytest.fail(f"cw serve --forward never listened: {''.join(said)}")
        for question in ("one?", "two?"):  # two connections: two port-forward streams
            body = json.dumps({"model": "arts", "messages": [{"role": "user", "content": question}]}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                             headers={"Content-Type": "application/json"})  # fmt: skip
            with urllib.request.urlopen(request, timeout=60) as answer:
                assert json.loads(answer.read())["choices"][0]["message"]["content"] == "four, said the model"
        assert [a["messages"][0]["content"] for a in _ChatServer.asked] == ["one?", "two?"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
        assert "stopped forwarding" in process.stderr.read()  # type: ignore[union-attr]
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        pod = client.CoreV1Api(kube_api).read_namespaced_pod("arts-serve", namespace)
        assert pod.metadata.deletion_timestamp is None  # the server lives on until its lifetime ends
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
