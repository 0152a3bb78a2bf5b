"""Take a real node down to nothing, also after cw itself was killed: its containers stopped
through containerd, the runtime shims ended by their own PIDs (found by this node's socket in their
command line), every mount under the node's folder unmounted, the pods' and the node's network
namespaces and the host's routes removed.

Each step goes on when the previous one failed (a half-started node is cleaned as well as a whole
one); :func:`leftovers` says what is still there, for ``cw cluster down`` and its tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from . import network


def _ctr(socket: Path, *args: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctr", "--address", str(socket), "--namespace", "k8s.io", *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def _pod_netns_paths(socket: Path, containers: list[str]) -> set[str]:
    """The network namespace files of the pods' sandboxes (``/run/netns/cni-...``)."""
    paths = set()
    for cid in containers:
        done = _ctr(socket, "containers", "info", cid)
        if done.returncode != 0:
            continue
        try:
            spec = json.loads(done.stdout).get("Spec") or {}
        except ValueError:
            continue
        for ns in (spec.get("linux") or {}).get("namespaces") or []:
            if ns.get("type") == "network" and ns.get("path", "").startswith(("/run/netns/", "/var/run/netns/")):
                paths.add(ns["path"])
    return paths


def stop_containers(socket: Path) -> set[str]:
    """Kill and delete every container of the node's containerd (the kubelet is stopped by then);
    the pods' network namespace files, for :func:`remove_pod_namespaces`."""
    if not socket.exists():
        return set()
    try:
        listed = _ctr(socket, "containers", "ls", "-q")
    except (OSError, subprocess.TimeoutExpired):
        return set()
    containers = listed.stdout.split() if listed.returncode == 0 else []
    netns = _pod_netns_paths(socket, containers)
    for cid in containers:
        try:
            _ctr(socket, "tasks", "delete", "--force", cid, timeout=15)  # kills it first
            _ctr(socket, "containers", "delete", cid, timeout=15)  # and its snapshot
        except (OSError, subprocess.TimeoutExpired):
            continue
    return netns


def shim_pids(socket: Path) -> list[int]:
    """The PIDs of the runtime shims that serve this node's containerd: each names its socket in
    its command line (``containerd-shim-runc-v2 ... -address SOCKET``), which no other shim does."""
    wanted = str(socket).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"containerd-shim" in argv[0] and b"-address" in argv and wanted in argv:
            found.append(int(entry.name))
    return found


def kill_shims(socket: Path) -> list[int]:
    """SIGKILL this node's runtime shims (:func:`shim_pids`), by PID; the PIDs killed."""
    killed = []
    for pid in shim_pids(socket):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below ``folder``, deepest first."""
    prefix = str(folder.resolve())
    points = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].encode().decode("unicode_escape")  # \040 for a space
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: -p.count("/"))


def unmount_under(folder: Path) -> list[str]:
    """Unmount (lazily, so a busy mount goes too) everything at or below ``folder``; errors."""
    errors = []
    for point in mounts_under(folder):
        done = subprocess.run(["umount", "--lazy", point], capture_output=True, text=True)
        if done.returncode != 0:
            errors.append(f"umount {point}: {done.stderr.strip()}")
    return errors


def remove_pod_namespaces(paths: set[str]) -> None:
    """Unmount and delete the pods' network namespace files."""
    for path in paths:
        subprocess.run(["umount", "--lazy", path], capture_output=True)
        try:
            os.unlink(path)
        except OSError:
            pass


def remove_network(index: int) -> list[str]:
    """Remove node ``index``'s namespace, link and route (and, for node 0, the blackholes)."""
    node = network.NodeNet(index)
    errors = network.run_commands(network.teardown_commands(node), check=False) if network.namespace_exists(node) else []
    if index == 0:
        network.run_commands(network.blackhole_commands(add=False), check=False)
    return [e for e in errors if "Cannot find device" not in e and "No such process" not in e]


def remove_fabric() -> list[str]:
    """Remove the fabric between the nodes (when there is one); what is left of it."""
    if network.fabric_exists():
        network.run_commands(network.fabric_teardown_commands(), check=False)
    return [f"network namespace {network.NETNS_DIR}/{network.FABRIC_NETNS}"] if network.fabric_exists() else []


def leftovers(node_dir: Path, index: int = 0) -> list[str]:
    """What of node ``index`` is still there: mounts, its namespace, its link."""
    node = network.NodeNet(index)
    found = [f"mount {m}" for m in mounts_under(node_dir)] if node_dir.exists() else []
    if network.namespace_exists(node):
        found.append(f"network namespace {node.netns_path}")
    if Path(f"/sys/class/net/{node.host_if}").exists():
        found.append(f"link {node.host_if}")
    return found
