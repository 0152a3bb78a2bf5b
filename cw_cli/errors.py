"""Exceptions shared by every layer, each tied to a documented exit code.

Lower layers raise these; only the CLI layer turns them into messages and exit codes.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of the `cw` command (documented in README.md)."""

    OK = 0
    RUN_FAILED = 1
    USAGE = 2
    CLUSTER_UNREACHABLE = 3
    NOT_FOUND = 4
    CONFLICT = 5
    REJECTED = 6
    FORBIDDEN = 7
    TIMEOUT = 8
    GATE_REFUSED = 9
    INTERRUPTED = 130


class CwError(Exception):
    """Base class: a user-facing error with a one-line message and an optional hint.

    Args:
        message: What went wrong, in one line.
        hint: How to fix it, in one line.
        detail: Longer detail, shown only with ``--debug``.
    """

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, hint: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail


class ConfigError(CwError):
    """The user's config or command-line values are invalid.

    Args:
        issues: One entry per problem, each already naming file, line and field.
        hint: Optional overall hint.
    """

    exit_code = ExitCode.USAGE

    def __init__(self, issues: list[str], hint: str | None = None) -> None:
        self.issues = issues
        message = issues[0] if len(issues) == 1 else f"{len(issues)} problems in the config"
        super().__init__(message, hint)


class FrameworkError(CwError):
    """An unknown framework or training type, or a plugin that cannot be used."""

    exit_code = ExitCode.USAGE


class ClusterUnreachable(CwError):
    """The API server cannot be reached or no kubeconfig is usable."""

    exit_code = ExitCode.CLUSTER_UNREACHABLE


class Forbidden(CwError):
    """401/403 from the API server."""

    exit_code = ExitCode.FORBIDDEN


class NotFound(CwError):
    """A run, namespace, secret or object does not exist."""

    exit_code = ExitCode.NOT_FOUND


class Conflict(CwError):
    """The object already exists (e.g. a run name is re-used)."""

    exit_code = ExitCode.CONFLICT


class Rejected(CwError):
    """The API server refused a manifest (400/422)."""

    exit_code = ExitCode.REJECTED


class WaitTimeout(CwError):
    """Waiting for a run or its services took longer than allowed."""

    exit_code = ExitCode.TIMEOUT


class Interrupted(CwError):
    """Ctrl-C, SIGTERM or SIGHUP stopped cw; the message says what happened to the run."""

    exit_code = ExitCode.INTERRUPTED


class GateRefused(CwError):
    """The run's export gate refuses the checkpoint: it scores worse than the base model (``--force`` exports it)."""

    exit_code = ExitCode.GATE_REFUSED


class RunFailed(CwError):
    """The run ended in failure (used by ``--wait``)."""

    exit_code = ExitCode.RUN_FAILED
