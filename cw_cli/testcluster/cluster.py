"""Start, inspect and stop the test control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok) on 127.0.0.1 with fake GPU nodes. Pure library: no printing.

The processes' command lines come from :mod:`.argv` (pure functions); requests to the API server
go through cw's own client, built by :mod:`.api` from the cluster's admin certificate.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec.structs import asdict

from cw_cli.client.kubeconfig import KubeconfigError
from cw_cli.errors import ClusterUnreachable, CwError

from . import api, argv, controllers, jobset, kueue, procs
from .build import Binaries, binary_paths, ensure_binaries, missing_components
from .errors import StartError, TestClusterError
from .kubeconfig import CONTEXT, default_user_kubeconfig, merge_user_kubeconfig, remove_from_user_kubeconfig
from .launcher import Launcher, free_ports, wait_until
from .paths import cluster_resources_dir, default_cluster_dir
from .pki import Pki, generate_pki, load_pki
from .realnode import node as realnode_node
from .records import (
    COMPONENTS,
    CONTROL_PLANE,
    MARKER,
    MAX_REAL_NODES,
    STATE_FILE,
    ClusterInfo,
    ClusterStatus,
    DownResult,
    NodeStatus,
    ProcessStatus,
    RealNodeImages,
    check_state_dir,
    is_cluster_state,
    load_info,
    node_status,
    start_rank,
)
from .state_files import client_certs, node_manifests, write_kubeconfigs, write_kwok_files
from .volumes import DEFAULT_CLAIM, DEFAULT_NAMESPACE, real_node_namespace, volume_manifests

if TYPE_CHECKING:
    from cw_cli.client.connection import Kube

__all__ = [
    "COMPONENTS", "CONTROL_PLANE", "MARKER", "STATE_FILE", "ClusterInfo", "ClusterStatus", "DownResult", "NodeStatus", "ProcessStatus",
    "client_certs", "down", "status", "up",
]  # fmt: skip
QUEUEING = ("jobset", "kueue")  # optional components `up(kueue=True)` builds and starts, in this order


# --------------------------------------------------------------------------- helpers

def _create_nodes(kube: Kube, manifests: list[dict]) -> None:
    for node in manifests:
        api.create(kube, api.NODES, node)


def _nodes_ready(kube: Kube, wanted: set[str]) -> bool:
    """All `wanted` nodes Ready and without not-ready/unreachable taints."""
    ready = {s.name for s in map(node_status, api.nodes(kube))
             if s.ready and not any("not-ready" in t or "unreachable" in t for t in s.taints)}
    return wanted <= ready


def _create_checkpoint_volume(kube: Kube, real_node_dir: Path | None) -> None:
    """The quick start's checkpoint volume (claim `checkpoints` in default), bound at once; with a
    real node, on that node's disk (so pods that mount it run there), and namespace default's pods
    all run on the real nodes."""
    volume, claim = volume_manifests(DEFAULT_NAMESPACE, DEFAULT_CLAIM, real_node_dir=real_node_dir)
    if real_node_dir:
        kube.raw("PATCH", f"/api/v1/namespaces/{DEFAULT_NAMESPACE}", body=real_node_namespace(),
                 content_type="application/merge-patch+json", what="put namespace default's pods on the real nodes")  # fmt: skip
    api.create(kube, "/api/v1/persistentvolumes", volume)
    api.create(kube, f"/api/v1/namespaces/{DEFAULT_NAMESPACE}/persistentvolumeclaims", claim)


def _create_eval_priority_class(kube: Kube) -> None:
    """The PriorityClass docs/evaluation.md has a cluster admin apply once (this cluster's admin is cw)."""
    import yaml

    manifest = yaml.safe_load((cluster_resources_dir() / "priorityclass-cw-eval.yaml").read_text(encoding="utf-8"))
    api.create(kube, "/apis/scheduling.k8s.io/v1/priorityclasses", manifest)


# --------------------------------------------------------------------------- public API

def status(state_dir: str | Path | None = None) -> ClusterStatus:
    """Which processes are alive, whether the API answers /readyz, and the nodes."""
    state = Path(state_dir).expanduser() if state_dir else default_cluster_dir()
    info = load_info(state)
    recs = procs.load_records(state / "pids")
    plist = [ProcessStatus(r.name, r.pid, procs.is_alive(r), r.log) for r in recs]
    plist.sort(key=lambda p: start_rank(p.name))
    st = ClusterStatus(str(state), info is not None, False, info.server if info else None,
                       info.kubeconfig if info else None, plist, [])
    if info is None:
        return st
    try:
        kube = api.admin_client(info.server, load_pki(state / "pki"))
    except (OSError, KubeconfigError) as e:
        st.error = f"cannot use the cluster's certificates: {e}"
        return st
    try:
        kube.raw("GET", "/readyz", accept="text/plain", timeout=3.0, what="read /readyz")
        st.api_ready = True
        st.nodes = [node_status(n) for n in api.nodes(kube)]
    except ClusterUnreachable as e:
        st.error = f"API server {info.server} not reachable: {e.detail or e}"
    except CwError as e:
        st.error = str(e)
    finally:
        kube.close()
    return st


def up(
    state_dir: str | Path | None = None,
    kubeconfig: str | Path | None = None,
    gpu_nodes: int = 2,
    cpu_nodes: int = 1,
    build: bool = True,
    timeout: float = 180.0,
    set_current_context: bool = True,
    on_progress: Callable[[str], None] | None = None,
    owner_pid: int | None = None,
    kueue: bool = False,
    real_node: bool | None = None,
    real_nodes: int = 1,
) -> ClusterInfo:
    """Start the test cluster (idempotent: a healthy running cluster is returned as is).

    Builds missing binaries first when `build` (cold: tens of minutes). Merges context `cw-test`
    into `kubeconfig` (default: first $KUBECONFIG path or ~/.kube/config) and makes it current.
    `owner_pid`: also start a watchdog that runs `down()` once that process is gone (tests use
    their own pid, so a killed test run never leaks a cluster).
    `real_node`: also run a real node (kubelet, containerd) whose pods really run; None: when
    this machine can (:func:`realnode.node.unavailable_reason` says why not, in ``info.real_node_skipped``).
    `real_nodes`: how many real nodes (each a kubelet and containerd in its own namespace; a
    multi-node run's pods land on different ones).
    Raises StartError (with the failing component's log path) or BuildError.
    """
    say = on_progress or (lambda _m: None)
    state = Path(state_dir).expanduser() if state_dir else default_cluster_dir()
    user_kc = Path(kubeconfig).expanduser() if kubeconfig else default_user_kubeconfig()
    if gpu_nodes < 0 or cpu_nodes < 0:
        raise TestClusterError("node counts must be >= 0")
    if not 1 <= real_nodes <= MAX_REAL_NODES:
        raise TestClusterError(f"{real_nodes} real nodes asked for: 1 to {MAX_REAL_NODES} can run (each takes one /24 "
                               "of the real pods' addresses)")  # fmt: skip
    check_state_dir(state)

    # More than one real node is asked for by name: a running cluster with fewer is not what was asked.
    running = _reuse_running(state, user_kc, gpu_nodes, cpu_nodes, timeout, set_current_context, say, kueue,
                             real_nodes if real_node or real_nodes > 1 else 0)  # fmt: skip
    if running is not None:
        return running

    if real_node is not False:
        _clean_stale_real_node(say)
    skipped = realnode_node.unavailable_reason() if real_node is not False else "not asked for"
    if real_node and skipped:
        raise TestClusterError(f"cannot run a real node: {skipped}")
    with_real_node = skipped is None
    t_build = time.monotonic()
    bins = _binaries(build, kueue, say, real_node=with_real_node)
    build_seconds = round(time.monotonic() - t_build, 1)

    t0 = time.monotonic()
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    (state / MARKER).write_text("state of the cw test cluster; removed by `cw cluster down`\n")
    try:
        images = _prepare_real_nodes(state, bins, say, real_nodes) if with_real_node else None
        info = _start(state, bins, user_kc, gpu_nodes, cpu_nodes, timeout, set_current_context, say, kueue, images)
    except BaseException:
        down(state, keep_state=True)
        raise
    info.real_node_skipped = skipped or ""
    if owner_pid is not None:
        _start_watchdog(state, owner_pid)
    info.build_seconds = build_seconds
    info.built = list(bins.built)
    info.start_seconds = round(time.monotonic() - t0, 1)
    (state / STATE_FILE).write_text(json.dumps(asdict(info), indent=2))
    return info


def _reuse_running(state: Path, user_kc: Path, gpu_nodes: int, cpu_nodes: int, timeout: float,
                   set_current_context: bool, say: Callable[[str], None], kueue: bool,
                   real_nodes: int = 0) -> ClusterInfo | None:  # fmt: skip
    """The cluster already running in ``state``, topped up to the nodes asked for; None when
    there is none (a stale one, or leftover processes, are stopped first)."""
    info = load_info(state)
    if info is None:
        if procs.load_records(state / "pids"):
            down(state)
        return None
    st = status(state)
    if not st.running:
        say("found a stale cluster; stopping it")
        down(state)
        return None
    if kueue and not set(QUEUEING) <= {r.name for r in procs.load_records(state / "pids")}:
        raise TestClusterError(
            "the running test cluster has no Kueue and JobSet; stop it with `cw cluster down`, "
            "then `cw cluster up --kueue`")
    if real_nodes > len(info.real_nodes):
        raise TestClusterError(
            f"the running test cluster has {len(info.real_nodes)} real node(s), not {real_nodes}; stop it with "
            f"`cw cluster down`, then `cw cluster up --real-nodes {real_nodes}`")
    pki = load_pki(state / "pki")
    _top_up_nodes(info, st, pki, gpu_nodes, cpu_nodes, timeout, say)
    merge_user_kubeconfig(user_kc, info.server, pki.ca.cert, pki.admin.cert, pki.admin.key,
                          set_current=set_current_context, helper_image=info.runtime_image)
    info.kubeconfig = str(user_kc)
    info.already_running = True
    (state / STATE_FILE).write_text(json.dumps(asdict(info), indent=2))
    return info


def _binaries(build: bool, kueue: bool, say: Callable[[str], None], real_node: bool = False) -> Binaries:
    """The components' binaries: built when missing and ``build``, else an error naming them."""
    optional = (*(QUEUEING if kueue else ()), *(("node", "coredns") if real_node else ()))
    if build:
        return ensure_binaries(on_build_start=lambda c: say(f"building {c} (cold build, minutes)"), optional=optional)
    missing = missing_components(optional=optional)
    if missing:
        raise TestClusterError(f"cluster binaries missing ({', '.join(missing)}); run without --no-build")
    return binary_paths()


def _top_up_nodes(info: ClusterInfo, st: ClusterStatus, pki: Pki, gpu_nodes: int, cpu_nodes: int,
                  timeout: float, say: Callable[[str], None]) -> None:  # fmt: skip
    """Create the nodes asked for that a running cluster lacks (never removes one)."""
    have = {n.name for n in st.nodes}
    extra = [n for n in node_manifests(gpu_nodes, cpu_nodes) if n["metadata"]["name"] not in have]
    if not extra:
        return
    say(f"adding {len(extra)} fake nodes")
    kube = api.admin_client(info.server, pki)
    try:
        _create_nodes(kube, extra)
        names = {n["metadata"]["name"] for n in extra}
        wait_until(lambda: _nodes_ready(kube, names), time.monotonic() + timeout, "new fake nodes to become Ready")
        info.nodes = sorted(set(info.nodes) | names)
    finally:
        kube.close()


def _start_watchdog(state: Path, owner_pid: int) -> None:
    """A process that runs `down(state)` once ``owner_pid`` is gone; the cluster is stopped if it does not exist.

    Raises:
        StartError: ``owner_pid`` is not a running process.
    """
    st_owner = procs._stat(owner_pid)
    if st_owner is None:
        down(state)
        raise StartError(f"owner process {owner_pid} does not exist")
    # This checkout first on its path: the watchdog must import this very cw_cli.
    path = [str(Path(__file__).resolve().parents[2])] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    procs.spawn("watchdog", [sys.executable, "-m", "cw_cli.testcluster.watchdog", str(owner_pid), str(st_owner[1]), str(state)],
                state / "logs" / "watchdog.log", state / "pids", env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)))  # fmt: skip


