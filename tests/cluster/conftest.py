"""Fixtures for tests against a real Kubernetes API server.

`kube_cluster` (session): uses $CW_TEST_KUBECONFIG when set (current context of that file),
otherwise starts cw's test cluster (cw_cli.testcluster) in a temp state dir with its own
kubeconfig file (never ~/.kube/config), and stops it (by PID) at the end; a watchdog stops it
too if pytest is killed. A cluster that cannot start fails the tests. Env: CW_TEST_GPU_NODES
(default 2 fake 8-GPU nodes, plus 1 CPU node), CW_TEST_CLUSTER_TIMEOUT (start timeout, 180 s).
`real_cluster` (session): a third test cluster with the real node (kubelet, containerd, runc; pods
really run), one KWOK GPU node beside it; started for the modules that ask for it, after the others.
`as_documented_roles` (function): an environment for cw acting as a user bound to exactly the
Roles shipped in docs/rbac-*.yaml (applied from those files, so a wrong doc fails its tests).
`kueue_cluster` (session): a second test cluster with the real JobSet and Kueue controllers
(`up(kueue=True)`), started once for every module that asks for it; those tests run last, so it
overlaps the rest of the session as little as possible.
Every test in this folder is marked `cluster`.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from documented_users import DocumentedUsers

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            path = Path(str(item.fspath)).resolve()
        except OSError:
            continue
        if _HERE == path.parent or _HERE in path.parents:
            item.add_marker(pytest.mark.cluster)
    # The Kueue and real-node clusters live until the session ends: start them after the other tests.
    items.sort(key=lambda item: ("real_cluster" in getattr(item, "fixturenames", ()),
                                 "kueue_cluster" in getattr(item, "fixturenames", ())))  # fmt: skip


@dataclass
class KubeCluster:
    kubeconfig: Path
    context: str | None  # None: the kubeconfig's current context
    server: str | None
    state_dir: Path | None  # None when an external cluster (CW_TEST_KUBECONFIG) is used
    info: object | None  # cw_cli.testcluster.ClusterInfo when started here

    @property
    def local(self) -> bool:
        return self.state_dir is not None


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory) -> KubeCluster:
    external = os.environ.get("CW_TEST_KUBECONFIG")
    if external:
        path = Path(external).expanduser()
        if not path.is_file():
            pytest.fail(f"CW_TEST_KUBECONFIG={external} does not exist", pytrace=False)
        yield KubeCluster(path, None, None, None, None)
        return

    from cw_cli import testcluster as lc

    base = tmp_path_factory.mktemp("cw-test-cluster")
    state, kubeconfig = base / "state", base / "kubeconfig"
    t0 = time.monotonic()
    try:
        # owner_pid: a watchdog stops the cluster if this pytest is killed before teardown.
        gpu_nodes = int(os.environ.get("CW_TEST_GPU_NODES", "2"))
        info = lc.up(state_dir=state, kubeconfig=kubeconfig, gpu_nodes=gpu_nodes, cpu_nodes=1,
                     timeout=float(os.environ.get("CW_TEST_CLUSTER_TIMEOUT", "180")),
                     owner_pid=os.getpid(), real_node=False)
    except lc.TestClusterError as e:
        pytest.fail(f"test Kubernetes cluster did not start: {e}", pytrace=False)
    print(f"\ntest cluster up in {time.monotonic() - t0:.1f}s at {info.server} "
          f"(build {info.build_seconds}s, start {info.start_seconds}s)")
    try:
        yield KubeCluster(kubeconfig, lc.CONTEXT, info.server, state, info)
    finally:
        lc.down(state_dir=state)


@pytest.fixture(scope="session")
def kueue_cluster(tmp_path_factory) -> Path:
    """Kubeconfig (context cw-test) of a test cluster running JobSet and Kueue.

    Kueue's ClusterQueue `cw-gpus` holds the two fake nodes' 16 GPUs; LocalQueue `cw` feeds it
    in namespace default (`cw_cli.testcluster.kueue.local_queue(ns)` for another namespace).
    """
    from cw_cli import testcluster as lc

    base = tmp_path_factory.mktemp("kueue-cluster")
    state, kubeconfig = base / "state", base / "kubeconfig"
    started = time.monotonic()
    try:
        lc.up(state_dir=state, kubeconfig=kubeconfig, gpu_nodes=2, cpu_nodes=1, kueue=True,
              timeout=float(os.environ.get("CW_TEST_CLUSTER_TIMEOUT", "180")),
              set_current_context=False, owner_pid=os.getpid(), real_node=False)
    except lc.TestClusterError as e:
        pytest.fail(f"test cluster with JobSet and Kueue did not start: {e}", pytrace=False)
    print(f"\ntest cluster with JobSet and Kueue up in {time.monotonic() - started:.1f}s")
    try:
        yield kubeconfig
    finally:
        lc.down(state_dir=state)


@dataclass
class RealCluster:
    kubeconfig: Path
    state_dir: Path
    info: object  # cw_cli.testcluster.ClusterInfo

    def env(self) -> dict[str, str]:
        """The environment of a `cw` subprocess against this cluster."""
        env = {k: v for k, v in os.environ.items() if k != "CW_TEST_KUBECONFIG"}
        return {**env, "KUBECONFIG": str(self.kubeconfig)}


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory) -> RealCluster:
    """A test cluster with the real node (see docs/test-cluster.md). Where the machine cannot run it
    the tests skip saying why, except in CI (.ci/run installs what it needs), where they fail."""
    from cw_cli import testcluster as lc
    from cw_cli.testcluster.realnode import node as realnode

    reason = realnode.unavailable_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the real node: {reason}", pytrace=False)
        pytest.skip(f"no real node on this machine: {reason}")
    base = tmp_path_factory.mktemp("real-cluster")
    state, kubeconfig = base / "state", base / "kubeconfig"
    started = time.monotonic()
    try:
        # Two real nodes and JobSet: a `--nodes 2` run's pods rendezvous on two kubelets (Job and JobSet).
        info = lc.up(state_dir=state, kubeconfig=kubeconfig, gpu_nodes=1, cpu_nodes=0, real_node=True, real_nodes=2,
                     kueue=True, timeout=float(os.environ.get("CW_TEST_CLUSTER_TIMEOUT", "180")), owner_pid=os.getpid(),
                     on_progress=lambda m: print(f"real cluster: {m}", flush=True))  # fmt: skip
    except lc.TestClusterError as e:
        pytest.fail(f"test cluster with the real node did not start: {e}", pytrace=False)
    print(f"\ntest cluster with the real node up in {time.monotonic() - started:.1f}s")
    try:
        yield RealCluster(kubeconfig, state, info)
    finally:
        lc.down(state_dir=state)


@pytest.fixture(scope="session")
def kube_api(kube_cluster):
    """A kubernetes.client.ApiClient for the test cluster."""
    from kubernetes import config as kconfig

    client = kconfig.new_client_from_config(
        config_file=str(kube_cluster.kubeconfig), context=kube_cluster.context)
    yield client
    client.close()


@pytest.fixture
def cw_env(kube_cluster) -> dict[str, str]:
    """Environment for running the `cw` CLI as a subprocess against the test cluster."""
    env = dict(os.environ)
    env["KUBECONFIG"] = str(kube_cluster.kubeconfig)
    env.pop("CW_TEST_KUBECONFIG", None)
    return env


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.25, what: str = "condition", explain=None):
    """Poll `predicate()` until it returns a truthy value; fail the test after `timeout`, adding
    what `explain()` says then (e.g. the pods and why they are not scheduled), when given."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - keep polling, report the last error
            last_exc = e
        time.sleep(interval)
    said = ""
    if explain is not None:
        try:
            said = f"\n{explain()}"
        except Exception as e:  # noqa: BLE001 - the timeout is the failure; its explanation is a bonus
            said = f"\n(no explanation: {e})"
    pytest.fail(f"timed out after {timeout}s waiting for {what}"
                + (f" (last error: {last_exc})" if last_exc else "") + said, pytrace=False)


