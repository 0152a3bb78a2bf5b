"""Start, inspect and stop the local control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok) on 127.0.0.1 with fake GPU nodes. Pure library: no printing."""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from . import procs
from .build import Binaries, binary_paths, ensure_binaries, missing_components
from .errors import LocalClusterError, StartError
from .kubeconfig import (
    CONTEXT,
    component_kubeconfig,
    default_user_kubeconfig,
    merge_user_kubeconfig,
    remove_from_user_kubeconfig,
    write_yaml,
)
from .paths import cluster_resources_dir, default_cluster_dir
from .pki import Pki, generate_pki, load_pki
from . import controllers, jobset, kueue
from .volumes import DEFAULT_CLAIM, DEFAULT_NAMESPACE, volume_manifests

MARKER = ".cw-local-cluster"
STATE_FILE = "cluster.json"
# Start order; stop order is the reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
QUEUEING = ("jobset", "kueue")  # optional components `up(kueue=True)` builds and starts, in this order
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"  # data only: pod IPs written by kwok are never reachable
STAGES = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-waiting", "pod-complete",
          "pod-fail", "pod-terminate", "pod-delete")
FAKE_LOG_LINES = (
    "cw local cluster: this pod runs on a KWOK fake node; no container was started.",
    "cw local cluster: every container of every pod shows this same log (kwok ClusterLogs).",
)


@dataclass
class ClusterInfo:
    """What `up` started (also stored as <state_dir>/cluster.json)."""

    state_dir: str
    server: str
    kubeconfig: str  # the user kubeconfig the cw-local context was merged into
    admin_kubeconfig: str  # a kubeconfig inside the state dir (file-referenced certs)
    context: str
    ports: dict[str, int]
    versions: dict[str, str]
    nodes: list[str]
    pids: dict[str, int]
    build_seconds: float = 0.0
    built: list[str] = field(default_factory=list)
    start_seconds: float = 0.0
    already_running: bool = False


@dataclass
class ProcessStatus:
    name: str
    pid: int
    alive: bool
    log: str


@dataclass
class NodeStatus:
    name: str
    ready: bool
    gpus: str
    cpu: str
    memory: str
    taints: list[str]


@dataclass
class ClusterStatus:
    state_dir: str
    exists: bool  # a state dir with a cluster record exists
    api_ready: bool
    server: str | None
    kubeconfig: str | None
    processes: list[ProcessStatus]
    nodes: list[NodeStatus]
    error: str | None = None  # why the API could not be queried

    @property
    def running(self) -> bool:
        return self.exists and self.api_ready and bool(self.processes) and all(
            p.alive for p in self.processes)


@dataclass
class DownResult:
    state_dir: str
    stopped: dict[str, str]  # component -> "stopped" | "killed" | "not running"
    removed_state: bool
    kubeconfig_cleaned: str | None


# --------------------------------------------------------------------------- helpers

def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class _Api:
    """Minimal HTTPS client for the API server (admin client cert); no kubernetes package needed."""

    def __init__(self, server: str, pki: Pki):
        self.server = server
        self.ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
        self.ctx.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))

    def request(self, method: str, path: str, body: dict | None = None,
                timeout: float = 5.0) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get_json(self, path: str) -> dict | None:
        code, raw = self.request("GET", path)
        return json.loads(raw) if code == 200 else None


