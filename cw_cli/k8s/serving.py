"""`cw serve RUN` and `cw try RUN "question"`: a vLLM server on a run's model, reached through the
API server (port-forward), that never outlives its lifetime.

The server is one pod (the same vLLM image and flags cw runs for GRPO's generation, the run's
claim read-only) with ``activeDeadlineSeconds`` set to its lifetime, so the kubelet ends it then
whatever happens to cw, and a Service in front. ``cw try`` asks one question through the chat
template (vLLM's chat endpoint applies the model's) and deletes both.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from cw_cli.errors import ClusterUnreachable, Conflict, CwError, WaitTimeout
from cw_cli.frameworks.base import CHECKPOINT_MOUNT
from cw_cli.k8s.connection import ClusterTarget, Kube
from cw_cli.k8s.run_facts import claims_of, trainer_of
from cw_cli.labels import COMPONENT_LABEL, GPU_RESOURCE, RUN_LABEL, SERVE
from cw_cli.render.plan import CONTAINER_SECURITY, POD_SECURITY

VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
SERVE_PORT = 8000


def model_path(listing: dict[str, Any], which: str) -> str:
    """The folder on the volume to serve: ``final``, ``latest``, a step or ``export:NAME``.

    Raises:
        ConfigError: The run has no such model (the message lists what it has).
    """
    from cw_cli.k8s.download import choose_source

    return f"{CHECKPOINT_MOUNT}/{choose_source(listing, which).folder}"


def server_manifests(
    run_name: str, owner: dict[str, Any], pod: dict[str, Any], claim: str, model: str, lifetime_s: int, gpu: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """The server pod (ended by the kubelet after ``lifetime_s``) and its Service."""
    name = f"{run_name}-{SERVE}"
    labels = {k: v for k, v in (owner["metadata"].get("labels") or {}).items() if not k.startswith("kueue.x-k8s.io/")}
    labels[COMPONENT_LABEL] = SERVE
    command = ["vllm", "serve", model, "--served-model-name", run_name, "--host", "0.0.0.0", "--port", str(SERVE_PORT)]
    container = {
        "name": SERVE,
        "image": VLLM_IMAGE,
        "command": command,
        "ports": [{"name": "http", "containerPort": SERVE_PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": SERVE_PORT}, "periodSeconds": 5},
        "resources": {"limits": {GPU_RESOURCE: gpu}} if gpu else {},
        "securityContext": CONTAINER_SECURITY,
        "volumeMounts": [{"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT, "readOnly": True}],
    }
    spec = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": lifetime_s,  # the kubelet ends it then, whatever happens to cw
        "automountServiceAccountToken": False,
        "securityContext": POD_SECURITY,
        "nodeSelector": pod.get("nodeSelector") or {},
        "tolerations": pod.get("tolerations") or [],
        "containers": [container],
        "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
    }
    server = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {COMPONENT_LABEL: SERVE, RUN_LABEL: run_name},
                 "ports": [{"name": "http", "port": SERVE_PORT, "targetPort": SERVE_PORT}]},
    }  # fmt: skip
    return [server, service]


def start_server(kube: Kube, target: ClusterTarget, run_name: str, which: str, lifetime_s: int, gpu: int) -> str:
    """Start the run's server on the model ``which`` names; returns the pod's name.

    Raises:
        NotFound: No such run, or its volume is gone.
        ConfigError: No such model, or outputs on no volume.
        Conflict: The run's server exists already.
    """
    from cw_cli.k8s.artifacts import read_artifacts

    listing = read_artifacts(kube, target, run_name)
    model = model_path(listing, which)
    _, owner, template = trainer_of(kube, run_name)
    pod = template["spec"]
    claims = claims_of(pod)
    name = f"{run_name}-{SERVE}"
    if kube.get("Pod", name) is not None:
        raise Conflict(f"run {run_name!r} has a server already ({name})",
                       hint=f"it ends at its lifetime; sooner: kubectl delete pod {name}")  # fmt: skip
    server, service = server_manifests(run_name, owner, pod, str(claims["checkpoints"]), model, lifetime_s, gpu)
    created = kube.create(server)
    owned = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": created["metadata"]["uid"], "controller": True}
    service["metadata"]["ownerReferences"] = [owned]  # deleted with the pod
    kube.create(service)
    return name


def wait_ready(kube: Kube, name: str, timeout_s: float) -> None:
    """Block until the server pod is Ready.

    Raises:
        WaitTimeout: Not Ready in time (or it ended).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        pod = kube.get("Pod", name)
        status = (pod or {}).get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if ready:
            return
        if pod is None or status.get("phase") in ("Succeeded", "Failed") or time.monotonic() > deadline:
            raise WaitTimeout(f"the server {name} is not Ready ({status.get('phase') or 'gone'}) after {int(timeout_s)} s",
                              hint=f"kubectl describe pod {name}; kubectl logs {name}")  # fmt: skip
        time.sleep(1)


