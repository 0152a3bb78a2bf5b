"""What the after-training commands read from the other side (a chat server's HTTP answer through a
port-forward, an exec's closing Status) ends in a result or in one of cw's errors with its exit
code: never a traceback, whatever the bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cw_cli.after_training.serving import ServerFailed, _complete, _completion
from cw_cli.client.channels import exit_code_of
from cw_cli.errors import CwError, ExitCode

COMPLETION = json.dumps({"choices": [{"message": {"content": "4"}}]}).encode()


def _answer(head: str, body: bytes) -> bytes:
    return head.encode() + b"\r\n\r\n" + body


def test_a_whole_answer_is_read_by_its_length_or_its_last_chunk():
    plain = _answer(f"HTTP/1.1 200 OK\r\nContent-Length: {len(COMPLETION)}", COMPLETION)
    assert _complete(plain) and not _complete(plain[:-1])
    assert _completion(plain) == "4"
    chunked = _answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked", b"%x\r\n" % len(COMPLETION) + COMPLETION + b"\r\n0\r\n\r\n")
    assert _complete(chunked) and _completion(chunked) == "4"


@pytest.mark.parametrize("length", ["banana", "-5", "1e3", ""])
def test_a_content_length_that_is_no_number_is_read_to_the_end_as_http_client_does(length):
    answer = _answer(f"HTTP/1.1 200 OK\r\nContent-Length: {length}", COMPLETION)
    assert _complete(answer)  # reading on would not mend it
    assert _completion(answer) == "4"


@pytest.mark.parametrize(
    "answer",
    [
        _answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked", b"zz\r\n" + COMPLETION + b"\r\n0\r\n\r\n"),
        _answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked", b"ffffffffffff\r\nabc\r\n0\r\n\r\n"),
        _answer("HTTP/1.1 200 OK\r\nContent-Length: 2", b"{}"),
        b"garbage without a head",
        b"",
    ],
)
def test_a_garbled_answer_is_a_server_failure_not_a_traceback(answer):
    _complete(answer)
    with pytest.raises(ServerFailed) as raised:
        _completion(answer)
    assert raised.value.exit_code == ExitCode.RUN_FAILED


def test_an_error_status_is_the_servers_failure_with_its_body_not_bad_input():
    answer = _answer("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 12", b"out of cache")
    with pytest.raises(ServerFailed, match="HTTP 500.*out of cache") as raised:
        _completion(answer)
    assert raised.value.exit_code == ExitCode.RUN_FAILED != ExitCode.USAGE


@settings(max_examples=300, deadline=None)
@given(
    status=st.integers(0, 999),
    headers=st.lists(st.tuples(st.sampled_from(["Content-Length", "Transfer-Encoding", "X-A"]),
                               st.one_of(st.text(max_size=12), st.just("chunked"), st.integers(-9, 99).map(str))), max_size=4),
    body=st.binary(max_size=200),
)
def test_any_answer_is_a_completion_or_a_server_failure(status, headers, body):
    head = f"HTTP/1.1 {status} X\r\n" + "\r\n".join(f"{k}: {v}" for k, v in headers)
    answer = head.encode("utf-8", "replace") + b"\r\n\r\n" + body
    _complete(answer)
    try:
        assert isinstance(_completion(answer), str)
    except ServerFailed:
        pass


@given(st.binary(max_size=300))
def test_any_bytes_are_a_completion_or_a_server_failure(answer):
    _complete(answer)
    try:
        _completion(answer)
    except ServerFailed:
        pass


def test_an_exec_status_gives_the_exit_code_or_the_servers_reason():
    assert exit_code_of({"status": "Success"}) == 0
    failed = {"status": "Failure", "reason": "NonZeroExitCode",
              "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}, "message": "command terminated with non-zero exit code"}
    assert exit_code_of(failed) == 3
    with pytest.raises(CwError, match="could not run in the pod: container reader not found"):
        exit_code_of({"status": "Failure", "message": "container reader not found"})
    with pytest.raises(CwError):
        exit_code_of({"status": "Failure", "details": {"causes": [{"reason": "ExitCode", "message": "x"}]}})