def _prepare_real_nodes(state: Path, bins: Binaries, say: Callable[[str], None], count: int = 1) -> RealNodeImages:
    """The real nodes' network and containerds, with their images (built the first time: minutes;
    a second node's copied from the first's, once)."""
    realnode = realnode_node
    realnode.owner_file().write_text(str(state))
    pause_ref = realnode.image.pause_image(bins.versions.kubernetes)
    first = realnode.NodeFiles(state, 0)
    runtime_ref = ""
    for index in range(count):
        files = realnode.NodeFiles(state, index)
        files.dir.mkdir(parents=True)  # from here on, `down(state)` removes what was made
        say(f"creating real node {index}'s network namespace")
        realnode.setup_network(index, count)
        say(f"starting containerd on real node {index}")
        record = realnode.start_containerd(files, pause_ref)
        realnode.wait_containerd(files, record)
        runtime_ref = realnode.ensure_images(files, bins.pause, pause_ref, say, first=first if index else None)
    return RealNodeImages(pause_ref, runtime_ref, count)


def _clean_stale_real_node(say: Callable[[str], None]) -> None:
    """Stop the real node of a cluster whose processes are all gone (its cw and cluster were killed)."""
    owner_file = realnode_node.owner_file()
    try:
        owner = Path(owner_file.read_text().strip())
    except OSError:
        return
    if owner.is_dir() and any(procs.is_alive(r) for r in procs.load_records(owner / "pids")):
        return  # a running cluster's node: not ours to touch
    if owner.is_dir() and is_cluster_state(owner):
        say(f"cleaning up the real node of a stopped cluster ({owner})")
        down(owner)
    owner_file.unlink(missing_ok=True)


