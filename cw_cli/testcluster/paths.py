"""Locations and pinned versions for the test cluster."""

from __future__ import annotations

import os
from pathlib import Path

from msgspec import Struct

from cw_cli.cache import cache_dir

from .errors import TestClusterError

_PKG_DIR = Path(__file__).resolve().parent.parent  # .../cw_cli


def _resource_dir(name: str) -> Path:
    """Find a top-level resource folder shipped in the wheel (cw_cli/<name>) or in a checkout."""
    for cand in (_PKG_DIR / name, _PKG_DIR.parent / name):
        if cand.is_dir():
            return cand
    raise TestClusterError(
        f"cannot find the '{name}' folder (looked in {_PKG_DIR / name} and {_PKG_DIR.parent / name})"
    )


def cluster_resources_dir() -> Path:
    """The folder with KWOK stages and fake node manifests (kubeconfigs/cluster)."""
    return _resource_dir("kubeconfigs") / "cluster"


def tools_dir() -> Path:
    """The folder with the Go builder modules and versions.env (CW_TOOLS_DIR overrides)."""
    env = os.environ.get("CW_TOOLS_DIR")
    if env:
        p = Path(env).expanduser()
        if not (p / "versions.env").is_file():
            raise TestClusterError(f"CW_TOOLS_DIR={env} has no versions.env")
        return p
    return _resource_dir("tools")


def default_cluster_dir() -> Path:
    """State folder of the test cluster; env CW_CLUSTER_DIR, default ~/.cache/cw/cluster."""
    env = os.environ.get("CW_CLUSTER_DIR")
    if env:
        return Path(env).expanduser()
    return cache_dir() / "cluster"


class Versions(Struct, frozen=True):
    kubernetes: str
    etcd: str
    kwok: str
    kueue: str = ""  # optional component (cw cluster up --kueue)
    jobset: str = ""  # optional component, started with Kueue
    coredns: str = ""  # the real node's cluster DNS


def load_versions() -> Versions:
    """Read the pinned versions from tools/versions.env."""
    path = tools_dir() / "versions.env"
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        values[k.strip()] = v.strip().strip('"')
    try:
        return Versions(
            values["KUBERNETES_VERSION"], values["ETCD_VERSION"], values["KWOK_VERSION"],
            values.get("KUEUE_VERSION", ""), values.get("JOBSET_VERSION", ""), values.get("COREDNS_VERSION", ""),
        )
    except KeyError as e:
        raise TestClusterError(f"{path}: missing {e.args[0]}") from None
