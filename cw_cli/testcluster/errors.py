"""Exceptions of the test cluster."""

from __future__ import annotations

from cw_cli.errors import CwError, ExitCode


class TestClusterError(CwError):
    """Any failure of the test cluster (build, start, stop); the message is meant for users."""

    exit_code = ExitCode.RUN_FAILED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)


class BuildError(TestClusterError):
    """Building one of the binaries failed; `log_path` holds the full go output."""

    def __init__(self, message: str, log_path: str | None = None):
        super().__init__(message, hint=f"full log: {log_path}" if log_path else None)
        self.log_path = log_path


class StartError(TestClusterError):
    """The cluster did not come up; `log_path` points at the log of the failing component."""

    def __init__(self, message: str, log_path: str | None = None):
        super().__init__(message, hint=f"full log: {log_path}" if log_path else None)
        self.log_path = log_path
