"""Reading the kubeconfig the way kubectl does, without the ``kubernetes`` package.

:func:`load` merges the files of ``$KUBECONFIG`` (else ``~/.kube/config``) like kubectl: the
first file that defines a cluster, user or context name wins it whole, the first file that sets
``current-context`` wins it, missing files are skipped, and relative paths are resolved against
the directory of the file that defined the entry. It returns the resolved :class:`Credentials`
of one context, with file contents read and an exec plugin already run.

What only the official client handles (``auth-provider``, and combinations kubectl itself
refuses but the official client accepts) raises :class:`Unsupported`, so the caller can
fall back to it and behave as before. Impersonation (``as``...) is read here: the official client
would drop it, so with anything it alone handles it is an error.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from msgspec import Struct
from msgspec.structs import replace

from cw_cli.plain_files import NotAPlainFile, check_plain_file, read_plain_file

#: The exec plugin API versions kubectl still speaks.
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
#: The cluster extension an exec plugin gets as ``spec.cluster.config`` (provideClusterInfo).
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
_USER_KEYS = {"token", "tokenFile", "client-certificate", "client-certificate-data", "client-key", "client-key-data",
              "username", "password", "exec", "extensions", "as", "as-groups", "as-uid", "as-user-extra"}  # fmt: skip
_IMPERSONATION_KEYS = frozenset({"as", "as-groups", "as-uid", "as-user-extra"})
_DEFAULT_INSTALL_HINT = "install the credential plugin the kubeconfig's exec section names, or put it on PATH"
#: The largest kubeconfig read (a merged one with a thousand contexts and their certificates is ~5 MiB).
MAX_KUBECONFIG_BYTES = 32 * 2**20
#: The largest file a kubeconfig names (a token, a CA bundle, a client certificate or key).
MAX_NAMED_FILE_BYTES = 8 * 2**20
#: The most values a kubeconfig may hold once its YAML aliases are expanded: a real one has a few
#: thousand; an alias bomb ("billion laughs") expands a few lines into billions.
MAX_KUBECONFIG_VALUES = 1_000_000
#: Seconds an exec credential plugin may run before it is stopped (``CW_EXEC_PLUGIN_TIMEOUT``).
EXEC_TIMEOUT_S = 60.0
#: The most a plugin may print on stdout or stderr (an ExecCredential is a few KiB).
MAX_EXEC_OUTPUT_BYTES = 16 * 2**20
# Control characters (tab included, as in a bearer token nothing else is allowed) and DEL: in an
# HTTP header a CR or LF ends the line, and what follows would be a header the value's author chose.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class KubeconfigError(Exception):
    """The kubeconfig cannot be used (kubectl would refuse it too).

    Args:
        message: What is wrong, naming the file or entry.
        hint: How to fix it, when there is more to say than the message.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class Unsupported(KubeconfigError):
    """The kubeconfig uses something only the official client handles: fall back to it."""


class UnknownContext(KubeconfigError):
    """``--context`` names a context no kubeconfig file defines.

    Args:
        context: The name asked for.
        known: The names the kubeconfig defines.
    """

    def __init__(self, context: str, known: list[str]) -> None:
        super().__init__(f"no context {context!r} in the kubeconfig")
        self.context = context
        self.known = known


class ExecPlugin(Struct, frozen=True):
    """A resolved ``users[].user.exec`` section, to run again when its credential is refused.

    Attributes:
        command: The program; made absolute when it contains a path separator.
        args: Its arguments.
        env: Extra environment variables, in order (later ones win).
        api_version: The ExecCredential API version it speaks.
        install_hint: What to tell the user when the command is missing.
        cluster: ``spec.cluster`` to send (provideClusterInfo), else None.
        where: The kubeconfig file and user that define it, for error messages.
    """

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""
    cluster: str | None = None  # JSON text, so the dataclass stays hashable
    where: str = ""


