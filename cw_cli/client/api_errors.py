"""The API server's error answers as cw's errors: each HTTP status its exit code and a hint."""

from __future__ import annotations

from msgspec import json as msgspec_json

from cw_cli.errors import Conflict, CwError, Forbidden, NotFound, Rejected


def _status_message(body: bytes | str | None) -> str:
    try:
        status = msgspec_json.decode(body or b"{}")
        return str(status.get("message") or "").strip()
    except (ValueError, AttributeError):
        return (body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")).strip()


def error_for_status(status: int, body: bytes | str | None, what: str) -> CwError:
    """Turn an HTTP error from the API server into cw's error, with a hint.

    Args:
        status: HTTP status code.
        body: Response body (a Kubernetes Status object).
        what: What was being done, e.g. ``create Job foo``.
    """
    full = _status_message(body) or f"HTTP {status}"
    message = " ".join(full.split())
    if len(message) > 300:
        message = message[:297] + "..."
    if status == 401:
        return Forbidden(f"{what}: not authenticated ({message})", hint="refresh your credentials in the kubeconfig")
    if status == 403:
        return Forbidden(f"{what}: forbidden ({message})", hint="ask for the Role in docs/rbac.md, or use another --namespace")
    if status == 404:
        return NotFound(f"{what}: not found ({message})")
    if status == 409:
        return Conflict(f"{what}: already exists or changed meanwhile ({message})", hint="choose another --name")
    if status in (400, 413, 422):
        return Rejected(f"{what}: rejected by the API server: {message}", hint="check the field it names; --dry-run shows the manifest")
    return CwError(f"{what}: API server answered {status}: {message}", detail=full)
