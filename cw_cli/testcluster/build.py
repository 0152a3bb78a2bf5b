"""Build (or find cached) control-plane binaries, keyed by version.

Layout: <cache>/bin/kubernetes-<v>/{kube-apiserver,kube-controller-manager,kube-scheduler},
<cache>/bin/etcd-<v>/etcd, <cache>/bin/kwok-<v>/kwok; the optional <cache>/bin/kueue-<v>/kueue and
<cache>/bin/jobset-<v>/jobset (with their CRDs and webhook manifests). The actual `go build` lines live in
tools/build.sh (one implementation for CI and Python); this module only decides what is missing,
runs it, and times it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from msgspec import Struct, field

from .errors import BuildError, TestClusterError
from .paths import Versions, cache_dir, load_versions, tools_dir

COMPONENTS = ("etcd", "kwok", "k8s")
# Built only when asked for (`--kueue` runs the first two; a real node needs node and coredns, its cluster DNS).
OPTIONAL = ("jobset", "kueue", "node", "coredns")

_BINARIES = {
    "etcd": ("etcd",),
    "kwok": ("kwok",),
    "k8s": ("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
    "kueue": ("kueue",),
    "jobset": ("jobset",),
    "node": ("kubelet", "kube-proxy", "pause"),
    "coredns": ("coredns",),
}


class Binaries(Struct):
    """Absolute paths of the five programs of the test cluster."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    versions: Versions
    kubelet: Path = Path()  # the real node's programs (component "node")
    kube_proxy: Path = Path()
    pause: Path = Path()
    coredns: Path = Path()  # the real node's cluster DNS (component "coredns")
    built: list[str] = field(default_factory=list)  # components built by this call
    seconds: dict[str, float] = field(default_factory=dict)  # build time per built component
    total_seconds: float = 0.0


def _component_dir(bin_root: Path, component: str, versions: Versions) -> Path:
    if component == "k8s":
        return bin_root / f"kubernetes-{versions.kubernetes}"
    if component == "etcd":
        return bin_root / f"etcd-{versions.etcd}"
    if component in ("kueue", "jobset"):
        return bin_root / f"{component}-{getattr(versions, component)}"
    if component == "node":
        return bin_root / f"node-{versions.kubernetes}"
    if component == "coredns":
        return bin_root / f"coredns-{versions.coredns}"
    return bin_root / f"kwok-{versions.kwok}"


def binary_paths(cache: Path | None = None, versions: Versions | None = None) -> Binaries:
    """Where the binaries are (or would be) for the pinned versions; builds nothing."""
    versions = versions or load_versions()
    root = (cache or cache_dir()) / "bin"
    k8s = _component_dir(root, "k8s", versions)
    node = _component_dir(root, "node", versions)
    return Binaries(
        etcd=_component_dir(root, "etcd", versions) / "etcd",
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kwok=_component_dir(root, "kwok", versions) / "kwok",
        versions=versions,
        kubelet=node / "kubelet",
        kube_proxy=node / "kube-proxy",
        pause=node / "pause",
        coredns=_component_dir(root, "coredns", versions) / "coredns",
    )


def missing_components(cache: Path | None = None, optional: tuple[str, ...] = ()) -> list[str]:
    """Components ('etcd', 'kwok', 'k8s', and the ``optional`` ones asked for) not in the cache yet."""
    versions = load_versions()
    root = (cache or cache_dir()) / "bin"
    out = []
    for comp in (*COMPONENTS, *optional):
        d = _component_dir(root, comp, versions)
        if not all(os.access(d / b, os.X_OK) for b in _BINARIES[comp]):
            out.append(comp)
    return out


def ensure_binaries(
    cache: Path | None = None,
    force: bool = False,
    on_build_start: Callable[[str], None] | None = None,
    optional: tuple[str, ...] = (),
) -> Binaries:
    """Return the binaries, building the missing ones with Go first.

    Cold: 10-30 min on 2 cores (needs `go` and the Go module proxy). Warm: no build, milliseconds.
    `on_build_start(component)` is called before each build (for progress display); `optional`
    names components of OPTIONAL to build too (e.g. ``("jobset", "kueue")``).
    Raises BuildError (with the log path) when a build fails.
    """
    cache = cache or cache_dir()
    t0 = time.monotonic()
    todo = [*COMPONENTS, *optional] if force else missing_components(cache, optional)
    result = binary_paths(cache)
    if not todo:
        return result
    go = shutil.which("go")
    if not go:
        raise BuildError(
            f"missing cluster binaries ({', '.join(todo)}) and no `go` on PATH to build them; "
            "install Go >= 1.26 or fill the cache at " + str(cache / "bin")
        )
    try:
        script = tools_dir() / "build.sh"
    except TestClusterError as e:
        raise BuildError(f"cannot build {', '.join(todo)}: {e}") from None
    (cache / "bin").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CW_CACHE_DIR=str(cache))
    if force:
        env["CW_FORCE_BUILD"] = "1"
    for comp in todo:
        if on_build_start:
            on_build_start(comp)
        log = cache / "bin" / f"build-{comp}.log"
        start = time.monotonic()
        with open(log, "wb") as fh:
            rc = subprocess.run(
                ["bash", str(script), comp], stdout=fh, stderr=subprocess.STDOUT, env=env
            ).returncode
        result.seconds[comp] = round(time.monotonic() - start, 1)
        if rc != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise BuildError(
                f"building {comp} failed (exit {rc}); see {log}: " + " | ".join(tail), str(log)
            )
        result.built.append(comp)
    result.total_seconds = round(time.monotonic() - t0, 1)
    return result
