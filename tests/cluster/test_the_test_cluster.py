"""The test cluster itself: real scheduling, Jobs, Deployments, GC, SSA, logs on KWOK nodes."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

GPU = "nvidia.com/gpu"


def _job(name: str, gpus: int = 0, annotations: dict | None = None) -> client.V1Job:
    limits = {GPU: str(gpus)} if gpus else None
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}, annotations=annotations),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(
                        name="main", image="busybox:1.36", command=["true"],
                        resources=client.V1ResourceRequirements(
                            requests={"cpu": "1", "memory": "1Gi"}, limits=limits),
                    )],
                ),
            ),
        ),
    )


def _pods(core, ns: str, app: str) -> list:
    return core.list_namespaced_pod(ns, label_selector=f"app={app}").items


def test_nodes_ready_with_gpus(kube_api):
    core = client.CoreV1Api(kube_api)
    nodes = core.list_node().items
    gpu_nodes = [n for n in nodes if (n.status.allocatable or {}).get(GPU) == "8"]
    assert len(gpu_nodes) >= 2, [n.metadata.name for n in nodes]
    for n in gpu_nodes:
        ready = {c.type: c.status for c in n.status.conditions}["Ready"]
        assert ready == "True", n.metadata.name
        assert n.status.capacity[GPU] == "8"
        assert n.status.allocatable["cpu"] == "64"
        assert n.status.allocatable["memory"] == "1Ti"
        assert n.status.allocatable["pods"] == "110"
        assert n.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert n.metadata.labels["nvidia.com/gpu.count"] == "8"
        assert n.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert {a.type: a.address for a in n.status.addresses}["InternalIP"] == "127.0.0.1"
        assert not any(t.key.startswith("node.kubernetes.io/") for t in (n.spec.taints or []))
    cpu_only = [n for n in nodes if GPU not in (n.status.allocatable or {})]
    assert cpu_only, "expected at least one CPU-only node"


def test_version_is_stamped(kube_api, kube_cluster):
    v = client.VersionApi(kube_api).get_code()
    assert v.git_version.startswith("v1."), v.git_version
    assert int(v.minor.rstrip("+")) >= 33
    if kube_cluster.local:
        assert v.git_version == kube_cluster.info.versions["kubernetes"]


def test_gpu_job_scheduled_and_completes(kube_api, namespace, wait_for):
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    batch.create_namespaced_job(namespace, _job("train", gpus=4))
    job = wait_for(lambda: (j := batch.read_namespaced_job_status("train", namespace)).status.succeeded
                   and j, 60, what="Job train to succeed")
    assert job.status.succeeded == 1
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)
    (pod,) = _pods(core, namespace, "train")
    assert pod.status.phase == "Succeeded"
    node = core.read_node(pod.spec.node_name)
    assert node.status.allocatable.get(GPU) == "8", pod.spec.node_name
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0


def test_job_pod_can_fail_with_exit_code(kube_api, namespace, wait_for):
    """Annotation kwok.cw/exit-code makes the pod fail (cw's pod-fail stage)."""
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    batch.create_namespaced_job(namespace, _job("boom", gpus=1, annotations={"kwok.cw/exit-code": "3"}))
    wait_for(lambda: batch.read_namespaced_job_status("boom", namespace).status.failed, 60,
             what="Job boom to fail")
    job = batch.read_namespaced_job_status("boom", namespace)
    assert any(c.type == "Failed" and c.status == "True" for c in job.status.conditions)
    (pod,) = _pods(core, namespace, "boom")
    assert pod.status.phase == "Failed"
    term = pod.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason) == (3, "Error")


def test_pod_asking_16_gpus_stays_pending(kube_api, namespace, wait_for):
    core = client.CoreV1Api(kube_api)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="greedy"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="main", image="busybox:1.36",
            resources=client.V1ResourceRequirements(limits={GPU: "16"}))]),
    )
    core.create_namespaced_pod(namespace, pod)

    def failed_scheduling():
        evs = core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=greedy,reason=FailedScheduling").items
        return evs[0] if evs else None

    ev = wait_for(failed_scheduling, 30, what="FailedScheduling event")
    assert "Insufficient nvidia.com/gpu" in ev.message, ev.message
    p = core.read_namespaced_pod_status("greedy", namespace)
    assert p.status.phase == "Pending"
    assert not p.spec.node_name
    cond = {c.type: c for c in p.status.conditions}["PodScheduled"]
    assert (cond.status, cond.reason) == ("False", "Unschedulable")