def _start_cluster_dns(launcher: Launcher, kube: Kube, state: Path, bins: Binaries, server: str,
                       say: Callable[[str], None]) -> None:  # fmt: skip
    """CoreDNS for the real node's pods, with the kube-dns Service pointing at it (realnode/dns.py)."""
    from .realnode import dns

    say("starting CoreDNS (the real node's cluster DNS)")
    files = dns.DnsFiles(state)
    dns.write_kubeconfig(files, state / "pki", server)
    dns.create_objects(kube)  # system:coredns's read rights, Service kube-dns 10.96.0.10, its EndpointSlice
    listen = dns.start(launcher, bins.coredns, files)
    launcher.wait("CoreDNS /ready", lambda: dns.is_ready(listen), 0.3)


def _start_real_nodes(launcher: Launcher, kube: Kube, state: Path, bins: Binaries, server: str,
                      say: Callable[[str], None], count: int) -> list[str]:  # fmt: skip
    """The real nodes' kubelets and kube-proxies, their GPUs advertised; their names."""
    realnode = realnode_node
    names = [realnode.node_name(index) for index in range(count)]
    for index in range(count):
        files = realnode.NodeFiles(state, index)
        realnode.write_node_files(files, state / "pki", server)
        say(f"starting real node {index}'s kubelet and kube-proxy")
        realnode.start_node_agents(launcher, files, bins.kubelet, bins.kube_proxy)
    for index, name in enumerate(names):
        path = f"{api.NODES}/{name}"
        launcher.wait(f"node {name} to register", lambda: api.exists(kube, path), 0.5)  # noqa: B023 (waited on here)
        realnode.advertise_gpus(kube, index)
    launcher.wait(f"nodes {', '.join(names)} Ready with their GPUs",
                  lambda: _nodes_ready(kube, set(names)) and all(realnode.gpus_advertised(kube, i) for i in range(count)), 0.5)
    return names


