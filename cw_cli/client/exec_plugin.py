"""Exec credential plugins, run as kubectl runs them (non-interactively), but never for longer
than :func:`exec_timeout` nor reading more than :data:`MAX_EXEC_OUTPUT_BYTES` of their output."""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import datetime
from typing import Any

from msgspec.structs import replace

from cw_cli.client.credentials import Credentials, ExecPlugin, KubeconfigError
from cw_cli.client.kubeconfig_values import header_safe, type_name

_DEFAULT_INSTALL_HINT = "install the credential plugin the kubeconfig's exec section names, or put it on PATH"
#: Seconds an exec credential plugin may run before it is stopped (``CW_EXEC_PLUGIN_TIMEOUT``).
EXEC_TIMEOUT_S = 60.0
#: The most a plugin may print on stdout or stderr (an ExecCredential is a few KiB).
MAX_EXEC_OUTPUT_BYTES = 16 * 2**20


def exec_timeout() -> float:
    """Seconds an exec plugin may run: ``CW_EXEC_PLUGIN_TIMEOUT``, else :data:`EXEC_TIMEOUT_S`."""
    try:
        seconds = float(os.environ.get("CW_EXEC_PLUGIN_TIMEOUT", EXEC_TIMEOUT_S))
    except ValueError:
        return EXEC_TIMEOUT_S
    return seconds if 0 < seconds <= 86400 else EXEC_TIMEOUT_S


