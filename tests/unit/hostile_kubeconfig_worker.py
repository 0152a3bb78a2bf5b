"""Run by test_hostile_kubeconfigs.py in a child process, so a hang is the parent's time limit.

``python hostile_kubeconfig_worker.py FOLDER EXAMPLES``: hypothesis writes random kubeconfigs into
FOLDER (hostile field values, wrong types, special files, exec plugins that hang or answer badly)
and calls ``connect()`` on each; when it connects to the local sink server, one request is sent
and the raw request checked for a header line the kubeconfig smuggled in. Any exception other than
cw's clean ones fails the example. Each example is printed to stderr before it runs, so a hang
names its input. Prints ``ALL-ENDED`` at the end.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cw_cli.client.connection import ClusterTarget, connect
from cw_cli.errors import ClusterUnreachable, ConfigError, CwError

PAYLOADS = ["t\r\nX-Injected: 1", "t\r\n\tX-Injected: 1", "t\nX-Injected: 1", "t\rX-Injected: 1", "t\x00", "t\t", "t\x7f",
            "é", "用户", "\u2028", "a" * 200_000, "", " ", "-", "*", "&a", "0123", "yes", "true", "null", "[a]", "{a: b}",
            "%0D%0A", "../../../../proc/kmsg"]  # fmt: skip


class Sink:
    """A local HTTP server that keeps each raw request head and answers ``{}``."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            client, _ = self.server.accept()
            client.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = client.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)
                client.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            except OSError:
                pass
            finally:
                client.close()


def special_files(folder: Path) -> list[str]:
    """Paths a kubeconfig may name that are not small regular text files (and one that is)."""
    files = folder / "files"
    files.mkdir()
    os.mkfifo(files / "fifo")  # no writer: opening it for reading blocks forever
    (files / "crlf-token").write_bytes(b"abc\r\nX-Injected: 1\n")
    (files / "folded-token").write_bytes(b"abc\r\n\tX-Injected: 1\n")
    (files / "binary").write_bytes(b"\xff\xfe\x00garbage\x80")
    (files / "good-token").write_text("good-token\n")
    with open(files / "huge", "wb") as handle:  # sparse: 200 MiB on no disk
        handle.truncate(200 * 2**20)
    (files / "folder").mkdir()
    os.symlink(files / "loop-b", files / "loop-a")
    os.symlink(files / "loop-a", files / "loop-b")
    paths = [str(files / name) for name in ("fifo", "crlf-token", "folded-token", "binary", "good-token", "huge", "folder",
                                            "loop-a", "missing")]  # fmt: skip
    paths += ["/dev/zero", "/dev/null", "/proc/self/status", "/proc/self/mem"]
    if os.path.exists("/proc/kmsg"):
        paths.append("/proc/kmsg")  # blocks on read
    return paths


def plugins(folder: Path) -> list[str]:
    """Exec credential plugins: one that never answers, and ones that answer badly or well."""
    answers = {
        "sleeper": "exec sleep 1000",
        "sleeper-child": "sleep 1000 & wait",
        "crlf": 'printf \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"a\\\\r\\\\nX-Injected: 1"}}\'',
        "folded": 'printf \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"a\\\\r\\\\n\\\\tX-Injected: 1"}}\'',
        "list-token": 'printf \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":["a"]}}\'',
        "deep": "python3 -c \"print('[' * 100000)\"",
        "garbage": "head -c 1000 /dev/urandom",
        "good": 'printf \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"good"}}\'',
        "fails": "echo oops >&2; exit 3",
        "flood": "exec yes",
        "flood-stderr": "yes >&2",
    }
    paths = []
    for name, body in answers.items():
        script = folder / f"plugin-{name}"
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        paths.append(str(script))
    return paths + ["no-such-plugin-cw", str(folder / "files" / "fifo"), "/dev/null", "a\x00b"]