def _start(state: Path, bins: Binaries, user_kc: Path, gpu_nodes: int, cpu_nodes: int,
           timeout: float, set_current: bool, say: Callable[[str], None],
           with_kueue: bool = False, real_node: RealNodeImages | None = None) -> ClusterInfo:  # fmt: skip
    """Start every process in order, waiting for what the next one needs; the cluster's record."""
    from .realnode.network import api_address

    launcher = Launcher(state, timeout)
    address = api_address() if real_node else "127.0.0.1"
    pki = generate_pki(state / "pki", api_ips=(address,))
    ports = argv.assign_ports(free_ports(len(argv.PORT_NAMES)))
    server = argv.server_url(ports, address)
    kube = api.admin_client(server, pki)
    real_nodes: list[str] = []
    try:
        say("starting etcd")
        launcher.spawn("etcd", [bins.etcd, *argv.etcd_args(state, ports)])
        say("starting kube-apiserver")
        launcher.spawn("kube-apiserver", [bins.kube_apiserver, *argv.apiserver_args(pki, ports, address)])
        launcher.wait("kube-apiserver /readyz", lambda: api.ready(kube))
        write_kubeconfigs(state, server, pki)

        say("starting kube-controller-manager, kube-scheduler, kwok")
        launcher.spawn("kube-controller-manager", [bins.kube_controller_manager, *argv.controller_manager_args(state, pki, ports)])
        launcher.spawn("kube-scheduler", [bins.kube_scheduler, *argv.scheduler_args(state, ports)])
        # kwok's Logs CRD before kwok: tests may create a Logs object (name/namespace = the pod) that
        # points a container's log at their own CRI-format file; ClusterLogs (in --config) covers the rest.
        api.install_crds(kube, cluster_resources_dir() / "crds", launcher.wait)
        write_kwok_files(state)
        launcher.spawn("kwok", [bins.kwok, *argv.kwok_args(state, pki, ports)], env=argv.kwok_env(os.environ, state))

        nodes = node_manifests(gpu_nodes, cpu_nodes)
        say(f"creating {len(nodes)} fake nodes")
        _create_nodes(kube, nodes)
        wanted = {n["metadata"]["name"] for n in nodes}
        say("waiting for nodes Ready and the default ServiceAccount")
        launcher.wait("fake nodes to become Ready", lambda: _nodes_ready(kube, wanted), 0.3)
        launcher.wait("ServiceAccount default/default", lambda: api.exists(kube, "/api/v1/namespaces/default/serviceaccounts/default"))
        if real_node:
            _start_cluster_dns(launcher, kube, state, bins, server, say)
            real_nodes += _start_real_nodes(launcher, kube, state, bins, server, say, real_node.count)
        _create_checkpoint_volume(kube, state / "volumes" if real_node else None)
        _create_eval_priority_class(kube)
        if with_kueue:
            _start_queueing(launcher, kube, pki, say)
    finally:
        kube.close()

    merge_user_kubeconfig(user_kc, server, pki.ca.cert, pki.admin.cert, pki.admin.key, set_current=set_current,
                          helper_image=real_node.runtime if real_node else "")
    launcher.check_alive()
    return ClusterInfo(
        state_dir=str(state), server=server, kubeconfig=str(user_kc),
        admin_kubeconfig=str(argv.kubeconfig_path(state, "admin")), context=CONTEXT, ports=ports,
        versions=asdict(bins.versions), nodes=sorted(wanted | set(real_nodes)),
        pids={n: r.pid for n, r in launcher.started.items()}, real_nodes=real_nodes,
        runtime_image=real_node.runtime if real_node else "",
    )  # fmt: skip