def _unfinished(pod) -> bool:
    """Whether a pod has not ended (an ended pod holds nothing on its node)."""
    return pod.status.phase not in ("Succeeded", "Failed")


def pods_and_events(kube_api, namespace: str) -> str:
    """The namespace's pods (phase, node, deletion) and events, and the GPUs bound pods of every
    namespace hold: what a test that timed out waiting for a pod should print."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    lines = [f"pod {p.metadata.name}: {p.status.phase} on {p.spec.node_name or '-'}"
             + (" (deleting)" if p.metadata.deletion_timestamp else "") for p in core.list_namespaced_pod(namespace).items]  # fmt: skip
    lines += [f"event {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}"
              for e in core.list_namespaced_event(namespace).items][-15:]  # fmt: skip
    held: dict[str, int] = {}
    for pod in core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name and _unfinished(pod):
            gpus = sum(int((c.resources.requests or {}).get("nvidia.com/gpu", 0)) for c in pod.spec.containers)
            held[pod.metadata.namespace] = held.get(pod.metadata.namespace, 0) + gpus
    lines.append(f"GPUs held by bound pods, by namespace: { {k: v for k, v in held.items() if v} }")
    return "\n".join(lines)


@pytest.fixture
def explain_pods(kube_api, namespace):
    """``explain_pods()``: :func:`pods_and_events` of the test's namespace, for ``wait_for(explain=...)``."""
    return lambda: pods_and_events(kube_api, namespace)


@pytest.fixture(name="wait_for")
def wait_for_fixture():
    """The `wait_for(predicate, timeout, interval, what)` polling helper."""
    return wait_for


#: A deleted test namespace whose pods still sit on their nodes this long after is stuck: a kubelet
#: would have ended them, and they hold the shared cluster's GPUs for the rest of the session.
STUCK_AFTER_S = 300.0
#: Stuck namespaces already reported (each fails one test, not every later one).
_reported_stuck: set[str] = set()