def ask(target: ClusterTarget, namespace: str, pod: str, model: str, question: str, max_tokens: int) -> str:
    """One chat completion from the server, through a port-forward of the API server.

    Raises:
        ClusterUnreachable: The port-forward cannot be opened.
        CwError: The server answered no completion.
    """
    from kubernetes import client
    from kubernetes.stream import portforward

    from cw_cli.k8s.pod_exec import official_client

    body = json.dumps({"model": model, "messages": [{"role": "user", "content": question}],
                       "max_tokens": max_tokens}).encode()  # fmt: skip
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body  # fmt: skip
    try:
        api = official_client(target)
        forward = portforward(client.CoreV1Api(api).connect_get_namespaced_pod_portforward, pod, namespace,
                              ports=str(SERVE_PORT))  # fmt: skip
        sock = forward.socket(SERVE_PORT)
    except Exception as exc:  # noqa: BLE001 - the client raises many kinds; all mean "no forward"
        raise ClusterUnreachable(f"cannot port-forward to {pod}: {str(exc).strip()[:300]}") from None
    try:
        sock.setblocking(True)
        sock.settimeout(600)
        sock.sendall(request)
        answer = bytearray()
        while not _complete(bytes(answer)):  # a forwarded stream may never show the server's close
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    finally:
        sock.close()
        forward.close()
    head, _, payload = bytes(answer).partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1:2]
    if status != [b"200"]:
        raise CwError(f"the server answered {head[:80]!r}: {payload[:300]!r}")
    if b"transfer-encoding: chunked" in head.lower():
        payload = _unchunk(payload)
    try:
        return str(json.loads(payload)["choices"][0]["message"]["content"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise CwError(f"the server's answer is no chat completion: {payload[:300]!r}") from None


#: Seconds a tunnel waits for the server's last bytes once the local client has closed its side.
_DRAIN_S = 5.0


def forward(
    target: ClusterTarget, namespace: str, pod: str, local_port: int, stop: threading.Event,
    listening: Callable[[int], None] = lambda port: None,
) -> None:  # fmt: skip
    """Serve ``127.0.0.1:local_port`` until ``stop`` is set, as ``kubectl port-forward`` does: each
    connection gets its own port-forward stream to the pod's server port, through the API server.

    Args:
        target: The cluster (the official client opens the websocket streams).
        namespace: The pod's namespace.
        pod: The server pod.
        local_port: The port on this machine's loopback address; 0 picks a free one.
        stop: Set to stop listening (open connections are closed with it).
        listening: Called with the port once connections are accepted.

    Raises:
        CwError: The local port is taken.
        ClusterUnreachable: The cluster cannot be reached.
    """
    from kubernetes import client

    from cw_cli.k8s.pod_exec import official_client

    try:
        listener = socket.create_server(("127.0.0.1", local_port))
    except OSError as exc:
        raise CwError(f"cannot listen on 127.0.0.1:{local_port}: {exc.strerror or exc}",
                      hint="choose another port with --forward PORT (0: any free one)") from None  # fmt: skip
    opened = client.CoreV1Api(official_client(target)).connect_get_namespaced_pod_portforward
    tunnels: list[threading.Thread] = []
    with listener:
        listener.settimeout(0.25)  # how soon `stop` is noticed
        listening(listener.getsockname()[1])
        while not stop.is_set():
            try:
                local, _ = listener.accept()
            except TimeoutError:
                continue
            tunnel = threading.Thread(target=_tunnel, args=(opened, pod, namespace, local, stop), daemon=True)
            tunnel.start()
            tunnels.append(tunnel)
    for tunnel in tunnels:
        tunnel.join(timeout=_DRAIN_S)


def _tunnel(opened: Callable[..., Any], pod: str, namespace: str, local: socket.socket, stop: threading.Event) -> None:
    """Copy bytes both ways between a local connection and a new port-forward stream to the pod."""
    from kubernetes.stream import portforward

    try:
        stream = portforward(opened, pod, namespace, ports=str(SERVE_PORT))
        remote = stream.socket(SERVE_PORT)
        remote.setblocking(True)
    except Exception:  # noqa: BLE001 - the client raises many kinds; the local client sees a closed connection
        local.close()
        return
    client_done = threading.Event()

    def upstream() -> None:
        _copy(local, remote, stop)
        client_done.set()

    sender = threading.Thread(target=upstream, daemon=True)
    sender.start()
    remote.settimeout(0.25)
    quiet_since: float | None = None
    try:
        while not stop.is_set():
            try:
                data = remote.recv(65536)
            except TimeoutError:
                # A forwarded stream may never show the server's close: once the client has
                # closed its side and the server has been quiet a while, the exchange is over.
                if client_done.is_set():
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > _DRAIN_S:
                        break
                continue
            except OSError:
                break
            if not data:
                break
            quiet_since = None
            try:
                local.sendall(data)
            except OSError:
                break
    finally:
        for end in (local, remote):
            try:
                end.close()
            except OSError:
                pass
        stream.close()


def _copy(source: socket.socket, sink: socket.socket, stop: threading.Event) -> None:
    """Bytes from ``source`` to ``sink`` until ``source`` ends.

    ``sink`` is not shut for writing then: the official client would end the whole stream, and
    with it the answer still on its way.
    """
    source.settimeout(0.25)
    while not stop.is_set():
        try:
            data = source.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return
        if not data:
            break
        try:
            sink.sendall(data)
        except OSError:
            return


def _complete(answer: bytes) -> bool:
    """Whether an HTTP response has arrived whole (by its Content-Length or its last chunk)."""
    head, found, body = answer.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.lower().split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip() == b"content-length":
            return len(body) >= int(value.strip() or b"0")
    return b"transfer-encoding: chunked" in head.lower() and body.endswith(b"0\r\n\r\n")


def _unchunk(data: bytes) -> bytes:
    out, rest = bytearray(), data
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2 :]
    return bytes(out)


def stop_server(kube: Kube, name: str) -> None:
    """Delete the server pod (its Service goes with it)."""
    kube.delete("Pod", name)
    kube.delete("Service", name)