class Credentials(Struct, frozen=True):
    """Everything needed to talk to one API server as one user.

    Attributes:
        server: The API server's URL, without a trailing slash.
        context: The context's name ("" when not from a kubeconfig).
        namespace: The context's namespace, or None.
        ca_data: PEM bytes of the CAs to trust; None trusts the system's.
        insecure: Skip verifying the server's certificate (insecure-skip-tls-verify).
        tls_server_name: The name to verify the server's certificate against (and send as SNI).
        client_cert: PEM client certificate.
        client_key: PEM client key.
        token: Bearer token.
        username: Basic auth user.
        password: Basic auth password.
        exec_plugin: The plugin that made ``token`` or the client certificate.
        expires: When the plugin's credential expires (epoch seconds), or None.
        proxy: The cluster's ``proxy-url``, an http:// proxy used for every request, whatever
            ``HTTPS_PROXY`` and ``NO_PROXY`` say (kubectl's rule); without one the transport
            takes the environment's proxy (:func:`cw_cli.client.transport.proxy_for`).
        impersonate: The Impersonate-* headers of the user's ``as``, ``as-groups``, ``as-uid`` and
            ``as-user-extra`` (kubectl's), one pair per header line: a group is one line each.
    """

    server: str
    context: str = ""
    namespace: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None
    token: str | None = None
    username: str | None = None
    password: str | None = None
    exec_plugin: ExecPlugin | None = None
    expires: float | None = None
    proxy: str | None = None
    impersonate: tuple[tuple[str, str], ...] = ()

    #: Fields whose values never appear in a repr (logs and tracebacks).
    _SECRET_FIELDS: ClassVar[frozenset[str]] = frozenset({"ca_data", "client_cert", "client_key", "token", "password"})

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in self.__struct_fields__ if name not in self._SECRET_FIELDS
        )
        return f"Credentials({shown})"

    @property
    def authorization(self) -> str | None:
        """The Authorization header these credentials send, if any."""
        if self.token:
            return f"Bearer {self.token}"
        if self.username is not None and self.password is not None:
            pair = f"{self.username}:{self.password}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        return None


class _Entry:
    """One named cluster, user or context, with the file that defined it."""

    __slots__ = ("body", "origin")

    def __init__(self, body: dict[str, Any], origin: str) -> None:
        self.body = body
        self.origin = origin


class _Merged:
    """The merged kubeconfig files (plain classes: each dataclass costs a millisecond to import)."""

    def __init__(self) -> None:
        self.clusters: dict[str, _Entry] = {}
        self.users: dict[str, _Entry] = {}
        self.contexts: dict[str, _Entry] = {}
        self.current_context = ""
        self.files: list[str] = []


def kubeconfig_paths(explicit: str | None = None) -> tuple[list[str], bool]:
    """The files to read, and whether they must exist (an explicit path must).

    Args:
        explicit: A path given by the caller (``--kubeconfig``); it overrides ``$KUBECONFIG``.
    """
    if explicit:
        return [os.path.expanduser(explicit)], True
    env = os.environ.get("KUBECONFIG")
    if env:
        return [os.path.expanduser(path) for path in env.split(os.pathsep) if path], False
    return [os.path.expanduser(os.path.join("~", ".kube", "config"))], False


def _parse(path: str) -> dict[str, Any]:
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


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _text(body: dict[str, Any], key: str, where: str) -> str | None:
    """A text field (None when absent or empty); anything else is refused, as kubectl refuses it.

    ``str()`` of a list or a number would be a wrong value sent silently (YAML reads ``0123`` as 83).
    """
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise KubeconfigError(f"{where} {key} is {_type_name(value)}, not text",
                              hint="write it as a quoted string, as kubectl requires")  # fmt: skip
    return value


def _flag(body: dict[str, Any], key: str, where: str) -> bool:
    """A boolean field: ``"false"`` (text) would be true to Python, and kubectl refuses it."""
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise KubeconfigError(f"{where} {key} is {_type_name(value)}, not true or false")
    return value


