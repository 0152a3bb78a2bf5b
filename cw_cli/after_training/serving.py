"""`cw serve RUN` and `cw try RUN "question"`: a vLLM server on a run's model, reached through the
API server (port-forward), that never outlives its lifetime.

The server is one pod (the same vLLM image and flags cw runs for GRPO's generation, the run's
claim read-only) with ``activeDeadlineSeconds`` set to its lifetime, so the kubelet ends it then
whatever happens to cw, and a Service in front. ``cw try`` asks one question through the chat
template (vLLM's chat endpoint applies the model's) and deletes both.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

from cw_cli.after_training.helper_pods import wait_running
from cw_cli.client.connection import Kube
from cw_cli.errors import ConfigError, Conflict, CwError, ExitCode, WaitTimeout
from cw_cli.frameworks.base import CHECKPOINT_MOUNT
from cw_cli.k8s.run_facts import claims_of, trainer_of
from cw_cli.labels import SERVE, TRAINER
from cw_cli.render.helper_pods import (
    ENGINE_LABEL,
    SERVE_PORT,
    TRANSFORMERS_ENGINE,
    VLLM_ENGINE,
    ServeSpec,
    serve_name,
    served_model,
)
from cw_cli.render.helper_pods import server_manifests as render_server
from cw_cli.render.helper_sizing import requests_of

#: Environment entries of the trainer the server takes over: an adapter's base may come from the Hub.
SERVE_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT")


def engine_for(kube: Kube, engine: str | None, gpu: int) -> str:
    """The server to start: ``engine`` where the user named one; else transformers' on CPU where
    there is no GPU to use (``--gpu 0``, or a cluster whose GPUs are simulated), else vLLM.

    Raises:
        ConfigError: An engine cw does not know.
    """
    if engine:
        if engine not in (VLLM_ENGINE, TRANSFORMERS_ENGINE):
            raise ConfigError([f"--engine {engine[:40]!r}: expected {VLLM_ENGINE} or {TRANSFORMERS_ENGINE}"])
        return engine
    return TRANSFORMERS_ENGINE if gpu == 0 or kube.simulated_gpus else VLLM_ENGINE


def server_manifests(kube: Kube, run_name: str, which: str, lifetime_s: int, gpu: int,
                     engine: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The server pod and its Service for the model ``which`` names (render/helper_pods.py), from
    what the run left on its volume (read in a reader pod) and its trainer; creates nothing
    (``engine``: see :func:`engine_for`).

    Raises:
        NotFound: No such run, or its volume is gone.
        ConfigError: No such model, outputs on no volume, or an adapter the server cannot load.
    """
    from cw_cli.after_training.artifacts import read_artifacts
    from cw_cli.render.artifact_choice import choose_source

    listing = read_artifacts(kube, run_name)
    folder = choose_source(listing, which).folder
    entry = next(a for a in listing.get("artifacts") or []
                 if str(a["path"]).removeprefix(CHECKPOINT_MOUNT + "/") == folder)  # fmt: skip
    _, owner, template = trainer_of(kube, run_name)
    pod = template["spec"]
    trainer = next(c for c in pod["containers"] if c["name"] == TRAINER)
    spec = ServeSpec(
        run_name=run_name,
        run_labels=owner["metadata"].get("labels") or {},
        claim=str(claims_of(pod)["checkpoints"]),
        model=served_model(entry),
        lifetime_s=lifetime_s,
        gpus=gpu,
        node_selector=pod.get("nodeSelector") or {},
        tolerations=pod.get("tolerations") or [],
        env=[e for e in trainer.get("env") or [] if e.get("name") in SERVE_ENV],
        engine=engine_for(kube, engine, gpu),
        image=str(trainer["image"]),
        trainer_requests=requests_of(trainer),
    )
    return render_server(spec, kube.namespace)