def _tail(path: str | Path, n: int = 8) -> str:
    try:
        lines = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def _load_info(state: Path) -> ClusterInfo | None:
    try:
        return ClusterInfo(**json.loads((state / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _check_state_dir(state: Path) -> None:
    if state.exists() and any(state.iterdir()) and not (state / MARKER).exists():
        raise LocalClusterError(
            f"{state} is not empty and was not made by cw; refusing to use it as cluster state dir")


def _node_manifests(gpu_nodes: int, cpu_nodes: int) -> list[dict]:
    res = cluster_resources_dir() / "nodes"
    gpu = yaml.safe_load((res / "gpu-node.yaml").read_text())
    cpu = yaml.safe_load((res / "cpu-node.yaml").read_text())
    out = []
    for template, prefix, count in ((gpu, "cw-gpu", gpu_nodes), (cpu, "cw-cpu", cpu_nodes)):
        for i in range(count):
            node = copy.deepcopy(template)
            name = f"{prefix}-{i}"
            node["metadata"]["name"] = name
            node["metadata"]["labels"]["kubernetes.io/hostname"] = name
            for addr in node["status"]["addresses"]:
                if addr["type"] == "Hostname":
                    addr["address"] = name
            out.append(node)
    return out


def _kwok_config(state: Path, log_file: Path) -> str:
    """Multi-document kwok --config: the stages and a ClusterLogs for all pods."""
    stage_dir = cluster_resources_dir() / "stages"
    # No KwokConfiguration document: a partial one replaces kwok's defaults (parallelism 0 fails).
    text = []
    for s in STAGES:
        text.append((stage_dir / f"{s}.yaml").read_text())
    text.append(yaml.safe_dump({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "cw-all-pods"},
        "spec": {"selector": {}, "logs": [{"logsFile": str(log_file), "follow": False}]},
    }, sort_keys=False))
    return "\n---\n".join(t.strip() + "\n" for t in text)


def _write_fake_log(path: Path) -> None:
    """A CRI-format container log file (what kwok's log endpoint reads)."""
    ts = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
    path.write_text("".join(f"{ts} stdout F {line}\n" for line in FAKE_LOG_LINES))


def _create_nodes(api: _Api, manifests: list[dict]) -> None:
    for node in manifests:
        code, body = api.request("POST", "/api/v1/nodes", node)
        if code not in (201, 409):
            raise StartError(f"creating node {node['metadata']['name']} failed ({code}): "
                             f"{body[:300].decode(errors='replace')}")


def _nodes_ready(api: _Api, wanted: set[str]) -> bool:
    """All `wanted` nodes Ready and without not-ready/unreachable taints."""
    items = (api.get_json("/api/v1/nodes") or {}).get("items", [])
    ready = {s.name for s in map(_node_status, items)
             if s.ready and not any("not-ready" in t or "unreachable" in t for t in s.taints)}
    return wanted <= ready


def _wait_until(
    probe: Callable[[], bool],
    deadline: float,
    what: str,
    interval: float = 0.3,
    check: Callable[[], None] = lambda: None,
) -> None:
    """Poll ``probe`` until it is true; ``check`` raises if a process died meanwhile."""
    while True:
        check()
        try:
            if probe():
                return
        except (OSError, ssl.SSLError, ValueError):
            pass  # not up yet
        if time.monotonic() > deadline:
            raise StartError(f"timed out waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- public API

def status(state_dir: str | Path | None = None) -> ClusterStatus:
    """Which processes are alive, whether the API answers /readyz, and the nodes."""
    state = Path(state_dir).expanduser() if state_dir else default_cluster_dir()
    info = _load_info(state)
    recs = procs.load_records(state / "pids")
    plist = [ProcessStatus(r.name, r.pid, procs.is_alive(r), r.log) for r in recs]
    order = {n: i for i, n in enumerate(COMPONENTS)}
    plist.sort(key=lambda p: order.get(p.name, 99))
    st = ClusterStatus(str(state), info is not None, False, info.server if info else None,
                       info.kubeconfig if info else None, plist, [])
    if info is None:
        return st
    try:
        api = _Api(info.server, load_pki(state / "pki"))
        code, body = api.request("GET", "/readyz", timeout=3)
        st.api_ready = code == 200
        if not st.api_ready:
            st.error = f"/readyz answered {code}: {body[:200].decode(errors='replace')}"
            return st
        nodes = api.get_json("/api/v1/nodes") or {"items": []}
        st.nodes = [_node_status(n) for n in nodes.get("items", [])]
    except (OSError, ssl.SSLError, ValueError) as e:
        st.error = f"API server {info.server} not reachable: {e}"
    return st


def _node_status(n: dict) -> NodeStatus:
    st = n.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    alloc = st.get("allocatable") or {}
    taints = [f"{t.get('key')}:{t.get('effect')}" for t in n.get("spec", {}).get("taints", []) or []]
    return NodeStatus(n["metadata"]["name"], conds.get("Ready") == "True",
                      alloc.get("nvidia.com/gpu", "0"), alloc.get("cpu", "?"),
                      alloc.get("memory", "?"), taints)


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
) -> ClusterInfo:
    """Start the local cluster (idempotent: a healthy running cluster is returned as is).

    Builds missing binaries first when `build` (cold: tens of minutes). Merges context `cw-local`
    into `kubeconfig` (default: first $KUBECONFIG path or ~/.kube/config) and makes it current.
    `owner_pid`: also start a watchdog that runs `down()` once that process is gone (tests use
    their own pid, so a killed test run never leaks a cluster).
    Raises StartError (with the failing component's log path) or BuildError.
    """
    say = on_progress or (lambda _m: None)
    state = Path(state_dir).expanduser() if state_dir else default_cluster_dir()
    user_kc = Path(kubeconfig).expanduser() if kubeconfig else default_user_kubeconfig()
    if gpu_nodes < 0 or cpu_nodes < 0:
        raise LocalClusterError("node counts must be >= 0")
    _check_state_dir(state)

    info = _load_info(state)
    if info is not None:
        st = status(state)
        if st.running:
            if kueue and not set(QUEUEING) <= {r.name for r in procs.load_records(state / "pids")}:
                raise LocalClusterError(
                    "the running local cluster has no Kueue and JobSet; stop it with `cw cluster down`, "
                    "then `cw cluster up --kueue`")
            pki = load_pki(state / "pki")
            # Top up nodes if more were asked for than exist (never removes nodes).
            api = _Api(info.server, pki)
            have = {n.name for n in st.nodes}
            extra = [n for n in _node_manifests(gpu_nodes, cpu_nodes)
                     if n["metadata"]["name"] not in have]
            if extra:
                say(f"adding {len(extra)} fake nodes")
                _create_nodes(api, extra)
                _wait_until(lambda: _nodes_ready(api, {n["metadata"]["name"] for n in extra}),
                             time.monotonic() + timeout, "new fake nodes to become Ready")
                info.nodes = sorted(set(info.nodes) | {n["metadata"]["name"] for n in extra})
            merge_user_kubeconfig(user_kc, info.server, pki.ca.cert, pki.admin.cert, pki.admin.key,
                                  set_current=set_current_context)
            info.kubeconfig = str(user_kc)
            info.already_running = True
            (state / STATE_FILE).write_text(json.dumps(asdict(info), indent=2))
            return info
        say("found a stale cluster; stopping it")
        down(state)
    elif procs.load_records(state / "pids"):
        down(state)

    t_build = time.monotonic()
    if build:
        bins = ensure_binaries(on_build_start=lambda c: say(f"building {c} (cold build, minutes)"),
                               optional=QUEUEING if kueue else ())
    else:
        missing = missing_components(optional=QUEUEING if kueue else ())
        if missing:
            raise LocalClusterError(
                f"cluster binaries missing ({', '.join(missing)}); run without --no-build")
        bins = binary_paths()
    build_seconds = round(time.monotonic() - t_build, 1)

    t0 = time.monotonic()
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    (state / MARKER).write_text("state of the cw local test cluster; removed by `cw cluster down`\n")
    try:
        info = _start(state, bins, user_kc, gpu_nodes, cpu_nodes, timeout, set_current_context, say, kueue)
    except BaseException:
        down(state, keep_state=True)
        raise
    if owner_pid is not None:
        st_owner = procs._stat(owner_pid)
        if st_owner is None:
            down(state)
            raise StartError(f"owner process {owner_pid} does not exist")
        import sys

        procs.spawn("watchdog", [sys.executable, "-m", "cw_cli.localcluster.watchdog",
                                 str(owner_pid), str(st_owner[1]), str(state)],
                    state / "logs" / "watchdog.log", state / "pids",
                    env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                        [str(Path(__file__).resolve().parents[2])]
                        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])))
    info.build_seconds = build_seconds
    info.built = list(bins.built)
    info.start_seconds = round(time.monotonic() - t0, 1)
    (state / STATE_FILE).write_text(json.dumps(asdict(info), indent=2))
    return info


