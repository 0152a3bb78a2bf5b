"""Which HTTP proxy a request to the API server goes through, by kubectl's (client-go's) rules:
the kubeconfig's ``proxy-url``, else ``HTTPS_PROXY`` / ``HTTP_PROXY`` unless ``NO_PROXY`` names the
server, and never for a loopback server."""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from cw_cli.client.credentials import KubeconfigError


def proxy_address(url: str, source: str, headers: dict[str, str] | None) -> tuple[str, int, dict[str, str]]:
    """(host, port, CONNECT headers) of an http:// proxy URL; ``source`` names where it came from."""
    import base64

    hint = "use an http:// proxy, or name the API server in NO_PROXY (for HTTPS_PROXY / HTTP_PROXY)"
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError:  # a port that is not a number
        port = 0
    shown = f"{parts.scheme}://{parts.hostname}" if parts.hostname else "(no host)"  # never its password
    if not parts.hostname or not port:
        raise KubeconfigError(f"{source} proxy {shown}...: not a proxy URL", hint=hint)
    if parts.scheme != "http":
        raise KubeconfigError(f"{source} proxy {shown}: cw connects through http:// proxies only, not {parts.scheme}", hint=hint)
    connect_headers = dict(headers or {})
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        connect_headers.setdefault("Proxy-Authorization", "Basic " + base64.b64encode(pair).decode("ascii"))
    return parts.hostname, port, connect_headers


def proxy_for(server: str, proxy_url: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The proxy kubectl would use for ``server``, and where it came from; None to connect directly.

    client-go's rules: the kubeconfig cluster's ``proxy-url``, when set, is used for every request
    (whatever the environment, loopback included). Otherwise Go's ``http.ProxyFromEnvironment``
    (golang.org/x/net/http/httpproxy): ``HTTPS_PROXY`` (else ``https_proxy``) for an https server,
    ``HTTP_PROXY`` (else ``http_proxy``) for an http one, the upper-case name first and
    ``ALL_PROXY`` never read; no proxy for ``localhost`` (so written) or a loopback IP, nor for
    a server ``NO_PROXY`` (else ``no_proxy``) names (see :func:`_bypassed`). A value without a scheme
    (``proxy:3128``) is taken as ``http://`` + the value, as Go does. In a CGI environment
    (``REQUEST_METHOD`` set) ``HTTP_PROXY`` may come from a request header (httpoxy), so it is
    not used (Go refuses the request).

    Args:
        server: The API server's URL.
        proxy_url: The kubeconfig cluster's ``proxy-url``, if any.
        environ: The environment (default ``os.environ``, read at each call).

    Returns:
        (proxy URL, its source: ``proxy-url`` or the variable's name), or None.
    """
    if proxy_url:
        return proxy_url, "proxy-url"
    env = os.environ if environ is None else environ
    url = urlsplit(server)
    https = url.scheme == "https"
    names = ("HTTPS_PROXY", "https_proxy") if https else ("HTTP_PROXY", "http_proxy")
    name = next((name for name in names if env.get(name)), None)
    if name is None or (not https and env.get("REQUEST_METHOD")):
        return None
    if url.netloc.rpartition("@")[2].partition(":")[0] == "localhost":  # as written: Go proxies LOCALHOST
        return None
    port = str(url.port or (443 if https else 80))
    if _bypassed((url.hostname or "").lower(), port, env.get("NO_PROXY") or env.get("no_proxy") or ""):
        return None
    value = env[name].strip()
    return (value if "://" in value else "http://" + value), name


def _bypassed(host: str, port: str, no_proxy: str) -> bool:
    """Whether Go's httpproxy connects to ``host`` directly: a loopback IP, or a ``NO_PROXY`` entry.

    Entries (comma-separated, case-insensitive): ``*`` (every host); an IP or CIDR (an IPv4 one
    matches IPv4 servers only, an IPv6 one IPv6 servers only); ``example.com`` (that host and its
    subdomains); ``.example.com`` or ``*.example.com`` (subdomains only); any of these with
    ``:port`` (the server's port, 443/80 when its URL has none). IPs are compared as bytes from
    ``socket.inet_pton`` (``socket`` comes with ``http.client``): nothing is imported for this.
    """
    ip = _ip(host)
    if ip is not None and _loopback(ip):
        return True
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            network = _cidr(entry)
            if network is not None:
                if ip is not None and _in_network(ip, network):
                    return True
                continue
        entry_host, entry_port = _split_host_port(entry)
        if not entry_host or entry_port not in ("", port):
            continue
        entry_ip = _ip(entry_host)
        if entry_ip is not None:
            if ip == entry_ip:
                return True
            continue
        if entry_host.startswith("*."):
            entry_host = entry_host[1:]
        if host.endswith(entry_host if entry_host.startswith(".") else "." + entry_host) or host == entry_host:
            return True
    return False


def _ip(text: str) -> tuple[bytes, bool] | None:
    """(the 16-byte address, whether IPv4) of an IP literal, else None; ``::ffff:a.b.c.d`` is IPv4, as in Go."""
    import socket

    try:
        return b"\0" * 10 + b"\xff\xff" + socket.inet_pton(socket.AF_INET, text), True
    except OSError:
        pass
    try:
        packed = socket.inet_pton(socket.AF_INET6, text)
    except OSError:
        return None
    return packed, packed[:12] == b"\0" * 10 + b"\xff\xff"


def _loopback(ip: tuple[bytes, bool]) -> bool:
    packed, v4 = ip
    return packed[12] == 127 if v4 else packed == b"\0" * 15 + b"\1"


def _cidr(entry: str) -> tuple[bytes, bool, int] | None:
    """(address, IPv4, prefix length over 128 bits) of a CIDR entry, or None if it is not one."""
    address, _, bits = entry.partition("/")
    ip = _ip(address)
    if ip is None or not bits.isdigit() or int(bits) > (32 if ip[1] else 128):
        return None
    return ip[0], ip[1], int(bits) + (96 if ip[1] else 0)


def _in_network(ip: tuple[bytes, bool], network: tuple[bytes, bool, int]) -> bool:
    (packed, v4), (base, network_v4, bits) = ip, network
    shift = 128 - bits
    return v4 == network_v4 and int.from_bytes(packed, "big") >> shift == int.from_bytes(base, "big") >> shift


def _split_host_port(entry: str) -> tuple[str, str]:
    """Go's net.SplitHostPort where it succeeds (``host:port``, ``[v6]:port``), else (entry, "")."""
    if entry.startswith("["):
        end = entry.find("]")
        if end != -1 and entry[end + 1 : end + 2] == ":":
            return entry[1:end], entry[end + 2 :]
        return entry, ""
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, port
    return entry, ""
