"""Run a command in a pod through the API server (what `kubectl exec` does), with the official
client's websocket stream: cw's own transport speaks plain HTTP only, and the client already
does this well."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli.errors import ClusterUnreachable, WaitTimeout

if TYPE_CHECKING:
    from cw_cli.k8s.connection import ClusterTarget


class ExecResult(Struct, frozen=True):
    """What a command in a pod gave back."""

    stdout: bytes
    stderr: str
    exit_code: int


def official_client(target: ClusterTarget) -> Any:
    """The official client's ApiClient for ``target`` (its websocket streams: exec, port-forward).

    Raises:
        Exception: Whatever the client's kubeconfig loader raises; callers turn it into a cw error.
    """

    from kubernetes import config

    return config.new_client_from_config(config_file=target.kubeconfig or os.environ.get("KUBECONFIG"),
                                         context=target.context)  # fmt: skip


def exec_in_pod(
    target: ClusterTarget, namespace: str, pod: str, container: str, command: list[str], timeout_s: float = 300,
    sink: Callable[[bytes], None] | None = None,
) -> ExecResult:  # fmt: skip
    """Run ``command`` in a container and collect its output (bytes: it may be a file's).

    Args:
        sink: Given, stdout goes to it chunk by chunk as it arrives (a file of tens of GB is
            never held in memory) and the result's ``stdout`` is empty.

    Raises:
        ClusterUnreachable: The kubeconfig cannot be used or the API server refuses the stream.
        WaitTimeout: The command ran past ``timeout_s``.
    """
    from kubernetes import client
    from kubernetes.stream import stream

    try:
        api = official_client(target)
        response = stream(
            client.CoreV1Api(api).connect_get_namespaced_pod_exec, pod, namespace, command=command,
            container=container, stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False, binary=True,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the client raises many kinds; all mean "no stream"
        raise ClusterUnreachable(f"cannot exec in pod {pod}: {str(exc).strip()[:300]}") from None
    out, err = bytearray(), bytearray()
    write = sink or out.extend
    deadline = time.monotonic() + timeout_s
    try:
        while response.is_open():
            response.update(timeout=1)
            write(response.read_stdout() or b"")
            err += response.read_stderr() or b""
            if time.monotonic() > deadline:
                raise WaitTimeout(f"`{' '.join(command[:2])}` in pod {pod} still running after {int(timeout_s)} s")
        write(response.read_stdout() or b"")
        err += response.read_stderr() or b""
        code = response.returncode
    finally:
        response.close()
    return ExecResult(bytes(out), err.decode("utf-8", "replace"), int(code) if code is not None else 0)