def test_deployment_becomes_ready_and_stays_running(kube_api, namespace, wait_for):
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    labels = {"app": "server"}
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="server"),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(
                    name="vllm", image="vllm/vllm-openai:v0.10.0",
                    ports=[client.V1ContainerPort(container_port=8000)],
                    resources=client.V1ResourceRequirements(limits={GPU: "2"}))]),
            ),
        ),
    ))
    wait_for(lambda: apps.read_namespaced_deployment_status("server", namespace).status.ready_replicas == 2,
             60, what="Deployment server ready")
    time.sleep(4)  # longer than the pod-complete delay: Deployment pods must not complete
    pods = _pods(core, namespace, "server")
    assert len(pods) == 2
    assert all(p.status.phase == "Running" for p in pods)
    assert apps.read_namespaced_deployment_status("server", namespace).status.ready_replicas == 2


def test_garbage_collection_of_owned_configmap(kube_api, namespace, wait_for):
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)

    def owned_cm(job_name: str) -> None:
        job = batch.read_namespaced_job(job_name, namespace)
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"{job_name}-cfg", owner_references=[client.V1OwnerReference(
                api_version="batch/v1", kind="Job", name=job_name, uid=job.metadata.uid,
                block_owner_deletion=True, controller=False)]),
            data={"config.yaml": "lr: 1e-5\n"},
        ))

    def gone(name: str) -> bool:
        try:
            core.read_namespaced_config_map(name, namespace)
            return False
        except ApiException as e:
            return e.status == 404

    for name in ("gc-bg", "gc-orphan"):
        batch.create_namespaced_job(namespace, _job(name))
        owned_cm(name)

    # Background propagation: the garbage collector deletes the dependent ConfigMap (and pods).
    batch.delete_namespaced_job("gc-bg", namespace, propagation_policy="Background")
    wait_for(lambda: gone("gc-bg-cfg"), 30, what="ConfigMap gc-bg-cfg to be garbage-collected")
    wait_for(lambda: not _pods(core, namespace, "gc-bg"), 30, what="pods of gc-bg to be deleted")

    # No propagation policy: batch/v1 Jobs default to *orphan* - dependents survive. cw must pass
    # propagationPolicy=Background (or Foreground) when it deletes Jobs.
    batch.delete_namespaced_job("gc-orphan", namespace)
    wait_for(lambda: gone_job(batch, namespace, "gc-orphan"), 30, what="Job gc-orphan deleted")
    cm = wait_for(lambda: (c := core.read_namespaced_config_map("gc-orphan-cfg", namespace))
                  and not c.metadata.owner_references and c, 30, what="orphaned ConfigMap")
    assert cm.data["config.yaml"] == "lr: 1e-5\n"


def gone_job(batch, ns: str, name: str) -> bool:
    try:
        batch.read_namespaced_job(name, ns)
        return False
    except ApiException as e:
        return e.status == 404


def test_server_side_apply_dry_run_persists_nothing(kube_api, namespace):
    core = client.CoreV1Api(kube_api)
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ssa-dry", "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "cw"}},
            "data": {"k": "v"}}
    out = core.patch_namespaced_config_map(
        "ssa-dry", namespace, body, field_manager="cw", dry_run="All", force=True,
        _content_type="application/apply-patch+yaml")
    assert out.data == {"k": "v"}
    assert out.metadata.managed_fields[0].manager == "cw"
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_config_map("ssa-dry", namespace)
    assert exc.value.status == 404

    # Server-side validation still runs in dry-run: an invalid object is rejected with 422.
    bad = dict(body, metadata=dict(body["metadata"], name="Not_Valid"))
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_config_map(
            "Not_Valid", namespace, bad, field_manager="cw", dry_run="All",
            _content_type="application/apply-patch+yaml")
    assert exc.value.status == 422

    # A real apply persists.
    core.patch_namespaced_config_map("ssa-dry", namespace, body, field_manager="cw",
                                     _content_type="application/apply-patch+yaml")
    assert core.read_namespaced_config_map("ssa-dry", namespace).data == {"k": "v"}


