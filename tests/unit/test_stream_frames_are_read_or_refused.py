"""The websocket frames cw reads itself (client/channels.Frames: exec output, port-forward bytes) come
from the API server; whatever arrives ends in messages or in one of cw's errors, never in a
traceback or a hang: frames split anywhere across reads, fragmented messages, pings, a close, a
connection cut in the middle, an exec that ends without its exit status, garbage."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cw_cli.client import channels
from cw_cli.errors import CwError, WaitTimeout


def frame(payload: bytes, opcode: int = 2, fin: bool = True) -> bytes:
    """One unmasked server frame."""
    size = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if size < 126:
        head += bytes([size])
    elif size < 1 << 16:
        head += bytes([126]) + struct.pack(">H", size)
    else:
        head += bytes([127]) + struct.pack(">Q", size)
    return head + payload


class _Socket:
    """What Frames and exec_in_pod use of websocket-client's WebSocket: .sock, pong, close."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pongs: list[bytes] = []
        self.peer: socket.socket | None = None

    def pong(self, payload: bytes) -> None:
        self.pongs.append(payload)

    def close(self, **_: object) -> None:
        self.sock.close()


def _serve(data: bytes, pieces: list[int] | None = None, close: bool = True) -> _Socket:
    """A socket whose other end sends ``data`` in pieces of the given sizes, then closes."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)

    def send() -> None:
        at = 0
        try:
            for size in pieces or [len(data)]:
                theirs.sendall(data[at : at + size])
                at += size
                time.sleep(0.001)
            theirs.sendall(data[at:])
        except OSError:
            return  # the reader gave up first (a malformed frame): nothing more to send
        if close:
            theirs.close()

    threading.Thread(target=send, daemon=True).start()
    socket_ = _Socket(ours)
    socket_.peer = theirs  # kept open while the test holds the socket
    return socket_


class _Kube:
    namespace = "ns"

    def __init__(self, socket_: _Socket) -> None:
        self._socket = socket_

    def websocket(self, *args: object, **kwargs: object) -> _Socket:
        return self._socket


STATUS_OK = b'{"metadata":{},"status":"Success"}'


def test_messages_split_fragmented_and_interleaved_with_pings_arrive_whole():
    data = (frame(b"\x01" + b"a" * 70000) + frame(b"\x01he", fin=False) + frame(b"ping", opcode=9)
            + frame(b"llo", opcode=0) + frame(b"\x02err") + frame(b"\x03" + STATUS_OK) + frame(b"", opcode=8))  # fmt: skip
    socket_ = _serve(data, pieces=[1, 1, 3, 5000, 2])
    frames = channels.Frames(socket_)
    got = [bytes(frames.next_message() or b"") for _ in range(4)]
    assert got == [b"\x01" + b"a" * 70000, b"\x01hello", b"\x02err", b"\x03" + STATUS_OK]
    assert frames.next_message() is None and socket_.pongs == [b"ping"]


def test_an_exec_gives_its_output_and_exit_code():
    status = b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
    socket_ = _serve(frame(b"\x01out") + frame(b"\x02oops") + frame(b"\x03" + status))
    done = channels.exec_in_pod(_Kube(socket_), "p", "c", ["true"])  # type: ignore[arg-type]
    assert (done.stdout, done.stderr, done.exit_code) == (b"out", "oops", 3)


def test_an_exec_that_ends_without_its_exit_status_is_a_broken_stream():
    socket_ = _serve(frame(b"\x01half of a file"))
    with pytest.raises(channels.StreamBroken, match="without the command's exit status") as raised:
        channels.exec_in_pod(_Kube(socket_), "p", "c", ["true"])  # type: ignore[arg-type]
    assert raised.value.exit_code == 3


def test_a_connection_cut_in_the_middle_of_a_frame_is_a_broken_stream():
    socket_ = _serve(frame(b"\x01" + b"x" * 1000)[:500])
    with pytest.raises(channels.StreamBroken, match="broke off"):
        channels.exec_in_pod(_Kube(socket_), "p", "c", ["true"])  # type: ignore[arg-type]


def test_a_silent_stream_is_waited_on_until_the_commands_time_limit():
    socket_ = _serve(b"", close=False)
    socket_.sock.settimeout(0.2)
    with pytest.raises(WaitTimeout):
        channels.exec_in_pod(_Kube(socket_), "p", "c", ["sleep"], timeout_s=0.5)  # type: ignore[arg-type]


def test_a_timeout_in_the_middle_of_a_frame_keeps_the_frame():
    ours, theirs = socket.socketpair()
    ours.settimeout(0.2)
    frames = channels.Frames(_Socket(ours))
    whole = frame(b"\x01" + b"y" * 5000)
    theirs.sendall(whole[:3000])
    with pytest.raises(TimeoutError):
        frames.next_message()
    theirs.sendall(whole[3000:])
    assert bytes(frames.next_message() or b"") == b"\x01" + b"y" * 5000


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400), cut=st.lists(st.integers(1, 50), max_size=6))
def test_any_bytes_from_the_server_end_in_messages_or_a_cw_error(data, cut):
    socket_ = _serve(data, pieces=cut)
    try:
        channels.exec_in_pod(_Kube(socket_), "p", "c", ["true"], timeout_s=10)  # type: ignore[arg-type]
    except CwError:
        pass


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(st.binary(max_size=300), max_size=5), cut=st.lists(st.integers(1, 64), max_size=8))
def test_well_formed_messages_arrive_as_sent_however_the_bytes_are_cut(messages, cut):
    socket_ = _serve(b"".join(frame(m) for m in messages), pieces=cut)
    frames = channels.Frames(socket_)
    got = []
    while (message := frames.next_message()) is not None:
        got.append(bytes(message))
    assert got == messages


@pytest.mark.parametrize("header", [
    b"\x00\x7f\x00\x00\x00\x06\x00\x00\x00\x00",  # 24 GiB: hypothesis's find, a MemoryError before
    b"\x82\x7f\x7f\xff\xff\xff\xff\xff\xff\xff",  # 2^63 - 1 bytes
    b"\x82\x7f" + struct.pack(">Q", channels.Frames.MAX_MESSAGE + 1),
])  # fmt: skip
def test_a_frame_claiming_more_than_cw_takes_is_a_broken_stream_without_reading_it(header):
    with pytest.raises(channels.StreamBroken, match="a frame of [0-9]+ bytes"):
        channels.exec_in_pod(_Kube(_serve(header, close=False)), "p", "c", ["true"], timeout_s=10)  # type: ignore[arg-type]


def test_a_fragmented_message_past_the_bound_is_a_broken_stream():
    piece = b"\x01" + b"x" * (1 << 20)
    data = b"".join(frame(piece, opcode=0 if i else 2, fin=False) for i in range(17))
    with pytest.raises(channels.StreamBroken, match="a message of more than 16 MiB"):
        channels.exec_in_pod(_Kube(_serve(data, close=False)), "p", "c", ["true"], timeout_s=10)  # type: ignore[arg-type]