def stuck_pods(core) -> dict[str, list[str]]:
    """Bound pods of test namespaces deleted more than :data:`STUCK_AFTER_S` ago, by namespace."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    stuck: dict[str, list[str]] = {}
    for ns in core.list_namespace(label_selector="cw-test=true").items:
        deleted = ns.metadata.deletion_timestamp
        if deleted is None or (now - deleted).total_seconds() < STUCK_AFTER_S or ns.metadata.name in _reported_stuck:
            continue
        pods = [f"{p.metadata.name} ({p.status.phase})" for p in core.list_namespaced_pod(ns.metadata.name).items
                if p.spec.node_name and _unfinished(p)]
        if pods:
            stuck[ns.metadata.name] = pods
    return stuck


@pytest.fixture
def namespace(kube_api) -> str:
    """A fresh namespace `cw-test-<random>` whose default ServiceAccount exists; deleted after.

    Fails first when an earlier test's deleted namespace still has pods on their nodes
    (:func:`stuck_pods`), naming them, rather than let a later test find too few GPUs.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(kube_api)
    stuck = stuck_pods(core)
    if stuck:
        _reported_stuck.update(stuck)
        pytest.fail(f"pods of deleted test namespaces are still on their nodes {STUCK_AFTER_S:.0f} s later, holding the "
                    f"shared cluster's GPUs (a kubelet would have ended them; kubeconfigs/cluster/stages): {stuck}",
                    pytrace=False)  # fmt: skip
    name = f"cw-test-{secrets.token_hex(4)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"cw-test": "true"})))

    def sa_exists():
        try:
            core.read_namespaced_service_account("default", name)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    # ServiceAccount admission rejects pods until the SA controller created `default`.
    wait_for(sa_exists, 30, what=f"ServiceAccount {name}/default")
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except ApiException as e:
        if e.status != 404:
            raise
    # A pod above the default priority that outlives its test would preempt the next tests' pods
    # (it keeps its priority after its PriorityClass is gone, and the scheduler places it while its
    # namespace is being deleted): wait until this namespace has none left.
    wait_for(lambda: not _priority_pods(core, name), 120, what=f"the pods above the default priority in {name} to be gone")


def _priority_pods(core, namespace: str) -> list[str]:
    """Pods of ``namespace`` above the default priority that have not ended."""
    return [p.metadata.name for p in core.list_namespaced_pod(namespace).items
            if (p.spec.priority or 0) > 0 and _unfinished(p)]


@pytest.fixture
def queued_namespace(kueue_cluster, wait_for):
    """(api client, env for cw, a fresh namespace with the LocalQueue `cw`) on the `kueue_cluster`."""
    from kubernetes import client
    from kubernetes import config as kconfig

    from cw_cli.testcluster.kueue import local_queue

    api = kconfig.new_client_from_config(config_file=str(kueue_cluster), context="cw-test")
    core = client.CoreV1Api(api)
    namespace = f"cw-queued-{secrets.token_hex(3)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), 30, what="default ServiceAccount")
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", namespace, "localqueues", local_queue(namespace)
    )
    env = {**os.environ, "KUBECONFIG": str(kueue_cluster)}
    env.pop("CW_TEST_KUBECONFIG", None)
    yield api, env, namespace
    core.delete_namespace(namespace, propagation_policy="Background")
    api.close()


@pytest.fixture
def record_requests():
    """``record(kube)`` starts recording (method, path) of every request ``kube`` sends, from any
    thread, into the list it returns; the recording stops at the end of the test."""
    recording: list = []

    def record(kube) -> list[tuple[str, str]]:
        sent: list[tuple[str, str]] = []
        lock = threading.Lock()
        send = type(kube).raw

        def raw(method: str, path: str, **kwargs):
            with lock:
                sent.append((method, path))
            return send(kube, method, path, **kwargs)

        kube.raw = raw  # an instance attribute: request, get, list and create all go through self.raw
        recording.append(kube)
        return sent

    yield record
    for kube in recording:
        kube.__dict__.pop("raw", None)


@pytest.fixture
def as_documented_roles(kube_cluster, kube_api, namespace, tmp_path):
    """``as_documented_roles("read-only", "after-training")`` -> an environment for `cw` acting as a
    user bound to exactly those shipped Roles (:class:`DocumentedUsers`), nothing else.

    The user is a ServiceAccount of the test's namespace with its own token (a kubeconfig with the
    admin's cluster and that token), so every request cw sends, its exec and port-forward streams
    included, is judged by RBAC as that user. ``impersonate=True`` instead keeps the admin's
    certificate and acts as the user through the kubeconfig's ``as:`` (Impersonate-User headers).
    """
    users = DocumentedUsers(kube_api, kube_cluster.kubeconfig, namespace, tmp_path)
    yield users.make
    users.close()

