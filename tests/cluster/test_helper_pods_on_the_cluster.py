"""The after-training helper pods on the real API server: a namespace that enforces Pod Security
"restricted" admits the reader and the vLLM server cw renders (and refuses a pod without
runAsNonRoot, so the check is on); a reader of a ReadWriteOnce volume goes to the node where a
running pod holds it; a ReadWriteOncePod volume held by a running pod is said in plain words at
once (exit 5), by cw before creating anything and by the scheduler's own words while waiting."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from test_artifacts_on_the_cluster import _route_exec, _volume
from test_cw_end_to_end import SFT_CONFIG, create_bound_volumes, run_cw, write_config

from cw_cli.after_training.helper_pods import reader_placement, wait_running
from cw_cli.client.connection import ClusterTarget, connect
from cw_cli.errors import Conflict
from cw_cli.render.helper_pods import ReaderPlacement, ServedModel, ServeSpec, reader_manifest, server_manifests

KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "output_dir": "outputs/sft", "gpu": 1}


def _enforce_restricted(api: client.ApiClient, namespace: str) -> None:
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})  # fmt: skip


def test_a_restricted_namespace_admits_the_reader_and_the_server(kube_cluster, kube_api, namespace):
    _enforce_restricted(kube_api, namespace)
    core = client.CoreV1Api(kube_api)
    root = {"metadata": {"name": "as-root"}, "spec": {"containers": [{"name": "c", "image": "python:3.12.12-slim-bookworm"}]}}
    with pytest.raises(ApiException) as refused:  # the API server's PodSecurity admission is on
        core.create_namespaced_pod(namespace, root)
    assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body

    core.create_namespaced_pod(namespace, reader_manifest("ex", {"cw-cli.dev/run": "ex"}, "ckpts"))
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pinned = reader_manifest("pinned", {"cw-cli.dev/run": "pinned"}, "ckpts", ReaderPlacement("cw-gpu-0", tolerations))
    core.create_namespaced_pod(namespace, pinned)
    adapter = ServedModel(path="/checkpoints/ex/out", adapter=True, base="Qwen/Qwen2.5-0.5B", lora_rank=16, heads=14,
                          kv_heads=2, max_positions=32768)  # fmt: skip
    kube = _kube(kube_cluster, namespace)  # cw's own client, as cw serve creates them
    for manifest in server_manifests(ServeSpec("ex", {"cw-cli.dev/run": "ex"}, "ckpts", adapter, 600, 2)):
        kube.create(manifest)
    assert core.read_namespaced_pod("ex-serve", namespace).spec.security_context.run_as_user == 2000


def test_artifacts_and_serve_run_in_a_namespace_that_enforces_restricted(kube_api, namespace, cw_env, tmp_path):
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "arts", "-n", namespace,
                      "--wait", timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    _enforce_restricted(kube_api, namespace)  # from now on, every new pod must be restricted
    _volume(tmp_path / "volume")
    _route_exec(kube_api, namespace, "arts-reader", tmp_path / "volume")
    listed = run_cw(cw_env, "artifacts", "arts", "-n", namespace, timeout=180)
    assert listed.returncode == 0, listed.stderr
    served = run_cw(cw_env, "serve", "arts", "--gpu", "0", "--engine", "vllm", "-n", namespace, timeout=180)
    assert served.returncode == 0, served.stderr
    assert client.CoreV1Api(kube_api).read_namespaced_pod("arts-serve", namespace).spec.security_context.run_as_non_root


def _claim(api: client.ApiClient, namespace: str, name: str, mode: str) -> None:
    from cw_cli.testcluster.volumes import volume_manifests

    volume, claim = volume_manifests(namespace, name)
    volume["spec"]["accessModes"] = claim["spec"]["accessModes"] = [mode]
    core = client.CoreV1Api(api)
    core.create_persistent_volume(volume)
    core.create_namespaced_persistent_volume_claim(namespace, claim)


def _holder(api: client.ApiClient, namespace: str, claim: str, wait_for, node: str = "cw-gpu-1") -> None:
    """A running pod (a bare pod stays Running under kwok) that has ``claim`` mounted on ``node``."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, {"metadata": {"name": "holder"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "c", "image": "trainer:1", "volumeMounts": [{"name": "v", "mountPath": "/checkpoints"}]}],
        "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}})  # fmt: skip
    wait_for(lambda: core.read_namespaced_pod("holder", namespace).status.phase == "Running", 60, what="holder Running")


def _kube(kube_cluster, namespace: str):
    return connect(ClusterTarget(context=kube_cluster.context, namespace=namespace, kubeconfig=str(kube_cluster.kubeconfig)))


def test_a_reader_of_a_held_read_write_once_volume_goes_beside_its_holder(kube_cluster, kube_api, namespace, wait_for):
    _claim(kube_api, namespace, "rwo", "ReadWriteOnce")
    kube = _kube(kube_cluster, namespace)
    assert reader_placement(kube, "rwo") == ReaderPlacement()  # nobody holds it: anywhere
    _holder(kube_api, namespace, "rwo", wait_for)
    placement = reader_placement(kube, "rwo")
    assert placement.node == "cw-gpu-1" and placement.tolerations[0]["key"] == "nvidia.com/gpu"
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, reader_manifest("r", {}, "rwo", placement))
    wait_running(kube, "r-reader", "rwo", 60)
    assert core.read_namespaced_pod("r-reader", namespace).spec.node_name == "cw-gpu-1"


def test_a_held_read_write_once_pod_volume_is_said_at_once(kube_cluster, kube_api, namespace, cw_env, tmp_path, wait_for):
    _claim(kube_api, namespace, "ckpts", "ReadWriteOncePod")
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "held", "-n", namespace,
                      "--wait", timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    _holder(kube_api, namespace, "ckpts", wait_for)  # another pod (a second run, a debug pod) has it now
    kube = _kube(kube_cluster, namespace)
    with pytest.raises(Conflict, match="ReadWriteOncePod and pod holder is using it"):
        reader_placement(kube, "ckpts")
    started = time.monotonic()
    refused = run_cw(cw_env, "artifacts", "held", "-n", namespace, timeout=60)
    assert refused.returncode == 5, refused.stderr
    assert "ReadWriteOncePod and pod holder is using it" in refused.stderr and "Traceback" not in refused.stderr
    assert time.monotonic() - started < 30
    # A reader created anyway (as by an older cw): the scheduler's refusal is read and said at once.
    client.CoreV1Api(kube_api).create_namespaced_pod(namespace, reader_manifest("r", {}, "ckpts"))
    started = time.monotonic()
    with pytest.raises(Conflict, match="another pod is using the run's volume ckpts") as held:
        wait_running(kube, "r-reader", "ckpts", 180)
    assert time.monotonic() - started < 30, "said at once, not after the 180 s timeout"
    assert "ReadWriteOncePod" in held.value.message