def header_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an HTTP header value, or None.

    A CR or LF would end the header line and start one the value's author chose (kubectl, through
    Go's net/http, refuses such values too); other control characters have no place in a header.
    """
    found = _CONTROL.search(value)
    if found is None:
        return None
    kind = "a line break" if found.group() in "\r\n" else "a control character"
    return f"holds {kind} ({found.group()!r} at position {found.start()})"


def _header_safe(value: str, where: str, ascii_only: bool = False) -> str:
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


def _merge(paths: list[str], must_exist: bool) -> _Merged:
    """Merge the files like kubectl: the first to define a name or current-context wins."""
    merged = _Merged()
    for path in paths:
        if not must_exist and not os.path.exists(path):
            continue  # kubectl skips missing files of $KUBECONFIG
        data = _parse(path)
        merged.files.append(path)
        for section, key, target in (("clusters", "cluster", merged.clusters), ("users", "user", merged.users),
                                     ("contexts", "context", merged.contexts)):  # fmt: skip
            items = data.get(section) or []
            if not isinstance(items, list):
                raise KubeconfigError(f"{path}: {section} is {_type_name(items)}, not a list of named entries")
            seen: set[str] = set()
            for item in items:
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    raise KubeconfigError(f"{path}: every entry of {section} needs a name")
                name = item["name"]
                if name in seen:  # kubectl refuses this; the official client takes the first
                    raise Unsupported(f"{path}: {section} has {name!r} twice")
                seen.add(name)
                body = item.get(key) or {}
                if not isinstance(body, dict):
                    raise KubeconfigError(f"{path}: {section} {name!r} is not a mapping")
                target.setdefault(name, _Entry(body, path))
        if not merged.current_context:
            merged.current_context = _text(data, "current-context", f"{path}:") or ""
    return merged


def _resolve(path: str, origin: str) -> str:
    """A path from a kubeconfig entry, relative to the directory of the file that defined it."""
    if os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(origin)), path))  # Go's filepath.Join cleans too


def _read(path: str, what: str, origin: str | None = None) -> bytes:
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


def _file_or_data(body: dict[str, Any], key: str, origin: str, what: str) -> bytes | None:
    """``key-data`` (base64) or the file ``key`` names; both at once is for the official client."""
    where = f"{origin}: {what}"
    data, path = _text(body, f"{key}-data", where), _text(body, key, where)
    if data and path:
        raise Unsupported(f"{what}: both {key} and {key}-data")
    if data:
        return _b64(data, f"{where} {key}-data")
    if path:
        return _read(_resolve(path, origin), f"{what} {key}", origin)
    return None


def _check_named_files(body: dict[str, Any], keys: tuple[str, ...], origin: str, what: str) -> None:
    """Refuse, before anything reads them, the files an entry names that are not small regular
    files: the official client (cw's fallback) would open a FIFO and wait forever."""
    for key in keys:
        path = _text(body, key, f"{origin}: {what}")
        if path:
            resolved = _resolve(path, origin)
            try:
                check_plain_file(resolved, MAX_NAMED_FILE_BYTES)
            except FileNotFoundError:
                pass  # reported by whoever reads it, as before
            except OSError as exc:
                raise KubeconfigError(f"cannot read {what} {key} {resolved} (named in {origin}): {exc.strerror or exc}") from None


def _server(name: str, entry: _Entry) -> str:
    """A cluster's server URL, refused unless a request can be sent to it as it is written.

    Raises:
        KubeconfigError: Not text, a control character or space, no host, a port that is not a
            number of 1-65535, or a %-escape in the host name (which no resolver reads).
        Unsupported: No http(s) scheme (the official client takes a bare host).
    """
    where = f"{entry.origin}: cluster {name!r}"
    server = (_text(entry.body, "server", where) or "").rstrip("/")
    if not server:
        raise KubeconfigError(f"cluster {name!r} has no server")
    if not server.startswith(("https://", "http://")):
        raise Unsupported(f"cluster {name!r}: server {server!r} has no http(s) scheme")
    from urllib.parse import urlsplit  # loaded with the transport anyway

    problem = None
    if _CONTROL.search(server) or " " in server:
        problem = "holds a space or a control character"
    else:
        try:
            parts = urlsplit(server)
        except ValueError:  # an unclosed [ of an IPv6 address
            parts, problem = urlsplit("http://"), "is not a URL"
        try:
            port = parts.port
        except ValueError:
            port, problem = None, "has a port that is not a number from 1 to 65535"
        host = parts.hostname or ""
        if problem:
            pass
        elif not host:
            problem = "has no host"
        elif port == 0:
            problem = "has port 0"
        elif "%" in host and ":" not in host:  # an IPv6 zone (fe80::1%25eth0) is the only % a host has
            problem = "has a %-escape in its host name"
        elif any(ch in host for ch in "\\\"'<>^`{|}"):
            problem = "has a character no host name has"
    if problem:
        raise KubeconfigError(f"{where} server {server!r} {problem}", hint="write it as https://HOST:PORT")
    return server


def _cluster(name: str, entry: _Entry) -> dict[str, Any]:
    """The cluster's fields that matter, with its CA read."""
    body = entry.body
    where = f"{entry.origin}: cluster {name!r}"
    _check_named_files(body, ("certificate-authority",), entry.origin, f"cluster {name!r}")
    server = _server(name, entry)
    proxy = _proxy_url(name, entry)
    insecure = _flag(body, "insecure-skip-tls-verify", where)
    https = server.startswith("https://")
    ca = _file_or_data(body, "certificate-authority", entry.origin, f"cluster {name!r}") if https else None
    if insecure and ca:  # kubectl refuses a CA with the insecure flag; the official client ignores the CA
        raise Unsupported(f"cluster {name!r} sets both a CA and insecure-skip-tls-verify")
    if ca and not ca.isascii():  # PEM is ASCII text; ssl refuses anything else with a TypeError
        raise KubeconfigError(f"{where} certificate-authority is not a PEM certificate (it holds binary data)",
                              hint="name the CA's .crt/.pem file, or its base64 in certificate-authority-data")  # fmt: skip
    tls_server_name = _text(body, "tls-server-name", where)
    if tls_server_name and (_CONTROL.search(tls_server_name) or " " in tls_server_name):
        raise KubeconfigError(f"{where} tls-server-name {tls_server_name!r} holds a space or a control character")
    return {"server": server, "ca": ca, "insecure": insecure, "tls_server_name": tls_server_name,
            "https": https, "proxy": proxy, "body": body}  # fmt: skip


def _proxy_url(name: str, entry: _Entry) -> str | None:
    """A cluster's ``proxy-url``: http:// only (cw's transport opens a plain CONNECT tunnel).

    Raises:
        KubeconfigError: An https:// or socks5:// proxy (kubectl's other two), or anything else,
            naming the file and the field.
    """
    value = _text(entry.body, "proxy-url", f"{entry.origin}: cluster {name!r}")
    if not value:
        return None
    from urllib.parse import urlsplit  # loaded with the transport anyway

    url = value.strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        parts = None
    where = f"{entry.origin}: cluster {name!r} proxy-url {url!r}"
    if parts is None or parts.scheme not in ("http", "https", "socks5") or not parts.hostname or _CONTROL.search(url):
        raise KubeconfigError(f"{where} is not a proxy URL", hint="write it as http://HOST:PORT, as kubectl requires")
    if parts.scheme != "http":
        raise KubeconfigError(f"{where}: cw connects through http:// proxies only, not {parts.scheme}",
                              hint="use an http:// proxy in proxy-url, or remove proxy-url and reach the API server "
                              "another way (kubectl also takes https:// and socks5://)")  # fmt: skip
    return url


def _argument(value: Any, where: str) -> str:
    """One word of a plugin's command line or environment: text without a NUL (which no program gets)."""
    if not isinstance(value, str):
        raise KubeconfigError(f"{where} is {_type_name(value)}, not text", hint="quote it, as kubectl requires")
    if "\0" in value:
        raise KubeconfigError(f"{where} holds a NUL character, which no program can be given")
    return value


def _exec_plugin(name: str, entry: _Entry, cluster: dict[str, Any]) -> ExecPlugin:
    spec = entry.body["exec"]
    where = f"{entry.origin}: user {name!r} exec"
    if not isinstance(spec, dict) or not spec.get("command"):
        raise KubeconfigError(f"user {name!r}: exec needs a command")
    api_version = spec.get("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise Unsupported(f"user {name!r}: exec apiVersion {api_version!r}")
    if spec.get("interactiveMode") == "Always":  # cw never runs a plugin on the terminal
        raise Unsupported(f"user {name!r}: exec interactiveMode Always")
    command = _argument(spec["command"], f"{where} command")
    if os.sep in command:  # kubectl resolves a path, not a name looked up on PATH
        command = _resolve(command, entry.origin)
    args, env_list = spec.get("args") or [], spec.get("env") or []
    if not isinstance(args, list) or not isinstance(env_list, list):
        raise KubeconfigError(f"{where} args and env must be lists")
    env = []
    for item in env_list:
        if not isinstance(item, dict) or "name" not in item:
            raise KubeconfigError(f"{where} env: every entry needs a name and a value")
        variable = _argument(item["name"], f"{where} env name")
        if not variable or "=" in variable:
            raise KubeconfigError(f"{where} env name {variable!r} is not a variable name")
        env.append((variable, _argument(item.get("value", ""), f"{where} env {variable}")))
    info = None
    if spec.get("provideClusterInfo"):
        import json  # exec plugins only: most kubeconfigs have none

        info = json.dumps(_exec_cluster(cluster), sort_keys=True)
    install_hint = _text(spec, "installHint", where) or ""
    return ExecPlugin(command, tuple(_argument(a, f"{where} args") for a in args), tuple(env), api_version,
                      install_hint, info, f"{entry.origin}: user {name!r}")  # fmt: skip


def _exec_cluster(cluster: dict[str, Any]) -> dict[str, Any]:
    """``spec.cluster`` of an ExecCredential, as kubectl fills it (empty fields left out)."""
    body = cluster["body"]
    info: dict[str, Any] = {"server": cluster["server"]}
    if cluster["tls_server_name"]:
        info["tls-server-name"] = cluster["tls_server_name"]
    if cluster["insecure"]:
        info["insecure-skip-tls-verify"] = True
    if cluster["proxy"]:
        info["proxy-url"] = cluster["proxy"]
    if cluster["ca"]:
        info["certificate-authority-data"] = base64.b64encode(cluster["ca"]).decode("ascii")
    if body.get("disable-compression"):
        info["disable-compression"] = True
    extensions = body.get("extensions") or []
    for extension in extensions if isinstance(extensions, list) else []:
        if isinstance(extension, dict) and extension.get("name") == EXEC_EXTENSION:
            info["config"] = extension.get("extension")
    return info


def _user(name: str, entry: _Entry | None, cluster: dict[str, Any]) -> dict[str, Any]:
    """The user's credentials, read and (for exec) run; {} when the context has no such user."""
    if entry is None:
        return {}
    body = entry.body
    where = f"{entry.origin}: user {name!r}"
    _check_named_files(body, ("tokenFile", "client-certificate", "client-key"), entry.origin, f"user {name!r}")
    unknown = sorted(str(key) for key in set(body) - _USER_KEYS)
    if unknown:  # auth-provider, as, as-groups, as-uid, as-user-extra, or something newer
        raise Unsupported(f"user {name!r} uses {', '.join(unknown)}")
    token = _text(body, "token", where)
    token_file = _text(body, "tokenFile", where)
    basic = "username" in body or "password" in body
    has_cert = any(body.get(k) for k in ("client-certificate", "client-certificate-data", "client-key", "client-key-data"))
    if body.get("exec") and (token or token_file or basic or has_cert):
        raise Unsupported(f"user {name!r} combines exec with other credentials")
    if (token or token_file) and basic:
        raise Unsupported(f"user {name!r} has both a token and a username/password")
    if basic and (body.get("username") is None or body.get("password") is None):
        raise Unsupported(f"user {name!r} has a username or password alone")
    user: dict[str, Any] = {}
    if token:
        user["token"] = _header_safe(token, f"{where} token", ascii_only=True)
    elif token_file:  # kubectl trims the file's whitespace
        path = _resolve(token_file, entry.origin)
        raw = _read(path, f"user {name!r} tokenFile", entry.origin)
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise KubeconfigError(f"{where} tokenFile {path} is not text (not UTF-8): not a token") from None
        user["token"] = _header_safe(text, f"{where} tokenFile {path}", ascii_only=True) if text else None
    if basic:
        for field in ("username", "password"):
            value = body[field]
            if not isinstance(value, str):
                raise KubeconfigError(f"{where} {field} is {_type_name(value)}, not text", hint="quote it, as kubectl requires")
            user[field] = _header_safe(value, f"{where} {field}")
    if has_cert and cluster["https"]:
        cert = _file_or_data(body, "client-certificate", entry.origin, f"user {name!r}")
        key = _file_or_data(body, "client-key", entry.origin, f"user {name!r}")
        if not cert or not key:
            raise Unsupported(f"user {name!r} has a client certificate or key alone")
        user["client_cert"], user["client_key"] = cert, key
    if body.get("exec"):
        plugin = _exec_plugin(name, entry, cluster)
        user.update(run_exec_plugin(plugin), exec_plugin=plugin)
    impersonate = _impersonation(name, body, where)
    if impersonate:
        user["impersonate"] = impersonate
    return user


def _impersonation(name: str, body: dict[str, Any], where: str = "") -> tuple[tuple[str, str], ...]:
    """The Impersonate-* header lines of a user's ``as`` fields, as kubectl sends them.

    Raises:
        KubeconfigError: Groups, a UID or extras without ``as`` (the API server refuses them),
            a value that is not text, or one holding a line break or another control character.
    """
    where = where or f"user {name!r}"
    user, groups, uid, extra = body.get("as"), body.get("as-groups") or [], body.get("as-uid"), body.get("as-user-extra") or {}
    if not user:
        if groups or uid or extra:
            raise KubeconfigError(f"user {name!r}: as-groups, as-uid or as-user-extra without `as` (the user to act as)")
        return ()
    if not isinstance(groups, list) or not isinstance(extra, dict):
        raise KubeconfigError(f"{where}: as-groups must be a list and as-user-extra a mapping")

    def text(value: Any, field: str) -> str:
        if not isinstance(value, str):
            raise KubeconfigError(f"{where} {field} is {_type_name(value)}, not text", hint="quote it, as kubectl requires")
        return _header_safe(value, f"{where} {field} {value!r}")

    lines = [("Impersonate-User", text(user, "as"))]
    lines += [("Impersonate-Group", text(group, "as-groups")) for group in groups]
    if uid:
        lines.append(("Impersonate-Uid", text(uid, "as-uid")))
    for key, values in extra.items():
        from urllib.parse import quote

        header = f"Impersonate-Extra-{quote(text(key, 'as-user-extra key'), safe='')}"
        for value in values if isinstance(values, list) else [values]:
            lines.append((header, text(value, f"as-user-extra {key!r}")))
    return tuple(lines)


def load(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """Resolve the credentials of a context, as kubectl would use them.

    Every value that becomes part of a request (the server URL, a token from any source, basic
    auth, impersonation) is checked here, so no request of any kind sends a header line the
    kubeconfig's author slipped in.

    Args:
        kubeconfig: An explicit kubeconfig file; None reads ``$KUBECONFIG`` (at each call), else
            ``~/.kube/config``.
        context: The context to use; None uses ``current-context``.

    Raises:
        UnknownContext: ``context`` is not defined.
        Unsupported: The context needs the official client.
        KubeconfigError: The kubeconfig cannot be used (no file, no context, a missing file it names,
            a failing exec plugin, a field of the wrong type, a value that cannot be sent), naming
            the file and the field.
        OSError: A kubeconfig file cannot be read.
    """
    paths, must_exist = kubeconfig_paths(kubeconfig)
    merged = _merge(paths, must_exist)
    if not merged.files:
        inside = in_cluster() if kubeconfig is None and context is None else None
        if inside is not None:  # kubectl's rule: no kubeconfig, but a pod's service account
            return inside
        raise KubeconfigError(f"no kubeconfig file at {os.pathsep.join(paths)}")
    name = context or merged.current_context
    if not name:
        raise KubeconfigError("the kubeconfig sets no current-context", hint="pass --context, or `kubectl config use-context`")
    if name not in merged.contexts:
        if context:
            raise UnknownContext(context, list(merged.contexts))
        raise KubeconfigError(f"current-context {name!r} is not defined")
    entry_ctx = merged.contexts[name]
    ctx, where = entry_ctx.body, f"{entry_ctx.origin}: context {name!r}"
    cluster_name, user_name = _text(ctx, "cluster", where) or "", _text(ctx, "user", where) or ""
    namespace = _text(ctx, "namespace", where)
    if cluster_name not in merged.clusters:
        raise KubeconfigError(f"context {name!r} names cluster {cluster_name!r}, which is not defined")
    cluster = _cluster(cluster_name, merged.clusters[cluster_name])
    entry = merged.users.get(user_name) if user_name else None
    try:
        user = _user(user_name, entry, cluster)
    except Unsupported as exc:
        if entry is not None and set(entry.body) & _IMPERSONATION_KEYS:
            # The official client, cw's fallback, ignores `as`: cw would act as the wrong identity.
            raise KubeconfigError(f"{exc}, together with impersonation (`as`), which cw's fallback would drop; "
                                  "use a kubeconfig user without one of the two") from None  # fmt: skip
        raise
    return Credentials(
        server=cluster["server"], context=name, namespace=namespace, ca_data=cluster["ca"],
        insecure=cluster["insecure"], tls_server_name=cluster["tls_server_name"], proxy=cluster["proxy"], **user,
    )  # fmt: skip


#: Where a pod finds its service account's token, CA and namespace.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# What KUBERNETES_SERVICE_HOST may be: a DNS name, an IPv4 or an IPv6 address (client-go joins it
# with the port as it is; anything else makes a URL that is not one).
_SERVICE_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")


def in_cluster(environ: Mapping[str, str] | None = None, folder: Path | None = None) -> Credentials | None:
    """The credentials of the pod cw runs in (its service account), as kubectl and client-go read
    them when there is no kubeconfig; None outside a pod.

    The token is read once: a command ends long before a projected token (rotated hourly) expires.

    Raises:
        KubeconfigError: ``KUBERNETES_SERVICE_HOST`` or ``_PORT`` is not a host or a port, or the
            pod's token, CA or namespace cannot be read (not a small regular text file).
    """
    env = os.environ if environ is None else environ
    folder = folder or SERVICE_ACCOUNT_DIR
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token_file = folder / "token"
    if not host or not port or not os.path.lexists(token_file):
        return None
    if not _SERVICE_HOST.fullmatch(host):
        raise KubeconfigError(f"KUBERNETES_SERVICE_HOST={host!r} is not a host name or an IP address",
                              hint="unset it outside a pod, or use a kubeconfig (KUBECONFIG)")  # fmt: skip
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise KubeconfigError(f"KUBERNETES_SERVICE_PORT={port!r} is not a port (1-65535)",
                              hint="unset it outside a pod, or use a kubeconfig (KUBECONFIG)")  # fmt: skip
    host = f"[{host}]" if ":" in host else host  # an IPv6 address

    def text(path: Path, what: str) -> str:
        try:
            return _read(str(path), f"the pod's service account {what}").decode("utf-8").strip()
        except UnicodeDecodeError:
            raise KubeconfigError(f"the pod's service account {what} {path} is not text (not UTF-8)") from None

    token = _header_safe(text(token_file, "token"), f"the pod's service account token {token_file}", ascii_only=True)
    ca = _read(str(folder / "ca.crt"), "the pod's service account CA") if os.path.lexists(folder / "ca.crt") else None
    namespace = text(folder / "namespace", "namespace") if os.path.lexists(folder / "namespace") else None
    if not token:
        raise KubeconfigError(f"the pod's service account token {token_file} is empty")
    return Credentials(server=f"https://{host}:{port}", context="in-cluster", namespace=namespace or None,
                       ca_data=ca, token=token)  # fmt: skip


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
            raise KubeconfigError(f"exec: {plugin.command} returned a status.{field} that is {_type_name(value)}, not text")
    result: dict[str, Any] = {"expires": _rfc3339(status.get("expirationTimestamp"))}
    if token:
        source = f"{plugin.where}: the answer of exec plugin {plugin.command}, status.token," if plugin.where else (
            f"exec: the answer of {plugin.command}, status.token,")  # fmt: skip
        result["token"] = _header_safe(token, source, ascii_only=True)
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
