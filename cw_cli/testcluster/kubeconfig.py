"""Kubeconfig files: per-component files and the user's merged kubeconfig."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

from cw_cli.client.credentials import HELPER_IMAGES_EXTENSION, SIMULATED_GPUS_EXTENSION
from cw_cli.labels import READER

from .errors import TestClusterError
from .names import LEGACY_NAME, NAME

#: The kubeconfig context (and cluster and user) of the test cluster. "local" means this machine
#: without a cluster (`--local`); the context was called `cw-local` before, and `cw cluster
#: down` still removes entries of that name.
CONTEXT = NAME
LEGACY_CONTEXT = LEGACY_NAME


def default_user_kubeconfig() -> Path:
    """First path of $KUBECONFIG, else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG")
    if env:
        first = [p for p in env.split(os.pathsep) if p]
        if first:
            return Path(first[0]).expanduser()
    return Path.home() / ".kube" / "config"


def component_kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> dict:
    """A kubeconfig dict that references cert files by path (for the cluster's own processes)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
    }


def write_yaml(path: Path, data: dict, private: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    if private:
        tmp.chmod(0o600)
    tmp.replace(path)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _upsert(items: list | None, name: str, key: str, value: dict) -> list:
    items = [i for i in (items or []) if isinstance(i, dict) and i.get("name") != name]
    items.append({"name": name, key: value})
    return items


def merge_user_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path,
                          set_current: bool = True, helper_image: str = "") -> None:  # fmt: skip
    """Add/replace cluster, user and context `cw-test` (certs embedded) and make it current.

    ``helper_image``: the image cw's helper pods use there (a real node has only the images built
    here), named in the context's helper-images extension. The context also says that the
    cluster's GPUs are simulated (no devices, on the fake nodes and the real one alike).
    """
    data: dict = {}
    if path.exists():
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise TestClusterError(f"cannot parse kubeconfig {path}: {e}") from None
        if not isinstance(data, dict):
            raise TestClusterError(f"kubeconfig {path} is not a mapping")
    data.setdefault("apiVersion", "v1")
    data.setdefault("kind", "Config")
    data.setdefault("preferences", {})
    data["clusters"] = _upsert(data.get("clusters"), CONTEXT, "cluster", {
        "server": server, "certificate-authority-data": _b64(ca)})
    data["users"] = _upsert(data.get("users"), CONTEXT, "user", {
        "client-certificate-data": _b64(cert), "client-key-data": _b64(key)})
    context: dict = {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}
    context["extensions"] = [{"name": SIMULATED_GPUS_EXTENSION, "extension": True}]
    if helper_image:
        context["extensions"].append({"name": HELPER_IMAGES_EXTENSION, "extension": {READER: helper_image}})
    data["contexts"] = _upsert(data.get("contexts"), CONTEXT, "context", context)
    if set_current or not data.get("current-context"):
        data["current-context"] = CONTEXT
    write_yaml(path, data)


def remove_from_user_kubeconfig(path: Path) -> bool:
    """Remove the test cluster's entries, under today's name and the earlier one (leaves everything
    else); True if something was removed."""
    if not path.exists():
        return False
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return False
    if not isinstance(data, dict):
        return False
    changed = False
    for section in ("clusters", "users", "contexts"):
        items = data.get(section) or []
        kept = [i for i in items if not (isinstance(i, dict) and i.get("name") in (CONTEXT, LEGACY_CONTEXT))]
        if len(kept) != len(items):
            data[section] = kept
            changed = True
    if data.get("current-context") in (CONTEXT, LEGACY_CONTEXT):
        data["current-context"] = ""
        changed = True
    if changed:
        write_yaml(path, data)
    return changed