def start_server(kube: Kube, run_name: str, which: str, lifetime_s: int, gpu: int, engine: str | None = None) -> str:
    """Start the run's server on the model ``which`` names; returns the pod's name.

    Raises:
        NotFound: No such run, or its volume is gone.
        ConfigError: No such model, or outputs on no volume.
        Conflict: The run's server exists already.
    """
    server, service = server_manifests(kube, run_name, which, lifetime_s, gpu, engine)  # a bad choice is said first
    name = serve_name(run_name)
    if kube.get("Pod", name) is not None:
        raise Conflict(f"run {run_name!r} has a server already ({name})",
                       hint=f"it ends at its lifetime; sooner: kubectl delete pod {name}")  # fmt: skip
    created = kube.create(server)
    owned = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": created["metadata"]["uid"], "controller": True}
    service["metadata"]["ownerReferences"] = [owned]  # deleted with the pod
    kube.create(service)
    return name


def wait_ready(kube: Kube, name: str, timeout_s: float) -> None:
    """Block until the server pod is Ready; say at once when its volume is held by another pod.

    Raises:
        Conflict: Another pod holds the run's volume.
        WaitTimeout: Not Ready in time (with the reason it waits), or it ended.
    """
    pod = kube.get("Pod", name) or {}
    claims = claims_of(pod.get("spec") or {})
    wait_running(kube, name, str(claims.get("checkpoints")), timeout_s, what=f"{SERVE} pod", ready=True, poll_s=1.0)


#: Lines of a failed server's log put in the error: the pod is deleted right after (`cw try`).
FAILED_LOG_LINES = 12


def wait_ready_or_say_why(kube: Kube, name: str, timeout_s: float) -> None:
    """:func:`wait_ready`, with the end of the server's log in the error where it failed or never
    got Ready: `cw try` deletes the pod on its way out, and its log with it.

    Raises:
        Conflict: Another pod holds the run's volume.
        WaitTimeout: Not Ready in time, or it ended (with its log's last lines).
    """
    from cw_cli.k8s.queries import read_log_tail

    try:
        wait_ready(kube, name, timeout_s)
    except WaitTimeout as exc:
        pod = kube.get("Pod", name)
        tail = read_log_tail(kube, pod, SERVE, FAILED_LOG_LINES) if pod else []
        if not tail:
            raise
        shown = "\n".join(f"  {line}" for line in tail)
        raise WaitTimeout(f"{exc.message}; the end of its log:\n{shown}", hint=exc.hint) from None


def served_name(kube: Kube, pod: str, run_name: str) -> str | None:
    """The model name requests to the server pod name: the run's on vLLM; none on transformers'
    server, which is pinned to its one model."""
    labels = ((kube.get("Pod", pod) or {}).get("metadata") or {}).get("labels") or {}
    return None if labels.get(ENGINE_LABEL) == TRANSFORMERS_ENGINE else run_name


