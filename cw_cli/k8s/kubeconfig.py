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

#: The exec plugin API versions kubectl still speaks.
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
#: The cluster extension an exec plugin gets as ``spec.cluster.config`` (provideClusterInfo).
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
_USER_KEYS = {"token", "tokenFile", "client-certificate", "client-certificate-data", "client-key", "client-key-data",
              "username", "password", "exec", "extensions", "as", "as-groups", "as-uid", "as-user-extra"}  # fmt: skip
_IMPERSONATION_KEYS = frozenset({"as", "as-groups", "as-uid", "as-user-extra"})
_DEFAULT_INSTALL_HINT = "install the credential plugin the kubeconfig's exec section names, or put it on PATH"


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
    """

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""
    cluster: str | None = None  # JSON text, so the dataclass stays hashable


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
            takes the environment's proxy (:func:`cw_cli.k8s.transport.proxy_for`).
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

    with open(path, "rb") as handle:
        text = handle.read()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if data is None:
        return {}  # kubectl reads an empty file as an empty config
    if not isinstance(data, dict):
        raise KubeconfigError(f"{path} is not a kubeconfig (not a mapping)")
    return data


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
            seen: set[str] = set()
            for item in data.get(section) or []:
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
        if not merged.current_context and data.get("current-context"):
            merged.current_context = str(data["current-context"])
    return merged


def _resolve(path: str, origin: str) -> str:
    """A path from a kubeconfig entry, relative to the directory of the file that defined it."""
    if os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(origin)), path))  # Go's filepath.Join cleans too


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise KubeconfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _b64(value: Any, what: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=False)
    except ValueError:
        raise KubeconfigError(f"{what} is not valid base64") from None


def _file_or_data(body: dict[str, Any], key: str, origin: str, what: str) -> bytes | None:
    """``key-data`` (base64) or the file ``key`` names; both at once is for the official client."""
    data, path = body.get(f"{key}-data"), body.get(key)
    if data and path:
        raise Unsupported(f"{what}: both {key} and {key}-data")
    if data:
        return _b64(data, f"{what} {key}-data")
    if path:
        return _read(_resolve(str(path), origin), f"{what} {key}")
    return None


def _cluster(name: str, entry: _Entry) -> dict[str, Any]:
    """The cluster's fields that matter, with its CA read."""
    body = entry.body
    proxy = _proxy_url(name, entry)
    server = str(body.get("server") or "").rstrip("/")
    if not server:
        raise KubeconfigError(f"cluster {name!r} has no server")
    if not server.startswith(("https://", "http://")):
        raise Unsupported(f"cluster {name!r}: server {server!r} has no http(s) scheme")
    insecure = bool(body.get("insecure-skip-tls-verify"))
    https = server.startswith("https://")
    ca = _file_or_data(body, "certificate-authority", entry.origin, f"cluster {name!r}") if https else None
    if insecure and ca:  # kubectl refuses a CA with the insecure flag; the official client ignores the CA
        raise Unsupported(f"cluster {name!r} sets both a CA and insecure-skip-tls-verify")
    return {"server": server, "ca": ca, "insecure": insecure, "tls_server_name": body.get("tls-server-name") or None,
            "https": https, "proxy": proxy, "body": body}  # fmt: skip


def _proxy_url(name: str, entry: _Entry) -> str | None:
    """A cluster's ``proxy-url``: http:// only (cw's transport opens a plain CONNECT tunnel).

    Raises:
        KubeconfigError: An https:// or socks5:// proxy (kubectl's other two), or anything else,
            naming the file and the field.
    """
    value = entry.body.get("proxy-url")
    if not value:
        return None
    from urllib.parse import urlsplit  # loaded with the transport anyway

    url = str(value).strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        parts = None
    where = f"{entry.origin}: cluster {name!r} proxy-url {url!r}"
    if parts is None or parts.scheme not in ("http", "https", "socks5") or not parts.hostname:
        raise KubeconfigError(f"{where} is not a proxy URL", hint="write it as http://HOST:PORT, as kubectl requires")
    if parts.scheme != "http":
        raise KubeconfigError(f"{where}: cw connects through http:// proxies only, not {parts.scheme}",
                              hint="use an http:// proxy in proxy-url, or remove proxy-url and reach the API server "
                              "another way (kubectl also takes https:// and socks5://)")  # fmt: skip
    return url


