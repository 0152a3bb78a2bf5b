"""Kubernetes' channel protocol over websockets: exec in a pod and port-forward to it, the way
`kubectl exec` and `kubectl port-forward` do, through cw's one client (:meth:`Kube.websocket
<cw_cli.client.connection.Kube.websocket>`: the kubeconfig's identity, impersonation and proxy).

Every binary message starts with its channel's number. Exec: 1 stdout, 2 stderr, 3 the exit
status (a ``Status`` object, sent once at the end). Port-forward: for the n-th port, 2n carries
data and 2n+1 errors, and the first message of each channel starts with the port (two bytes,
little-endian). Output is handed on as it arrives, so nothing grows with what a command prints.
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from msgspec import Struct

from cw_cli.client.connection import CONNECT_TIMEOUT_S, Kube
from cw_cli.errors import ClusterUnreachable, CwError, WaitTimeout

#: v4 is what every supported API server and kubelet speak, and the API server passes it straight
#: through to the kubelet; offering v5 (a stdin close signal cw does not need) makes the API server
#: translate the stream to SPDY itself, which halved the bytes per second through the test cluster.
EXEC_PROTOCOLS = ("v4.channel.k8s.io",)
PORT_FORWARD_PROTOCOLS = ("v4.channel.k8s.io",)
STDOUT, STDERR, ERROR = 1, 2, 3
#: stdout kept in memory when no sink is given (a listing): more is an error, never a slow death.
MAX_KEPT_STDOUT = 256 << 20
#: The last bytes of stderr kept for an error message.
KEPT_STDERR = 64 << 10
#: How long a stream may stay silent before a frame read gives up once (the caller's loop decides).
IDLE_POLL_S = 30.0


class ExecResult(Struct, frozen=True):
    """What a command in a pod gave back.

    Attributes:
        stdout: Its output (empty when a sink took it).
        stderr: The end of its error output.
        exit_code: Its exit status.
    """

    stdout: bytes
    stderr: str
    exit_code: int


class StreamBroken(CwError):
    """A stream ended without the exit status a finished command sends (a cut connection, a
    container that went away); the exit code of an unreachable cluster."""

    exit_code = ClusterUnreachable.exit_code


def exit_code_of(status: dict[str, Any]) -> int:
    """The exit code in the ``Status`` an exec's error channel ends with.

    Raises:
        CwError: A failure that is not a command's exit (the container is gone, the command
            could not start): the API server's message.
    """
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    for cause in causes:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(str(cause.get("message")))
            except ValueError:
                break
    message = " ".join(str(status.get("message") or status.get("reason") or "no message").split())[:300]
    raise CwError(f"the command could not run in the pod: {message}")


def exec_in_pod(
    kube: Kube, pod: str, container: str, command: list[str], *, timeout_s: float = 300,
    sink: Callable[[bytes], None] | None = None,
) -> ExecResult:  # fmt: skip
    """Run ``command`` in a container and collect its output (bytes: it may be a file's).

    Args:
        kube: The cluster, as the kubeconfig's user.
        pod: The pod's name (in ``kube``'s namespace).
        container: The container's name.
        command: The program and its arguments.
        timeout_s: The longest the command may run.
        sink: Given, stdout goes to it chunk by chunk as it arrives (memory stays flat whatever
            the size) and the result's ``stdout`` is empty.

    Raises:
        Forbidden: The user may not exec in pods (``pods/exec``): exit 7.
        NotFound: No such pod or container.
        ClusterUnreachable: The API server cannot be reached.
        StreamBroken: The stream ended before the command's exit status came.
        WaitTimeout: The command ran past ``timeout_s``.
        CwError: The command could not start (the API server's reason).
    """
    query = [("container", container), ("stdout", "true"), ("stderr", "true"), *(("command", part) for part in command)]
    what = f"exec in pod {pod}"
    socket_ = kube.websocket(f"/api/v1/namespaces/{kube.namespace}/pods/{quote(pod, safe='')}/exec", query,
                             EXEC_PROTOCOLS, what, timeout=(CONNECT_TIMEOUT_S, IDLE_POLL_S))  # fmt: skip
    kept, err, error = bytearray(), bytearray(), bytearray()

    def keep(chunk: bytes) -> None:
        kept.extend(chunk)
        if len(kept) > MAX_KEPT_STDOUT:
            raise CwError(f"`{' '.join(command[:2])[:60]}` in pod {pod} printed more than {MAX_KEPT_STDOUT >> 20} MiB")

    write = sink or keep
    deadline = time.monotonic() + timeout_s
    try:
        for channel, data in _messages(socket_, what, deadline):
            if channel == STDOUT:
                write(data)
            elif channel == STDERR:
                err.extend(data)
                del err[:-KEPT_STDERR]
            elif channel == ERROR:
                error.extend(data)  # one Status, maybe in pieces, sent when the command ended
    finally:
        socket_.close()
    status = _status(bytes(error)) if error else None
    if status is None:
        raise StreamBroken(f"{what}: the stream ended without the command's exit status (connection cut, or the container went away)",
                           hint="run the command again")  # fmt: skip
    return ExecResult(bytes(kept), err.decode("utf-8", "replace"), exit_code_of(status))


def _status(data: bytes) -> dict[str, Any]:
    try:
        status = json.loads(data)
    except ValueError:
        return {"status": "Failure", "message": data[:300].decode("utf-8", "replace")}
    return status if isinstance(status, dict) else {"status": "Failure", "message": str(status)[:300]}


def _messages(socket_: Any, what: str, deadline: float) -> Any:
    """(channel, payload) of each binary message until the server closes the stream."""
    frames = Frames(socket_)
    while True:
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what}: still running at its time limit")
        try:
            message = frames.next_message()
        except TimeoutError:
            continue  # silent a while: look at the deadline, then wait again
        except (_Malformed, OSError) as exc:
            raise StreamBroken(f"{what}: the stream broke off ({exc or type(exc).__name__})", hint="run the command again") from None
        if message is None:
            return
        if message:
            yield message[0], message[1:]


class _Malformed(Exception):
    """A frame no websocket server sends (a text or masked frame, an unknown opcode)."""


class Frames:
    """The messages of a websocket, read in large pieces from its socket.

    websocket-client opens the stream, answers pings and sends; reading the frames here instead of
    through its ``recv_data`` (a few small reads and objects per frame) tripled the bytes per second
    of a download. Server frames are never masked (RFC 6455 5.1); continuations are joined.
    """

    _READ = 1 << 20
    #: The largest frame or message taken (the API server sends an exec's output in pieces of
    #: 32 KiB); a header claiming more is garbled, and reading it would allocate its claimed size.
    MAX_MESSAGE = 16 << 20

    def __init__(self, socket_: Any) -> None:
        self._socket = socket_
        self._sock = socket_.sock
        self._buffer = bytearray()
        self._start = 0  # bytes before it belong to frames already returned
        self._pieces: list[bytes] = []  # a fragmented message's frames so far
        self._pieces_size = 0

    def buffered(self) -> bool:
        """Whether a whole frame may already be here (select() on the socket cannot tell)."""
        return len(self._buffer) - self._start >= 2 or bool(getattr(self._sock, "pending", lambda: 0)())

    def next_message(self) -> memoryview | None:
        """The next data message's payload; None once the server closed the stream.

        A timeout leaves the stream as it was: the frame is taken only once all of it is here.

        Raises:
            TimeoutError: Nothing arrived within the socket's timeout (call again to go on).
            OSError: The connection broke in the middle of a frame.
        """
        while True:
            frame = self._frame()
            if frame is None:
                return None
            first, payload = frame
            opcode = first & 0x0F
            if opcode == 0x8:  # close
                return None
            if opcode == 0x9:  # ping
                self._socket.pong(payload)
                continue
            if opcode == 0xA:  # pong
                continue
            if opcode not in (0x0, 0x2):
                raise _Malformed(f"a frame of opcode {opcode}, not a binary channel message")
            if not first & 0x80:  # more frames of this message follow
                self._pieces.append(payload)
                self._pieces_size += len(payload)
                if self._pieces_size > self.MAX_MESSAGE:
                    raise _Malformed(f"a message of more than {self.MAX_MESSAGE >> 20} MiB")
                continue
            if self._pieces:
                payload, self._pieces, self._pieces_size = b"".join([*self._pieces, payload]), [], 0
            return memoryview(payload)

    def _frame(self) -> tuple[int, bytes] | None:
        """(first header byte, payload) of the next frame, or None at a clean end of the connection."""
        need = 2
        while True:
            here = len(self._buffer) - self._start
            if here >= 2:
                second = self._buffer[self._start + 1]
                if second & 0x80:
                    raise _Malformed("a masked frame from the server")
                size = second & 0x7F
                header = 2 + (2 if size == 126 else 8 if size == 127 else 0)
                need = header
                if here >= header:
                    if size >= 126:
                        size = int.from_bytes(self._buffer[self._start + 2 : self._start + header], "big")
                    if size > self.MAX_MESSAGE:
                        raise _Malformed(f"a frame of {size} bytes (cw takes {self.MAX_MESSAGE >> 20} MiB at most)")
                    need = header + size
                    if here >= need:
                        first = self._buffer[self._start]
                        payload = bytes(self._buffer[self._start + header : self._start + need])
                        self._start += need
                        return first, payload
            if not self._fill(need):
                return None

    def _fill(self, need: int) -> bool:
        """Read more; False when the connection ended cleanly between frames."""
        if self._start:
            del self._buffer[: self._start]  # only frames already returned
            self._start = 0
        chunk = self._sock.recv(max(self._READ, need - len(self._buffer)))
        if not chunk:
            if self._buffer or self._pieces:
                raise ConnectionResetError("the connection closed in the middle of a message")
            return False
        self._buffer += chunk
        return True


class PortForward:
    """One connection to a port of a pod, through the API server (a port-forward stream).

    Use from one thread: :meth:`pump` moves bytes both ways between it and a local socket;
    :meth:`send` and :meth:`recv` serve a single request.
    """

    def __init__(self, kube: Kube, pod: str, port: int, timeout_s: float = 600) -> None:
        what = f"port-forward to pod {pod}:{port}"
        self._what = what
        path = f"/api/v1/namespaces/{kube.namespace}/pods/{quote(pod, safe='')}/portforward"
        self._socket = kube.websocket(path, [("ports", str(port))], PORT_FORWARD_PROTOCOLS, what, timeout=(CONNECT_TIMEOUT_S, timeout_s))
        self._frames = Frames(self._socket)
        self._prefixed = {0: False, 1: False}  # each channel's first message starts with the port
        self._error = bytearray()

    def send(self, data: bytes) -> None:
        """Send bytes to the pod's port.

        Raises:
            StreamBroken: The stream is gone.
        """
        import websocket

        try:
            self._socket.send_bytes(b"\0" + data)
        except (websocket.WebSocketException, OSError) as exc:
            raise StreamBroken(f"{self._what}: the stream broke off ({exc or type(exc).__name__})") from None

    def recv(self) -> bytes:
        """The next bytes from the pod's port; b"" once the stream ended.

        Raises:
            StreamBroken: The stream broke, or the pod refused the connection (its port is closed).
            WaitTimeout: Nothing came within the stream's timeout.
        """
        while True:
            try:
                message = self._frames.next_message()
            except TimeoutError:
                raise WaitTimeout(f"{self._what}: no answer in time") from None
            except (_Malformed, OSError) as exc:
                raise StreamBroken(f"{self._what}: the stream broke off ({exc or type(exc).__name__})") from None
            if message is None:
                return self._ended()
            if not message or message[0] > 1:
                continue
            channel, payload = message[0], bytes(message[1:])
            if not self._prefixed[channel]:
                self._prefixed[channel] = True
                payload = payload[2:]
            if channel == 1:
                self._error += payload
            elif payload:
                return payload

    def _ended(self) -> bytes:
        if self._error:
            message = " ".join(self._error.decode("utf-8", "replace").split())[:300]
            raise StreamBroken(f"{self._what}: {message}")
        return b""

    def fileno(self) -> int:
        """The stream's socket, for select()."""
        return int(self._socket.sock.fileno())

    def buffered(self) -> bool:
        """Whether bytes already read from the socket wait to be decoded (select() cannot see them)."""
        return self._frames.buffered()

    def close(self) -> None:
        """End the stream."""
        try:
            self._socket.close(timeout=1)
        except Exception:  # noqa: BLE001 - a broken stream may fail to close; it is gone either way
            pass

    def pump(self, local: Any, stop: Callable[[], bool], drain_s: float = 5.0) -> None:
        """Copy bytes both ways between ``local`` (a connected socket) and the pod's port until
        either side ends or ``stop()`` is true.

        One thread does both directions (select), so the TLS connection is never used by two
        threads at once. Once the local side has closed its half, answers still on their way
        are delivered for up to ``drain_s`` seconds of quiet.
        """
        local_open, quiet_since = True, None
        while not stop():
            readable = [self] if self.buffered() else select.select([local, self] if local_open else [self], [], [], 0.25)[0]
            if not readable:
                if not local_open:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > drain_s:
                        return
                continue
            quiet_since = None
            if local in readable:
                data = _recv_local(local)
                if data:
                    self.send(data)
                else:
                    local_open = False  # the client is done sending; its answer may still come
            if self in readable:
                data = self.recv()
                if not data:
                    return
                try:
                    local.sendall(data)
                except OSError:
                    return


def _recv_local(local: Any) -> bytes:
    try:
        return bytes(local.recv(65536))
    except OSError:
        return b""