def ask(kube: Kube, pod: str, model: str | None, question: str, max_tokens: int, timeout_s: float = 600) -> str:
    """One chat completion from the server, through a port-forward of the API server (``model``:
    the name it serves the model under, None where it serves one only).

    Raises:
        Forbidden: The user may not port-forward (``pods/portforward``): exit 7.
        StreamBroken: The stream broke, or the server's port refused the connection.
        WaitTimeout: No whole answer within ``timeout_s``.
        CwError: The server answered no chat completion (its status and the start of its body).
    """
    from cw_cli.client.channels import PortForward

    asked: dict[str, Any] = {"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens}
    body = json.dumps({"model": model, **asked} if model else asked).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body  # fmt: skip
    stream = PortForward(kube, pod, SERVE_PORT, timeout_s=timeout_s)
    answer = bytearray()
    try:
        stream.send(request)
        while not _complete(bytes(answer)):  # a forwarded stream may never show the server's close
            chunk = stream.recv()
            if not chunk:
                break
            answer += chunk
            if len(answer) > MAX_ANSWER:
                raise CwError(f"the server's answer is over {MAX_ANSWER >> 20} MiB: not a chat completion")
    finally:
        stream.close()
    return _completion(bytes(answer))


#: The largest chat answer cw reads (max_tokens of text is far less).
MAX_ANSWER = 16 << 20


def _completion(answer: bytes) -> str:
    """The text of an HTTP answer holding a chat completion, parsed by ``http.client``.

    Raises:
        ServerFailed: Not a well-formed 200 with a chat completion in it (the status and the
            start of the body).
    """
    try:
        status, body = _parse_http(answer)
    except (http.client.HTTPException, ValueError) as exc:
        raise ServerFailed(f"the server's answer is not well-formed HTTP ({type(exc).__name__}): {answer[:120]!r}") from None
    if status != 200:
        raise ServerFailed(f"the server answered HTTP {status}: {body[:300].decode('utf-8', 'replace')!r}",
                           hint="its log says why: kubectl logs the server pod")  # fmt: skip
    try:
        return str(json.loads(body)["choices"][0]["message"]["content"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ServerFailed(f"the server's answer is no chat completion: {body[:300]!r}") from None


class ServerFailed(CwError):
    """The model server answered, but not with a completion (an error status, garbled HTTP)."""

    exit_code = ExitCode.RUN_FAILED


class _Received:
    """What ``http.client.HTTPResponse`` reads a whole answer from."""

    def __init__(self, data: bytes) -> None:
        self._file = io.BytesIO(data)

    def makefile(self, *_: Any, **__: Any) -> io.BytesIO:
        return self._file


def _parse_http(answer: bytes) -> tuple[int, bytes]:
    response = http.client.HTTPResponse(_Received(answer))  # type: ignore[arg-type]
    response.begin()
    return response.status, response.read()


def _complete(answer: bytes) -> bool:
    """Whether an HTTP response has arrived whole (by its Content-Length or its last chunk).

    Anything garbled counts as whole: reading on would not mend it, and :func:`_completion`
    says what is wrong.
    """
    head, found, body = answer.partition(b"\r\n\r\n")
    if not found:
        return len(head) > MAX_HEAD
    for line in head.lower().split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip() == b"content-length":
            return not value.strip().isdigit() or len(body) >= int(value.strip())
    return b"transfer-encoding: chunked" in head.lower() and body.endswith(b"0\r\n\r\n")


#: An answer's head longer than this is garbled (http.client's own line limit is 64 KiB).
MAX_HEAD = 1 << 20


#: Seconds a tunnel waits for the server's last bytes once the local client has closed its side.
_DRAIN_S = 5.0


def forward(
    kube: Kube, pod: str, local_port: int, stop: threading.Event, listening: Callable[[int], None] = lambda port: None,
) -> None:  # fmt: skip
    """Serve ``127.0.0.1:local_port`` until ``stop`` is set, as ``kubectl port-forward`` does: each
    connection gets its own port-forward stream to the pod's server port, through the API server,
    as the kubeconfig's user.

    Args:
        kube: The cluster.
        pod: The server pod.
        local_port: The port on this machine's loopback address; 0 picks a free one.
        stop: Set to stop listening (open connections are closed with it).
        listening: Called with the port once connections are accepted.

    Raises:
        CwError: The local port is taken.
    """
    try:
        listener = socket.create_server(("127.0.0.1", local_port))
    except OSError as exc:
        raise CwError(f"cannot listen on 127.0.0.1:{local_port}: {exc.strerror or exc}",
                      hint="choose another port with --forward PORT (0: any free one)") from None  # fmt: skip
    tunnels: list[threading.Thread] = []
    with listener:
        listener.settimeout(0.25)  # how soon `stop` is noticed
        listening(listener.getsockname()[1])
        while not stop.is_set():
            try:
                local, _ = listener.accept()
            except TimeoutError:
                continue
            tunnel = threading.Thread(target=_tunnel, args=(kube, pod, local, stop), daemon=True)
            tunnel.start()
            tunnels.append(tunnel)
    for tunnel in tunnels:
        tunnel.join(timeout=_DRAIN_S)


def _tunnel(kube: Kube, pod: str, local: socket.socket, stop: threading.Event) -> None:
    """Copy bytes both ways between a local connection and a new port-forward stream to the pod."""
    from cw_cli.client.channels import PortForward

    try:
        stream = PortForward(kube, pod, SERVE_PORT)
    except CwError:  # refused or unreachable: the local client sees a closed connection
        local.close()
        return
    try:
        stream.pump(local, stop.is_set, drain_s=_DRAIN_S)
    except CwError:
        pass  # the stream broke: both ends are closed below, which the local client sees
    finally:
        local.close()
        stream.close()


def stop_server(kube: Kube, name: str) -> None:
    """Delete the server pod (its Service goes with it)."""
    kube.delete("Pod", name)
    kube.delete("Service", name)