def _start_queueing(launcher: Launcher, kube: Kube, pki: Pki, say: Callable[[str], None]) -> None:
    """JobSet, then Kueue, as local processes beside the cluster.

    KWOK's serving certificate is valid for 127.0.0.1, where JobSet and Kueue serve their webhooks
    too. JobSet first: Kueue sets up its JobSet integration only if the CRD is served.
    """
    state = launcher.state
    host = controllers.Host(kube, state, argv.kubeconfig_path(state, "admin"), (pki.kwok_serving.cert, pki.kwok_serving.key),
                            pki.ca.cert, launcher.spawn, launcher.wait, say)  # fmt: skip
    jobset.start(host, _controller_ports())
    kueue.start(host, _controller_ports(), kueue.capacity_of(api.nodes(kube)))


def _controller_ports() -> tuple[int, int, int]:
    """(webhook, health, metrics) ports for a controller on 127.0.0.1."""
    webhook, health, metrics = free_ports(3)
    return webhook, health, metrics


def down(state_dir: str | Path | None = None, timeout: float = 10.0,
         keep_state: bool = False) -> DownResult:
    """Stop every recorded process (SIGTERM, SIGKILL after `timeout`), drop the cw-test entries
    from the kubeconfig `up` wrote, and delete the state dir. Idempotent."""
    state = Path(state_dir).expanduser() if state_dir else default_cluster_dir()
    info = load_info(state)
    recs = procs.load_records(state / "pids")
    recs.sort(key=lambda r: -start_rank(r.name))  # watchdog first, etcd last
    stopped, pod_netns = {}, set()
    for r in recs:
        if r.pid == os.getpid():
            continue
        if r.name.startswith("containerd-"):  # the node's containers go first, through containerd
            pod_netns |= _stop_real_node_containers(state, r.name)
        stopped[r.name] = procs.stop(r, timeout)
    leftover = _clean_real_node(state, pod_netns)
    cleaned = None
    if info is not None and not keep_state:
        kc = Path(info.kubeconfig)
        try:
            if remove_from_user_kubeconfig(kc):
                cleaned = str(kc)
        except OSError:
            pass
    removed = False
    if not keep_state and state.exists() and is_cluster_state(state):
        shutil.rmtree(state, ignore_errors=True)
        removed = not state.exists()
    return DownResult(str(state), stopped, removed, cleaned, leftover)


def _stop_real_node_containers(state: Path, record_name: str) -> set[str]:
    """Kill and delete the real node's containers while its containerd still runs; the pods'
    network namespace files."""
    from .realnode import cleanup
    from .realnode import node as realnode

    files = realnode.NodeFiles(state, int(record_name.rsplit("-", 1)[1]))
    return cleanup.stop_containers(files.socket)


def _clean_real_node(state: Path, pod_netns: set[str]) -> list[str]:
    """After the processes stopped: shims, mounts, pod and node namespaces, routes, the fabric
    between the nodes; what is left."""
    from .realnode import cleanup
    from .realnode import node as realnode

    nodes = [realnode.NodeFiles(state, index) for index in range(MAX_REAL_NODES)]
    nodes = [files for files in nodes if files.dir.exists()]
    if not nodes:
        return []
    cleanup.remove_pod_namespaces(pod_netns)
    left = []
    for files in nodes:
        cleanup.kill_shims(files.socket)
        cleanup.unmount_under(files.dir)
        cleanup.remove_network(files.index)
        left += cleanup.leftovers(files.dir, files.index)
    return left + cleanup.remove_fabric()