def test_pod_logs_served_by_kwok(kube_api, kube_cluster, namespace, wait_for):
    """pods/log is proxied by the API server to kwok's kubelet-like endpoint, which serves one
    canned CRI log file (ClusterLogs) for every container of every pod."""
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    batch.create_namespaced_job(namespace, _job("logs", gpus=1))
    pod = wait_for(lambda: next(iter(_pods(core, namespace, "logs")), None), 30, what="pod of Job logs")
    name = pod.metadata.name
    wait_for(lambda: core.read_namespaced_pod_status(name, namespace).status.phase in ("Running", "Succeeded"),
             30, what="pod running")
    text = core.read_namespaced_pod_log(name, namespace, container="main")
    if kube_cluster.local:
        assert "KWOK fake node" in text, text
        assert core.read_namespaced_pod_log(name, namespace, tail_lines=1).count("\n") == 1


def test_pod_logs_of_unscheduled_pod_and_bad_container(kube_api, namespace):
    """What the API returns for logs that cannot exist (same on a real cluster)."""
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="nowhere"),
        spec=client.V1PodSpec(node_selector={"no-such-label": "x"},
                              containers=[client.V1Container(name="main", image="busybox:1.36")])))
    # A pod without a node: 204 No Content, i.e. an empty string, not an error.
    resp = core.read_namespaced_pod_log("nowhere", namespace, _preload_content=False)
    assert (resp.status, resp.data) == (204, b"")
    # An unknown container: 400 BadRequest "container nope is not valid for pod nowhere".
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("nowhere", namespace, container="nope")
    assert exc.value.status == 400
    assert "container nope is not valid" in exc.value.body


def test_local_status_reports_running(kube_cluster):
    if not kube_cluster.local:
        pytest.skip("external cluster (CW_TEST_KUBECONFIG): nothing local to inspect")
    from cw_cli import testcluster as lc

    st = lc.status(kube_cluster.state_dir)
    assert st.running, st
    assert [p.name for p in st.processes][:5] == list(lc.cluster.CONTROL_PLANE)  # no real node here
    assert "watchdog" in [p.name for p in st.processes]
    assert sum(1 for n in st.nodes if n.gpus == "8" and n.ready) >= 2


def test_pod_logs_from_own_file_with_follow(kube_api, kube_cluster, namespace, wait_for, tmp_path):
    """A kwok `Logs` object (name = pod) points a container's log at a CRI-format file of the
    test's own; follow=True streams lines appended later (test cluster only: kwok reads the file)."""
    if not kube_cluster.local:
        pytest.skip("needs kwok on this machine to read the log file")
    import queue
    import threading

    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="streamer"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main", image="busybox:1.36")])))
    log = tmp_path / "main.log"
    log.write_text("2026-01-01T00:00:00.000000000Z stdout F step 1 loss 2.0\n")
    custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
        "metadata": {"name": "streamer", "namespace": namespace},
        "spec": {"logs": [{"containers": ["main"], "logsFile": str(log), "follow": True}]},
    })
    wait_for(lambda: core.read_namespaced_pod_status("streamer", namespace).status.phase == "Running",
             30, what="pod running")
    wait_for(lambda: "step 1 loss 2.0" in core.read_namespaced_pod_log("streamer", namespace), 30,
             what="own log file served")

    # A follow stream holds its connection open: use a client of its own, a read timeout, and
    # close it at the end (a shared pool would block on that connection later).
    from kubernetes import config as kconfig

    stream_client = kconfig.new_client_from_config(
        config_file=str(kube_cluster.kubeconfig), context=kube_cluster.context)
    lines: queue.Queue = queue.Queue()
    resp = client.CoreV1Api(stream_client).read_namespaced_pod_log(
        "streamer", namespace, follow=True, _preload_content=False, _request_timeout=(5, 10))

    def reader():
        try:
            for chunk in resp.stream(64):
                lines.put(chunk.decode())
        except Exception:  # noqa: BLE001 - read timeout or closed connection ends the stream
            pass

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        time.sleep(0.5)
        with log.open("a") as fh:
            fh.write("2026-01-01T00:00:01.000000000Z stdout F step 2 loss 1.5\n")
        seen, deadline = "", time.monotonic() + 15
        while "step 2 loss 1.5" not in seen and time.monotonic() < deadline:
            try:
                seen += lines.get(timeout=0.5)
            except queue.Empty:
                pass
    finally:
        if hasattr(resp, "shutdown"):
            resp.shutdown()  # urllib3 >= 2.3: unblocks the reader thread
        resp.close()
        t.join(15)
        stream_client.close()
    assert "step 1 loss 2.0" in seen and "step 2 loss 1.5" in seen, seen