def _exec_plugin(name: str, entry: _Entry, cluster: dict[str, Any]) -> ExecPlugin:
    spec = entry.body["exec"]
    if not isinstance(spec, dict) or not spec.get("command"):
        raise KubeconfigError(f"user {name!r}: exec needs a command")
    api_version = spec.get("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise Unsupported(f"user {name!r}: exec apiVersion {api_version!r}")
    if spec.get("interactiveMode") == "Always":  # cw never runs a plugin on the terminal
        raise Unsupported(f"user {name!r}: exec interactiveMode Always")
    command = str(spec["command"])
    if os.sep in command:  # kubectl resolves a path, not a name looked up on PATH
        command = _resolve(command, entry.origin)
    env = tuple(
        (str(item["name"]), str(item.get("value", ""))) for item in spec.get("env") or [] if isinstance(item, dict) and "name" in item
    )
    info = None
    if spec.get("provideClusterInfo"):
        import json  # exec plugins only: most kubeconfigs have none

        info = json.dumps(_exec_cluster(cluster), sort_keys=True)
    return ExecPlugin(command, tuple(str(a) for a in spec.get("args") or []), env, api_version,
                      str(spec.get("installHint") or ""), info)  # fmt: skip


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
    for extension in body.get("extensions") or []:
        if isinstance(extension, dict) and extension.get("name") == EXEC_EXTENSION:
            info["config"] = extension.get("extension")
    return info


def _user(name: str, entry: _Entry | None, cluster: dict[str, Any]) -> dict[str, Any]:
    """The user's credentials, read and (for exec) run; {} when the context has no such user."""
    if entry is None:
        return {}
    body = entry.body
    unknown = sorted(set(body) - _USER_KEYS)
    if unknown:  # auth-provider, as, as-groups, as-uid, as-user-extra, or something newer
        raise Unsupported(f"user {name!r} uses {', '.join(unknown)}")
    token = body.get("token") or None
    token_file = body.get("tokenFile") or None
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
        user["token"] = str(token)
    elif token_file:  # kubectl trims the file's whitespace
        user["token"] = _read(_resolve(str(token_file), entry.origin), f"user {name!r} tokenFile").decode().strip() or None
    if basic:
        user["username"], user["password"] = str(body["username"]), str(body["password"])
    if has_cert and cluster["https"]:
        cert = _file_or_data(body, "client-certificate", entry.origin, f"user {name!r}")
        key = _file_or_data(body, "client-key", entry.origin, f"user {name!r}")
        if not cert or not key:
            raise Unsupported(f"user {name!r} has a client certificate or key alone")
        user["client_cert"], user["client_key"] = cert, key
    if body.get("exec"):
        plugin = _exec_plugin(name, entry, cluster)
        user.update(run_exec_plugin(plugin), exec_plugin=plugin)
    impersonate = _impersonation(name, body)
    if impersonate:
        user["impersonate"] = impersonate
    return user


def _impersonation(name: str, body: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The Impersonate-* header lines of a user's ``as`` fields, as kubectl sends them.

    Raises:
        KubeconfigError: Groups, a UID or extras without ``as`` (the API server refuses them),
            or a value that is not text.
    """
    user, groups, uid, extra = body.get("as"), body.get("as-groups") or [], body.get("as-uid"), body.get("as-user-extra") or {}
    if not user:
        if groups or uid or extra:
            raise KubeconfigError(f"user {name!r}: as-groups, as-uid or as-user-extra without `as` (the user to act as)")
        return ()
    if not isinstance(groups, list) or not isinstance(extra, dict):
        raise KubeconfigError(f"user {name!r}: as-groups must be a list and as-user-extra a mapping")
    lines = [("Impersonate-User", str(user))]
    lines += [("Impersonate-Group", str(group)) for group in groups]
    if uid:
        lines.append(("Impersonate-Uid", str(uid)))
    for key, values in extra.items():
        from urllib.parse import quote

        for value in values if isinstance(values, list) else [values]:
            lines.append((f"Impersonate-Extra-{quote(str(key), safe='')}", str(value)))
    for header, value in lines:
        if any(ch in value for ch in "\r\n\0"):
            raise KubeconfigError(f"user {name!r}: {header} {value!r} holds a line break or NUL")
    return tuple(lines)


def load(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """Resolve the credentials of a context, as kubectl would use them.

    Args:
        kubeconfig: An explicit kubeconfig file; None reads ``$KUBECONFIG`` (at each call), else
            ``~/.kube/config``.
        context: The context to use; None uses ``current-context``.

    Raises:
        UnknownContext: ``context`` is not defined.
        Unsupported: The context needs the official client.
        KubeconfigError: The kubeconfig cannot be used (no file, no context, a missing file it names,
            a failing exec plugin).
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
    ctx = merged.contexts[name].body
    cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
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
        server=cluster["server"], context=name, namespace=ctx.get("namespace") or None, ca_data=cluster["ca"],
        insecure=cluster["insecure"], tls_server_name=cluster["tls_server_name"], proxy=cluster["proxy"], **user,
    )  # fmt: skip


#: Where a pod finds its service account's token, CA and namespace.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster(environ: Mapping[str, str] | None = None, folder: Path | None = None) -> Credentials | None:
    """The credentials of the pod cw runs in (its service account), as kubectl and client-go read
    them when there is no kubeconfig; None outside a pod.

    The token is read once: a command ends long before a projected token (rotated hourly) expires.

    Raises:
        KubeconfigError: The pod's token or CA cannot be read.
    """
    env = os.environ if environ is None else environ
    folder = folder or SERVICE_ACCOUNT_DIR
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token_file = folder / "token"
    if not host or not port or not token_file.is_file():
        return None
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    try:
        token = token_file.read_text(encoding="utf-8").strip()
        ca = (folder / "ca.crt").read_bytes() if (folder / "ca.crt").is_file() else None
        namespace = (folder / "namespace").read_text(encoding="utf-8").strip() if (folder / "namespace").is_file() else None
    except (OSError, UnicodeDecodeError) as exc:
        raise KubeconfigError(f"cannot read the pod's service account in {folder}: {exc}") from None
    if not token:
        raise KubeconfigError(f"the pod's service account token {token_file} is empty")
    return Credentials(server=f"https://{host}:{port}", context="in-cluster", namespace=namespace or None,
                       ca_data=ca, token=token)  # fmt: skip


def run_exec_plugin(plugin: ExecPlugin) -> dict[str, Any]:
    """Run a credential plugin as kubectl does, non-interactively.

    Returns:
        ``token`` and/or ``client_cert`` + ``client_key``, and ``expires`` (epoch seconds or None).

    Raises:
        KubeconfigError: The command is missing or fails, or its output is not a credential.
    """
    import json
    import subprocess

    request: dict[str, Any] = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    if plugin.cluster is not None:
        request["spec"]["cluster"] = json.loads(plugin.cluster)
    env = dict(os.environ)
    env.update(plugin.env)
    env["KUBERNETES_EXEC_INFO"] = json.dumps(request)
    try:
        done = subprocess.run([plugin.command, *plugin.args], env=env, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    except FileNotFoundError:
        raise KubeconfigError(f"exec: executable {plugin.command} not found", hint=plugin.install_hint or _DEFAULT_INSTALL_HINT) from None
    except OSError as exc:
        raise KubeconfigError(f"exec: cannot run {plugin.command}: {exc.strerror or exc}") from None
    stderr = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0:
        tail = f": {' '.join(stderr.split())[-300:]}" if stderr else ""
        raise KubeconfigError(f"exec: executable {plugin.command} failed with exit code {done.returncode}{tail}")
    if stderr:
        print(stderr, file=sys.stderr)  # kubectl shows a plugin's messages too
    return _exec_output(done.stdout, plugin)


def _exec_output(stdout: bytes, plugin: ExecPlugin) -> dict[str, Any]:
    import json

    try:
        data = json.loads(stdout)
    except ValueError as exc:
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
    result: dict[str, Any] = {"expires": _rfc3339(status.get("expirationTimestamp"))}
    if token:
        result["token"] = str(token)
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
