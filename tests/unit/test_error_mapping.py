"""API server errors become cw's exceptions, exit codes and one-line messages."""

from __future__ import annotations

import json

import pytest

from cw_cli.client.connection import error_for_status
from cw_cli.errors import ClusterUnreachable, Conflict, CwError, ExitCode, Forbidden, NotFound, Rejected


def _status(message):
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}).encode()


@pytest.mark.parametrize(
    "status,cls,code,words",
    [
        (401, Forbidden, ExitCode.FORBIDDEN, "not authenticated"),
        (403, Forbidden, ExitCode.FORBIDDEN, "forbidden"),
        (404, NotFound, ExitCode.NOT_FOUND, "not found"),
        (409, Conflict, ExitCode.CONFLICT, "already exists"),
        (422, Rejected, ExitCode.REJECTED, "rejected by the API server"),
        (400, Rejected, ExitCode.REJECTED, "rejected by the API server"),
    ],
)
def test_status_maps_to_class_exit_code_and_one_line_message(status, cls, code, words):
    error = error_for_status(status, _status('jobs.batch "r-trainer" is bad'), "apply Job r-trainer")
    assert type(error) is cls and error.exit_code == code
    assert error.message.startswith("apply Job r-trainer: ") and words in error.message
    assert 'jobs.batch "r-trainer" is bad' in error.message
    assert "\n" not in error.message


def test_hints_point_at_the_fix():
    assert "--name" in error_for_status(409, _status("x"), "w").hint
    assert "credentials" in error_for_status(401, _status("x"), "w").hint
    assert "--namespace" in error_for_status(403, _status("x"), "w").hint


def test_other_statuses_are_generic_cw_errors():
    error = error_for_status(500, _status("etcd is sad"), "list pods")
    assert type(error) is CwError and error.exit_code == ExitCode.USAGE
    assert "500" in error.message and "etcd is sad" in error.message


@pytest.mark.parametrize("body", [None, b"", b"not json at all", "plain text", b"{}", b'{"message": null}'])
def test_message_falls_back_when_body_is_not_a_status(body):
    error = error_for_status(404, body, "read Job x")
    assert isinstance(error, NotFound)
    assert error.message.startswith("read Job x: not found (")


def test_multi_line_body_still_gives_a_one_line_message():
    error = error_for_status(502, b"<html>\n<body>Bad Gateway</body>\n</html>\n", "apply Job x")
    assert "\n" not in error.message


def test_exit_codes_are_the_documented_ones():
    assert (ExitCode.USAGE, ExitCode.CLUSTER_UNREACHABLE, ExitCode.NOT_FOUND, ExitCode.CONFLICT) == (2, 3, 4, 5)
    assert (ExitCode.REJECTED, ExitCode.FORBIDDEN, ExitCode.TIMEOUT, ExitCode.INTERRUPTED) == (6, 7, 8, 130)
    assert ClusterUnreachable("x").exit_code == 3


def test_cli_maps_cw_errors_to_exit_codes_without_traceback(capsys):
    import click

    from cw_cli.cli.errors import handle_errors

    @handle_errors
    def command():
        raise error_for_status(409, _status("jobs.batch \"r\" already exists"), "apply Job r")

    with pytest.raises(click.exceptions.Exit) as info:
        command()
    assert info.value.exit_code == ExitCode.CONFLICT
    err = capsys.readouterr().err
    assert "error:" in err and "apply Job r" in err and "hint:" in err and "Traceback" not in err