def strategies(sink: str, files: list[str], commands: list[str]) -> st.SearchStrategy[Any]:
    text = st.one_of(st.sampled_from(PAYLOADS), st.text(max_size=20), st.text(st.characters(max_codepoint=0x9F), max_size=8))
    scalar = st.one_of(text, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
    value = st.one_of(scalar, st.lists(scalar, max_size=3), st.dictionaries(text, scalar, max_size=3))
    path = st.one_of(st.sampled_from(files), value)
    server = st.one_of(st.sampled_from([sink, sink + "/", sink + "/prefix", "https://127.0.0.1:1", "https://127.0.0.1:99999",
                                        "https://a%0D%0Ab:6443", "http://127.0.0.1:0", "https://[::1", "http://:80",
                                        "https://127.0.0.1:1/a b", "https://127.0.0.1:1/\r\nX-Injected: 1", "ftp://x",
                                        sink + "\r\nX-Injected: 1"]), value)  # fmt: skip
    exec_spec = st.fixed_dictionaries(
        {"command": st.one_of(st.sampled_from(commands), st.sampled_from(commands), value),
         "apiVersion": st.one_of(st.just("client.authentication.k8s.io/v1"), st.just("client.authentication.k8s.io/v1"), value)},
        optional={"args": value, "env": st.one_of(st.lists(st.fixed_dictionaries({"name": text, "value": value}), max_size=2), value),
                  "provideClusterInfo": value, "installHint": value},
    )  # fmt: skip
    fields = {
        "cluster": {"server": server, "certificate-authority": path, "certificate-authority-data": value,
                    "insecure-skip-tls-verify": value, "proxy-url": value, "tls-server-name": value, "extensions": value},
        "user": {"token": value, "tokenFile": path, "username": value, "password": value, "client-certificate": path,
                 "client-key": path, "client-certificate-data": value, "exec": st.one_of(exec_spec, exec_spec, value), "as": value,
                 "as-groups": st.one_of(st.lists(text, max_size=3), value), "as-uid": value,
                 "as-user-extra": st.one_of(st.dictionaries(text, st.one_of(text, st.lists(text, max_size=2)), max_size=2), value),
                 "auth-provider": st.one_of(st.just({"name": "oidc", "config": {"id-token": "e30.e30.c2ln", "idp-issuer-url": "https://i"}}), value)},
        "context": {"cluster": value, "user": value, "namespace": value},
        "top": {"clusters": value, "users": value, "contexts": value, "current-context": value},
    }  # fmt: skip
    change = st.one_of(*(st.tuples(st.just(where), st.just(key), strategy) for where, keys in fields.items()
                         for key, strategy in keys.items()))  # fmt: skip
    # Each class of input also gets its own share, so none is left to chance.
    exec_change = st.tuples(st.just("user"), st.just("exec"), exec_spec)
    file_change = st.builds(lambda field, file: (*field, file),
                            st.sampled_from([("user", "tokenFile"), ("user", "client-certificate"),
                                             ("cluster", "certificate-authority")]), st.sampled_from(files))  # fmt: skip
    header_change = st.builds(lambda field, payload: (*field, [payload] if field[1] == "as-groups" else payload),
                              st.sampled_from([("user", "token"), ("user", "as"), ("user", "as-groups"), ("user", "as-uid"),
                                               ("user", "username"), ("user", "password"), ("cluster", "server")]),
                              st.sampled_from(PAYLOADS))  # fmt: skip
    return st.one_of(
        *(st.builds(lambda first, more: _changed(sink, [first, *more]), first, st.lists(change, max_size=2))
          for first in (change, exec_change, file_change, header_change)),
        st.sampled_from(RAW_DOCUMENTS),
    )  # fmt: skip


def _changed(sink: str, changes: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """A kubeconfig that works (the sink's server, a token), with each change applied."""
    cluster: dict[str, Any] = {"server": sink}
    user: dict[str, Any] = {"token": "t"}
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    document: dict[str, Any] = {"clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
                                "contexts": [{"name": "x", "context": context}], "current-context": "x"}  # fmt: skip
    for where, key, value in changes:
        if where == "user" and key != "token" and not key.startswith("as"):
            user.pop("token", None)  # another credential: the token would make it a combination kubectl refuses
            if key in ("username", "password"):
                user.setdefault("username", "u")
                user.setdefault("password", "p")
        if where == "user" and key == "client-certificate":
            user["client-key"] = value
            cluster["server"] = "https://127.0.0.1:1"  # certificates are read for https only
        if where == "cluster" and key.startswith("certificate-authority"):
            cluster["server"] = "https://127.0.0.1:1"
        {"cluster": cluster, "user": user, "context": context, "top": document}[where][key] = value
    return document


def _bomb(field: str) -> str:
    levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for previous, name in zip("abcdefgh", "bcdefghi"):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    return ("\n".join(levels) + "\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
            f"users: [{{name: u, user: {{as: bob, {field}: *i}}}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")  # fmt: skip


RAW_DOCUMENTS = [_bomb("as-groups"), _bomb("token"), _bomb("as-user-extra"), "a: &a [*a]\n", "[" * 100_000, "{" * 100_000,
                 "clusters: [\n", "\xff\xfe", "- a\n- b\n", "current-context: x\ncontexts: 5\n", "!!python/object:os.system\n"]  # fmt: skip


def main(folder: Path, examples: int) -> None:
    sink = Sink()
    files, commands = special_files(folder), None
    commands = plugins(folder)
    config = folder / "config"
    counts = {"refused": 0, "connected": 0, "sent": 0}

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strategies(sink.url, files, commands))
    def one(document: Any) -> None:
        text = document if isinstance(document, str) else yaml.safe_dump(document, allow_unicode=False)
        config.write_text(text, encoding="utf-8", errors="surrogateescape")
        print(f"EXAMPLE {text[:3000]!r}", file=sys.stderr, flush=True)
        before = len(sink.requests)
        try:
            kube = connect(ClusterTarget(kubeconfig=str(config)))
        except (ClusterUnreachable, ConfigError):
            counts["refused"] += 1
            return
        counts["connected"] += 1
        try:
            if kube.host.startswith(sink.url):
                try:
                    kube.request("GET", "/version", timeout=(5.0, 5.0))
                except CwError:
                    pass  # refused or unreachable: clean
        finally:
            kube.close()
        counts["sent"] += len(sink.requests) - before
        for raw in sink.requests[before:]:
            lines = raw.split(b"\r\n")
            assert not any(line[:1] in (b" ", b"\t") for line in lines), raw  # a folded header line
            assert not any(line.lower().startswith(b"x-injected") for line in lines), raw

    # Every special file in every field that names a file, whatever the random draw covers.
    for field in [("user", "tokenFile"), ("user", "client-certificate"), ("cluster", "certificate-authority"),
                  ("user", "client-key"), ("user", "auth-provider-with-tokenFile")]:  # fmt: skip
        for file in files:
            change = ("user", "tokenFile", file) if field[1] == "auth-provider-with-tokenFile" else (*field, file)
            document = _changed(sink.url, [change])
            if field[1] == "auth-provider-with-tokenFile":  # the official client's path
                document["users"][0]["user"]["auth-provider"] = {"name": "oidc", "config": {"id-token": "e30.e30.c2ln"}}
            one.hypothesis.inner_test(document)  # type: ignore[attr-defined]
    # Every header payload as a token that only the official client reads (cw's fallback).
    for payload in [*PAYLOADS, "\u0100", "\ud800"]:
        document = _changed(sink.url, [("user", "token", payload)])
        document["users"][0]["user"]["auth-provider"] = {"name": "oidc", "config": {"id-token": "e30.e30.c2ln"}}
        one.hypothesis.inner_test(document)  # type: ignore[attr-defined]
    one()
    print("ALL-ENDED", " ".join(f"{key}={value}" for key, value in counts.items()), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
