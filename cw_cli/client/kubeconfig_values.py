"""Checks of the values a kubeconfig holds, before any of them reaches a request: the file
itself (size, YAML aliases), text and boolean fields, files it names, and header values."""

from __future__ import annotations

import base64
import os
import re
from typing import Any

from cw_cli.client.credentials import KubeconfigError, Unsupported
from cw_cli.plain_files import NotAPlainFile, check_plain_file, read_plain_file

#: The largest kubeconfig read (a merged one with a thousand contexts and their certificates is ~5 MiB).
MAX_KUBECONFIG_BYTES = 32 * 2**20
#: The largest file a kubeconfig names (a token, a CA bundle, a client certificate or key).
MAX_NAMED_FILE_BYTES = 8 * 2**20
#: The most values a kubeconfig may hold once its YAML aliases are expanded: a real one has a few
#: thousand; an alias bomb ("billion laughs") expands a few lines into billions.
MAX_KUBECONFIG_VALUES = 1_000_000
# Control characters (tab included, as in a bearer token nothing else is allowed) and DEL: in an
# HTTP header a CR or LF ends the line, and what follows would be a header the value's author chose.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_file(path: str) -> dict[str, Any]:
    """One kubeconfig file as a mapping ({} for an empty file or /dev/null).

    Raises:
        KubeconfigError: Not a small regular file, not YAML, not a mapping, or an alias bomb.
        OSError: The file cannot be read.
    """
    import yaml

    if os.path.realpath(path) == os.devnull:
        return {}  # KUBECONFIG=/dev/null: an empty config, as kubectl reads it
    try:
        text = read_plain_file(path, MAX_KUBECONFIG_BYTES)  # a missing or unreadable file: OSError, as before
    except NotAPlainFile as exc:
        raise KubeconfigError(f"cannot read the kubeconfig {path}: {exc}",
                              hint="set KUBECONFIG (or --kubeconfig) to a kubeconfig file") from None  # fmt: skip
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:  # nested thousands deep
        raise KubeconfigError(f"{path} is nested too deep to be a kubeconfig") from None
    if data is None:
        return {}  # kubectl reads an empty file as an empty config
    if not isinstance(data, dict):
        raise KubeconfigError(f"{path} is not a kubeconfig (not a mapping)")
    if b"&" in text and b"*" in text:  # an alias needs an anchor: most kubeconfigs have neither
        _check_expansion(data, path)
    return data


def _check_expansion(data: Any, path: str) -> None:
    """Refuse a document whose YAML aliases expand it past :data:`MAX_KUBECONFIG_VALUES` values, or
    make it contain itself.

    The loader shares an aliased value instead of copying it, so loading a billion-laughs
    document is quick; reading it (a list of groups, each a list of lists...) would not be.
    Counted without recursion, each shared value once.
    """
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_ids.discard(key)
            values = node.values() if isinstance(node, dict) else node
            total = 1 + sum(sizes.get(id(child), 1) for child in values)
            if isinstance(node, dict):
                total += len(node)  # the keys
            if total > MAX_KUBECONFIG_VALUES:
                raise KubeconfigError(f"{path}: its YAML aliases expand it past {MAX_KUBECONFIG_VALUES:,} values "
                                      "(an alias bomb), not a kubeconfig")  # fmt: skip
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in open_ids:
            raise KubeconfigError(f"{path}: a YAML alias makes it contain itself, not a kubeconfig")
        open_ids.add(key)
        stack.append((node, True))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, False) for child in children if isinstance(child, (dict, list)))


def type_name(value: Any) -> str:
    """What a YAML value is, in words ("a mapping", "a number"), for messages."""
    return {dict: "a mapping", list: "a list", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def text_field(body: dict[str, Any], key: str, where: str) -> str | None:
    """A text field (None when absent or empty); anything else is refused, as kubectl refuses it.

    ``str()`` of a list or a number would be a wrong value sent silently (YAML reads ``0123`` as 83).
    """
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise KubeconfigError(f"{where} {key} is {type_name(value)}, not text",
                              hint="write it as a quoted string, as kubectl requires")  # fmt: skip
    return value


def flag_field(body: dict[str, Any], key: str, where: str) -> bool:
    """A boolean field: ``"false"`` (text) would be true to Python, and kubectl refuses it."""
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise KubeconfigError(f"{where} {key} is {type_name(value)}, not true or false")
    return value


def header_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an HTTP header value, or None.

    A CR or LF would end the header line and start one the value's author chose (kubectl, through
    Go's net/http, refuses such values too); other control characters have no place in a header.
    """
    found = CONTROL.search(value)
    if found is None:
        return None
    kind = "a line break" if found.group() in "\r\n" else "a control character"
    return f"holds {kind} ({found.group()!r} at position {found.start()})"


def header_safe(value: str, where: str, ascii_only: bool = False) -> str:
    """``value``, refused if it cannot go into an HTTP header as it is.

    Args:
        value: The value.
        where: The file and field, for the message.
        ascii_only: A bearer token is ASCII (RFC 6750); anything else is a wrong file or a paste error.
    """
    problem = header_problem(value)
    if problem is None and ascii_only and not value.isascii():
        problem = "holds a character that is not ASCII, which a token never has"
    if problem is not None:
        raise KubeconfigError(f"{where} {problem}; cw does not send it as an HTTP header",
                              hint="check the value: a line break or a control character is never part of it")  # fmt: skip
    return value


def resolve_path(path: str, origin: str) -> str:
    """A path from a kubeconfig entry, relative to the directory of the file that defined it."""
    if os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(origin)), path))  # Go's filepath.Join cleans too


def read_named(path: str, what: str, origin: str | None = None) -> bytes:
    """A file the kubeconfig names: a regular file of at most :data:`MAX_NAMED_FILE_BYTES`, never
    a FIFO, a device or a kernel pseudo-file (those would block, or never end).

    Args:
        path: The file.
        what: The entry and field naming it (``user 'u' tokenFile``).
        origin: The kubeconfig file that names it.
    """
    try:
        return read_plain_file(path, MAX_NAMED_FILE_BYTES)
    except OSError as exc:
        named = f" (named in {origin})" if origin else ""
        raise KubeconfigError(f"cannot read {what} {path}{named}: {exc.strerror or exc}") from None


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=False)
    except ValueError:
        raise KubeconfigError(f"{what} is not valid base64") from None


def file_or_data(body: dict[str, Any], key: str, origin: str, what: str) -> bytes | None:
    """``key-data`` (base64) or the file ``key`` names; both at once is for the official client."""
    where = f"{origin}: {what}"
    data, path = text_field(body, f"{key}-data", where), text_field(body, key, where)
    if data and path:
        raise Unsupported(f"{what}: both {key} and {key}-data")
    if data:
        return _b64(data, f"{where} {key}-data")
    if path:
        return read_named(resolve_path(path, origin), f"{what} {key}", origin)
    return None


def check_named_files(body: dict[str, Any], keys: tuple[str, ...], origin: str, what: str) -> None:
    """Refuse, before anything reads them, the files an entry names that are not small regular
    files: the official client (cw's fallback) would open a FIFO and wait forever."""
    for key in keys:
        path = text_field(body, key, f"{origin}: {what}")
        if path:
            resolved = resolve_path(path, origin)
            try:
                check_plain_file(resolved, MAX_NAMED_FILE_BYTES)
            except FileNotFoundError:
                pass  # reported by whoever reads it, as before
            except OSError as exc:
                raise KubeconfigError(f"cannot read {what} {key} {resolved} (named in {origin}): {exc.strerror or exc}") from None
