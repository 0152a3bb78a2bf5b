"""One kubeconfig context's cluster and user entries read into what a request needs: the server
URL, CA, proxy, and the user's token, certificate, basic auth, exec plugin and impersonation."""

from __future__ import annotations

import base64
import os
from typing import Any

from cw_cli.client.credentials import EXEC_API_VERSIONS, ExecPlugin, KubeconfigError, Unsupported
from cw_cli.client.exec_plugin import run_exec_plugin
from cw_cli.client.kubeconfig_values import (
    CONTROL,
    check_named_files,
    file_or_data,
    flag_field,
    header_safe,
    read_named,
    resolve_path,
    text_field,
    type_name,
)

#: The cluster extension an exec plugin gets as ``spec.cluster.config`` (provideClusterInfo).
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
_USER_KEYS = {"token", "tokenFile", "client-certificate", "client-certificate-data", "client-key", "client-key-data",
              "username", "password", "exec", "extensions", "as", "as-groups", "as-uid", "as-user-extra"}  # fmt: skip
IMPERSONATION_KEYS = frozenset({"as", "as-groups", "as-uid", "as-user-extra"})


class Entry:
    """One named cluster, user or context, with the file that defined it."""

    __slots__ = ("body", "origin")

    def __init__(self, body: dict[str, Any], origin: str) -> None:
        self.body = body
        self.origin = origin


def _server(name: str, entry: Entry) -> str:
    """A cluster's server URL, refused unless a request can be sent to it as it is written.

    Raises:
        KubeconfigError: Not text, a control character or space, no host, a port that is not a
            number of 1-65535, or a %-escape in the host name (which no resolver reads).
        Unsupported: No http(s) scheme (the official client takes a bare host).
    """
    where = f"{entry.origin}: cluster {name!r}"
    server = (text_field(entry.body, "server", where) or "").rstrip("/")
    if not server:
        raise KubeconfigError(f"cluster {name!r} has no server")
    if not server.startswith(("https://", "http://")):
        raise Unsupported(f"cluster {name!r}: server {server!r} has no http(s) scheme")
    from urllib.parse import urlsplit  # loaded with the transport anyway

    problem = None
    if CONTROL.search(server) or " " in server:
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


def read_cluster(name: str, entry: Entry) -> dict[str, Any]:
    """The cluster's fields that matter, with its CA read."""
    body = entry.body
    where = f"{entry.origin}: cluster {name!r}"
    check_named_files(body, ("certificate-authority",), entry.origin, f"cluster {name!r}")
    server = _server(name, entry)
    proxy = _proxy_url(name, entry)
    insecure = flag_field(body, "insecure-skip-tls-verify", where)
    https = server.startswith("https://")
    ca = file_or_data(body, "certificate-authority", entry.origin, f"cluster {name!r}") if https else None
    if insecure and ca:  # kubectl refuses a CA with the insecure flag; the official client ignores the CA
        raise Unsupported(f"cluster {name!r} sets both a CA and insecure-skip-tls-verify")
    if ca and not ca.isascii():  # PEM is ASCII text; ssl refuses anything else with a TypeError
        raise KubeconfigError(f"{where} certificate-authority is not a PEM certificate (it holds binary data)",
                              hint="name the CA's .crt/.pem file, or its base64 in certificate-authority-data")  # fmt: skip
    tls_server_name = text_field(body, "tls-server-name", where)
    if tls_server_name and (CONTROL.search(tls_server_name) or " " in tls_server_name):
        raise KubeconfigError(f"{where} tls-server-name {tls_server_name!r} holds a space or a control character")
    return {"server": server, "ca": ca, "insecure": insecure, "tls_server_name": tls_server_name,
            "https": https, "proxy": proxy, "body": body}  # fmt: skip


def _proxy_url(name: str, entry: Entry) -> str | None:
    """A cluster's ``proxy-url``: http:// only (cw's transport opens a plain CONNECT tunnel).

    Raises:
        KubeconfigError: An https:// or socks5:// proxy (kubectl's other two), or anything else,
            naming the file and the field.
    """
    value = text_field(entry.body, "proxy-url", f"{entry.origin}: cluster {name!r}")
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
    if parts is None or parts.scheme not in ("http", "https", "socks5") or not parts.hostname or CONTROL.search(url):
        raise KubeconfigError(f"{where} is not a proxy URL", hint="write it as http://HOST:PORT, as kubectl requires")
    if parts.scheme != "http":
        raise KubeconfigError(f"{where}: cw connects through http:// proxies only, not {parts.scheme}",
                              hint="use an http:// proxy in proxy-url, or remove proxy-url and reach the API server "
                              "another way (kubectl also takes https:// and socks5://)")  # fmt: skip
    return url


def _argument(value: Any, where: str) -> str:
    """One word of a plugin's command line or environment: text without a NUL (which no program gets)."""
    if not isinstance(value, str):
        raise KubeconfigError(f"{where} is {type_name(value)}, not text", hint="quote it, as kubectl requires")
    if "\0" in value:
        raise KubeconfigError(f"{where} holds a NUL character, which no program can be given")
    return value


def _exec_plugin(name: str, entry: Entry, cluster: dict[str, Any]) -> ExecPlugin:
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
        command = resolve_path(command, entry.origin)
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
    install_hint = text_field(spec, "installHint", where) or ""
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


def read_user(name: str, entry: Entry | None, cluster: dict[str, Any]) -> dict[str, Any]:
    """The user's credentials, read and (for exec) run; {} when the context has no such user."""
    if entry is None:
        return {}
    body = entry.body
    where = f"{entry.origin}: user {name!r}"
    check_named_files(body, ("tokenFile", "client-certificate", "client-key"), entry.origin, f"user {name!r}")
    unknown = sorted(str(key) for key in set(body) - _USER_KEYS)
    if unknown:  # auth-provider, as, as-groups, as-uid, as-user-extra, or something newer
        raise Unsupported(f"user {name!r} uses {', '.join(unknown)}")
    token = text_field(body, "token", where)
    token_file = text_field(body, "tokenFile", where)
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
        user["token"] = header_safe(token, f"{where} token", ascii_only=True)
    elif token_file:  # kubectl trims the file's whitespace
        path = resolve_path(token_file, entry.origin)
        raw = read_named(path, f"user {name!r} tokenFile", entry.origin)
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise KubeconfigError(f"{where} tokenFile {path} is not text (not UTF-8): not a token") from None
        user["token"] = header_safe(text, f"{where} tokenFile {path}", ascii_only=True) if text else None
    if basic:
        for field in ("username", "password"):
            value = body[field]
            if not isinstance(value, str):
                raise KubeconfigError(f"{where} {field} is {type_name(value)}, not text", hint="quote it, as kubectl requires")
            user[field] = header_safe(value, f"{where} {field}")
    if has_cert and cluster["https"]:
        cert = file_or_data(body, "client-certificate", entry.origin, f"user {name!r}")
        key = file_or_data(body, "client-key", entry.origin, f"user {name!r}")
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
            raise KubeconfigError(f"{where} {field} is {type_name(value)}, not text", hint="quote it, as kubectl requires")
        return header_safe(value, f"{where} {field} {value!r}")

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