def run_exec_plugin(plugin: ExecPlugin) -> dict[str, Any]:
    """Run a credential plugin as kubectl does, non-interactively, for at most :func:`exec_timeout`.

    kubectl waits for a plugin forever; cw stops it (and what it started) after the time limit
    and names it, so a plugin stuck on a network call or a prompt is not a hang.

    Returns:
        ``token`` and/or ``client_cert`` + ``client_key``, and ``expires`` (epoch seconds or None).

    Raises:
        KubeconfigError: The command is missing, fails or runs past the limit, or its output is
            not a credential, or its token cannot be sent as a header.
    """
    import json
    import signal
    import subprocess

    request: dict[str, Any] = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    if plugin.cluster is not None:
        request["spec"]["cluster"] = json.loads(plugin.cluster)
    env = dict(os.environ)
    env.update(plugin.env)
    env["KUBERNETES_EXEC_INFO"] = json.dumps(request)
    limit = exec_timeout()
    try:
        # Its own process group, so the time limit stops what it started too.
        child = subprocess.Popen([plugin.command, *plugin.args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    except FileNotFoundError:
        raise KubeconfigError(f"exec: executable {plugin.command} not found", hint=plugin.install_hint or _DEFAULT_INSTALL_HINT) from None
    except (OSError, ValueError) as exc:
        raise KubeconfigError(f"exec: cannot run {plugin.command}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        stdout, stderr_bytes = _bounded_output(child, limit)
    except _TooMuchOutput:
        _kill_group(child, signal.SIGKILL)
        raise KubeconfigError(f"exec: credential plugin {plugin.command} printed more than {MAX_EXEC_OUTPUT_BYTES // 2**20} MiB; "
                              "stopped it (an ExecCredential is a few KiB)") from None  # fmt: skip
    except subprocess.TimeoutExpired:
        _kill_group(child, signal.SIGKILL)
        raise KubeconfigError(
            f"exec: {plugin.where + ' ' if plugin.where else ''}credential plugin {plugin.command} gave no answer in "
            f"{limit:g}s; stopped it",
            hint="run the plugin by hand to see what it waits for; CW_EXEC_PLUGIN_TIMEOUT=SECONDS allows it longer",
        ) from None
    except BaseException:  # Ctrl-C: the plugin goes too
        _kill_group(child, signal.SIGKILL)
        raise
    stderr = stderr_bytes.decode(errors="replace").strip()
    if child.returncode != 0:
        tail = f": {' '.join(stderr.split())[-300:]}" if stderr else ""
        raise KubeconfigError(f"exec: executable {plugin.command} failed with exit code {child.returncode}{tail}")
    if stderr:
        print(stderr, file=sys.stderr)  # kubectl shows a plugin's messages too
    return _exec_output(stdout, plugin)


class _TooMuchOutput(Exception):
    """A plugin printed more than :data:`MAX_EXEC_OUTPUT_BYTES`."""


def _bounded_output(child: Any, limit_s: float) -> tuple[bytes, bytes]:
    """A plugin's stdout and stderr, each read up to :data:`MAX_EXEC_OUTPUT_BYTES`, within ``limit_s``.

    ``communicate()`` would keep all a runaway plugin prints (``yes`` fills gigabytes a second).

    Raises:
        subprocess.TimeoutExpired: The plugin did not end in time.
        _TooMuchOutput: It printed more than the bound.
    """
    import subprocess
    import threading

    kept: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
    overflow = threading.Event()

    def drain(stream: Any, into: bytearray) -> None:
        while chunk := stream.read1(65536):
            into += chunk
            if len(into) > MAX_EXEC_OUTPUT_BYTES:
                overflow.set()
                return

    readers = [threading.Thread(target=drain, args=(child.stdout, kept[1]), daemon=True),
               threading.Thread(target=drain, args=(child.stderr, kept[2]), daemon=True)]  # fmt: skip
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + limit_s
    while True:  # until both pipes are closed (Go's Output() waits for them too)
        for reader in readers:
            reader.join(0.01)
        if overflow.is_set():
            raise _TooMuchOutput()
        if not any(reader.is_alive() for reader in readers):
            break
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(child.args, limit_s)
    child.wait(max(0.01, deadline - time.monotonic()))
    for stream in (child.stdout, child.stderr):
        stream.close()
    return bytes(kept[1]), bytes(kept[2])


def _kill_group(child: Any, signal_number: int) -> None:
    """Stop a plugin started in its own session, and whatever it started, then reap it."""
    import subprocess

    try:
        os.killpg(child.pid, signal_number)
    except OSError:
        child.kill()
    try:
        child.wait(timeout=5)  # the readers of its pipes end once the group is gone
    except (subprocess.TimeoutExpired, OSError):
        pass


def _exec_output(stdout: bytes, plugin: ExecPlugin) -> dict[str, Any]:
    import json

    try:
        data = json.loads(stdout)
    except (ValueError, RecursionError) as exc:
        raise KubeconfigError(f"exec: {plugin.command} did not print an ExecCredential: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != "ExecCredential":
        raise KubeconfigError(f"exec: {plugin.command} did not print an ExecCredential")
    if data.get("apiVersion") != plugin.api_version:
        raise KubeconfigError(
            f"exec: plugin is configured to use API version {plugin.api_version}, plugin returned version {data.get('apiVersion')}"
        )
    status = data.get("status")
    if not isinstance(status, dict):
        raise KubeconfigError(f"exec: {plugin.command} returned no status")
    token, cert, key = status.get("token"), status.get("clientCertificateData"), status.get("clientKeyData")
    if not token and not cert and not key:
        raise KubeconfigError(f"exec: {plugin.command} returned neither a token nor a cert/key pair")
    if bool(cert) != bool(key):
        raise KubeconfigError(f"exec: {plugin.command} returned only a certificate or a key, not both")
    for field, value in (("token", token), ("clientCertificateData", cert), ("clientKeyData", key)):
        if value and not isinstance(value, str):
            raise KubeconfigError(f"exec: {plugin.command} returned a status.{field} that is {type_name(value)}, not text")
    result: dict[str, Any] = {"expires": _rfc3339(status.get("expirationTimestamp"))}
    if token:
        source = f"{plugin.where}: the answer of exec plugin {plugin.command}, status.token," if plugin.where else (
            f"exec: the answer of {plugin.command}, status.token,")  # fmt: skip
        result["token"] = header_safe(token, source, ascii_only=True)
    if cert:
        result["client_cert"], result["client_key"] = str(cert).encode(), str(key).encode()
    return result


def refresh(credentials: Credentials) -> Credentials:
    """The credentials with their exec plugin run again (after a 401, or once expired)."""
    if credentials.exec_plugin is None:
        return credentials
    fresh = run_exec_plugin(credentials.exec_plugin)
    return replace(credentials, token=fresh.get("token"), client_cert=fresh.get("client_cert"),
                   client_key=fresh.get("client_key"), expires=fresh.get("expires"))  # fmt: skip


_FRACTION = re.compile(r"(\.\d{1,6})\d*")


def _rfc3339(value: Any) -> float | None:
    """Epoch seconds of an RFC 3339 time (Python 3.10's fromisoformat wants no Z, <= 6 digits)."""
    if not value:
        return None

    text = _FRACTION.sub(r"\1", str(value).replace("Z", "+00:00").replace("z", "+00:00"))
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def expired(credentials: Credentials, skew_s: float = 10.0) -> bool:
    """Whether an exec credential's expiry has passed (a few seconds early, not to race it)."""
    return credentials.expires is not None and time.time() >= credentials.expires - skew_s