def _start(state: Path, bins: Binaries, user_kc: Path, gpu_nodes: int, cpu_nodes: int,
           timeout: float, set_current: bool, say: Callable[[str], None],
           with_kueue: bool = False) -> ClusterInfo:
    deadline = time.monotonic() + timeout
    pki = generate_pki(state / "pki")
    names = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
    ports = dict(zip(names, _free_ports(len(names)), strict=True))
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    logs, pids = state / "logs", state / "pids"
    started: dict[str, procs.ProcRecord] = {}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "ETCD"))}

    def spawn(name: str, argv: list[str], env: dict | None = None) -> None:
        started[name] = procs.spawn(name, [str(a) for a in argv], logs / f"{name}.log", pids,
                                    env=env or base_env)

    def check_alive() -> None:
        for name, rec in started.items():
            if not procs.is_alive(rec):
                raise StartError(f"{name} exited during start-up; log {rec.log}: {_tail(rec.log)}",
                                 rec.log)

    def wait(what: str, probe: Callable[[], bool], interval: float = 0.2) -> None:
        _wait_until(probe, deadline, f"{what} (after {timeout:.0f}s)", interval, check_alive)

    # etcd ---------------------------------------------------------------------------
    say("starting etcd")
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    spawn("etcd", [
        bins.etcd, "--name=cw-local", f"--data-dir={state / 'etcd'}",
        f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=cw-local={peer_url}", "--initial-cluster-state=new",
        "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=2147483648",
    ])

    # kube-apiserver -------------------------------------------------------------------
    say("starting kube-apiserver")
    spawn("kube-apiserver", [
        bins.kube_apiserver,
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={ports['kube-apiserver']}",
        f"--tls-cert-file={pki.apiserver.cert}", f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--allow-privileged=true",
        # 127.0.0.1 may not be written into the kubernetes Service's Endpoints; nothing needs them.
        "--endpoint-reconciler-type=none",
        # pods/log, exec etc. are proxied to kwok's kubelet-like server on 127.0.0.1.
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        f"--kubelet-certificate-authority={pki.ca.cert}",
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
    ])
    api = _Api(server, pki)
    wait("kube-apiserver /readyz", lambda: api.request("GET", "/readyz", timeout=2)[0] == 200)

    # component kubeconfigs --------------------------------------------------------------
    kc = {}
    for comp, pair in (("kube-controller-manager", pki.controller_manager),
                       ("kube-scheduler", pki.scheduler), ("kwok", pki.kwok_client),
                       ("admin", pki.admin)):
        kc[comp] = state / "kubeconfigs" / f"{comp}.kubeconfig"
        write_yaml(kc[comp], component_kubeconfig(server, pki.ca.cert, pair.cert, pair.key, comp))

    say("starting kube-controller-manager, kube-scheduler, kwok")
    spawn("kube-controller-manager", [
        bins.kube_controller_manager,
        f"--kubeconfig={kc['kube-controller-manager']}",
        f"--authentication-kubeconfig={kc['kube-controller-manager']}",
        f"--authorization-kubeconfig={kc['kube-controller-manager']}",
        "--bind-address=127.0.0.1", f"--secure-port={ports['kube-controller-manager']}",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca.cert}",
        f"--cluster-signing-cert-file={pki.ca.cert}", f"--cluster-signing-key-file={pki.ca.key}",
        "--use-service-account-credentials=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--leader-elect=false",
        "--profiling=false",
    ])
    spawn("kube-scheduler", [
        bins.kube_scheduler,
        f"--kubeconfig={kc['kube-scheduler']}",
        f"--authentication-kubeconfig={kc['kube-scheduler']}",
        f"--authorization-kubeconfig={kc['kube-scheduler']}",
        "--bind-address=127.0.0.1", f"--secure-port={ports['kube-scheduler']}",
        "--leader-elect=false",
        "--profiling=false",
    ])
    # kwok's Logs CRD: tests may create a Logs object (name/namespace = the pod) that points a
    # container's log at their own CRI-format file; ClusterLogs (in --config) covers the rest.
    for crd_file in sorted((cluster_resources_dir() / "crds").glob("*.yaml")):
        crd = yaml.safe_load(crd_file.read_text())
        code, body = api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        if code not in (201, 409):
            raise StartError(f"installing CRD {crd['metadata']['name']} failed ({code}): "
                             f"{body[:300].decode(errors='replace')}")
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        wait(f"CRD {crd['metadata']['name']} to be established", lambda path=path: any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in ((api.get_json(path) or {}).get("status") or {}).get("conditions") or []))

    kwok_dir = state / "kwok"
    kwok_dir.mkdir()
    fake_log = kwok_dir / "container.log"
    _write_fake_log(fake_log)
    (kwok_dir / "kwok.yaml").write_text(_kwok_config(state, fake_log))
    # HOME inside the state dir: kwok would otherwise also load ~/.kwok/kwok.yaml.
    kwok_env = dict(base_env, HOME=str(kwok_dir))
    spawn("kwok", [
        bins.kwok,
        f"--config={kwok_dir / 'kwok.yaml'}",
        f"--kubeconfig={kc['kwok']}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-ip=127.0.0.1",
        f"--node-port={ports['kwok']}",
        f"--server-address=127.0.0.1:{ports['kwok']}",
        f"--tls-cert-file={pki.kwok_serving.cert}",
        f"--tls-private-key-file={pki.kwok_serving.key}",
        "--node-lease-duration-seconds=40",
        f"--cidr={POD_CIDR}",
        "--enable-crds=Logs",
    ], env=kwok_env)

    # nodes --------------------------------------------------------------------------
    manifests = _node_manifests(gpu_nodes, cpu_nodes)
    say(f"creating {len(manifests)} fake nodes")
    _create_nodes(api, manifests)
    wanted = {n["metadata"]["name"] for n in manifests}
    say("waiting for nodes Ready and the default ServiceAccount")
    wait("fake nodes to become Ready", lambda: _nodes_ready(api, wanted), 0.3)
    wait("ServiceAccount default/default",
         lambda: api.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200)

    # The quick start's checkpoint volume (claim `checkpoints` in default), bound at once.
    volume, claim = volume_manifests(DEFAULT_NAMESPACE, DEFAULT_CLAIM)
    for path, body in (("/api/v1/persistentvolumes", volume),
                       (f"/api/v1/namespaces/{DEFAULT_NAMESPACE}/persistentvolumeclaims", claim)):
        code, raw = api.request("POST", path, body)
        if code not in (201, 409):
            raise StartError(f"creating {body['kind']} {body['metadata']['name']} failed ({code}): {raw[:300]!r}")

    if with_kueue:
        # KWOK's serving certificate is valid for 127.0.0.1, where JobSet and Kueue serve their
        # webhooks too. JobSet first: Kueue sets up its JobSet integration only if the CRD is served.
        host = controllers.Host(api, state, kc["admin"], (pki.kwok_serving.cert, pki.kwok_serving.key),
                                pki.ca.cert, spawn, wait, say)  # fmt: skip
        jobset.start(host, tuple(_free_ports(3)))
        nodes = (api.get_json("/api/v1/nodes") or {}).get("items", [])
        kueue.start(host, tuple(_free_ports(3)), kueue.capacity_of(nodes))

    merge_user_kubeconfig(user_kc, server, pki.ca.cert, pki.admin.cert, pki.admin.key,
                          set_current=set_current)
    check_alive()
    return ClusterInfo(
        state_dir=str(state), server=server, kubeconfig=str(user_kc),
        admin_kubeconfig=str(kc["admin"]), context=CONTEXT, ports=ports,
        versions=asdict(bins.versions), nodes=sorted(wanted),
        pids={n: r.pid for n, r in started.items()},
    )


def down(state_dir: str | Path | None = None, timeout: float = 10.0,
         keep_state: bool = False) -> DownResult:
    """Stop every recorded process (SIGTERM, SIGKILL after `timeout`), drop the cw-local entries
    from the kubeconfig `up` wrote, and delete the state dir. Idempotent."""
    state = Path(state_dir).expanduser() if state_dir else default_cluster_dir()
    info = _load_info(state)
    recs = procs.load_records(state / "pids")
    order = {n: i for i, n in enumerate(COMPONENTS)}
    recs.sort(key=lambda r: -order.get(r.name, len(COMPONENTS)))  # watchdog first, etcd last
    stopped = {r.name: procs.stop(r, timeout) for r in recs if r.pid != os.getpid()}
    cleaned = None
    if info is not None and not keep_state:
        kc = Path(info.kubeconfig)
        try:
            if remove_from_user_kubeconfig(kc):
                cleaned = str(kc)
        except OSError:
            pass
    removed = False
    if not keep_state and state.exists() and (state / MARKER).exists():
        shutil.rmtree(state, ignore_errors=True)
        removed = not state.exists()
    return DownResult(str(state), stopped, removed, cleaned)
