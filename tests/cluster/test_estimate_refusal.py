"""The pre-launch memory check against a real API server: a run that clearly cannot fit its GPUs is
refused before anything is created, `--force` launches it, and a run that fits goes through.

The GPU memory comes from the fake nodes' own GPU feature discovery labels
(kubeconfigs/cluster/nodes/gpu-node.yaml: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.memory 81559), read
through one node list; the model's config.json from a Hugging Face cache made in tmp_path (no network).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw, write_config

from cw_cli import api

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"
#: A 32B full fine-tune in bf16 on one GPU: ~16 bytes per parameter of model states, > 500 GB.
TOO_BIG = {
    **SFT_CONFIG, "gpu": 1, "model_name_or_path": "Qwen/Qwen2.5-32B", "model_init_kwargs": {"dtype": "bfloat16"},
    "per_device_train_batch_size": 1, "max_length": 2048,
}  # fmt: skip
#: A 7B LoRA fine-tune on one 80 GB GPU fits.
FITS = {**TOO_BIG, "model_name_or_path": "Qwen/Qwen2.5-7B", "use_peft": True}


@pytest.fixture
def hf_cache(tmp_path) -> Path:
    root = tmp_path / "hf-hub"
    for model in ("Qwen/Qwen2.5-32B", "Qwen/Qwen2.5-7B"):
        snapshot = root / ("models--" + model.replace("/", "--")) / "snapshots" / "abc"
        snapshot.mkdir(parents=True)
        shutil.copy(MODELS / (model.replace("/", "__") + ".json"), snapshot / "config.json")
    return root


@pytest.fixture
def env(cw_env, hf_cache):
    return {**cw_env, "HF_HUB_CACHE": str(hf_cache), "HF_HUB_OFFLINE": "1"}


def everything(api_client: client.ApiClient, namespace: str) -> list[str]:
    """Every object a launch could create in the namespace (what the namespace itself brings left out)."""
    core, batch, apps = client.CoreV1Api(api_client), client.BatchV1Api(api_client), client.AppsV1Api(api_client)
    rbac, net = client.RbacAuthorizationV1Api(api_client), client.NetworkingV1Api(api_client)
    found = [f"Job/{o.metadata.name}" for o in batch.list_namespaced_job(namespace).items]
    found += [f"Pod/{o.metadata.name}" for o in core.list_namespaced_pod(namespace).items]
    found += [f"ConfigMap/{o.metadata.name}" for o in core.list_namespaced_config_map(namespace).items
              if o.metadata.name != "kube-root-ca.crt"]  # fmt: skip
    found += [f"Deployment/{o.metadata.name}" for o in apps.list_namespaced_deployment(namespace).items]
    found += [f"Service/{o.metadata.name}" for o in core.list_namespaced_service(namespace).items]
    found += [f"ServiceAccount/{o.metadata.name}" for o in core.list_namespaced_service_account(namespace).items
              if o.metadata.name != "default"]  # fmt: skip
    found += [f"Role/{o.metadata.name}" for o in rbac.list_namespaced_role(namespace).items]
    found += [f"NetworkPolicy/{o.metadata.name}" for o in net.list_namespaced_network_policy(namespace).items]
    return found


def test_a_run_that_cannot_fit_is_refused_and_creates_nothing_and_force_launches_it(kube_api, namespace, env, tmp_path):
    config = write_config(tmp_path, TOO_BIG)
    refused = run_cw(env, "trl", "sft", str(config), "--name", "too-big", "-n", namespace)
    assert refused.returncode == 2, refused.stderr
    assert "would run out of GPU memory" in refused.stderr and "79.6 GiB per GPU" in refused.stderr  # the labels
    assert "fits with:" in refused.stderr and "--force" in refused.stderr
    assert "run too-big in namespace" not in refused.stderr  # refused before the launch began
    assert everything(kube_api, namespace) == []

    forced = run_cw(env, "trl", "sft", str(config), "--name", "too-big", "-n", namespace, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "--force: launching anyway" in forced.stderr
    job = client.BatchV1Api(kube_api).read_namespaced_job("too-big-trainer", namespace)
    assert job.metadata.labels["cw-cli.dev/run"] == "too-big"


def test_a_run_that_fits_launches_with_its_verdict(kube_api, namespace, env, tmp_path):
    config = write_config(tmp_path, FITS)
    result = run_cw(env, "trl", "sft", str(config), "--name", "fits", "-n", namespace)
    assert result.returncode == 0, result.stderr
    assert "memory estimate: trainer" in result.stderr and "of 79.6 GiB per GPU: fits" in result.stderr
    assert client.BatchV1Api(kube_api).read_namespaced_job("fits-trainer", namespace)


def test_a_server_dry_run_reports_but_does_not_refuse(kube_api, namespace, env, tmp_path):
    result = run_cw(env, "trl", "sft", str(write_config(tmp_path, TOO_BIG)), "--name", "sdr", "-n", namespace,
                    "--server-dry-run")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "does not fit (clearly)" in result.stderr and everything(kube_api, namespace) == []


def test_session_submit_with_the_check(kube_cluster, kube_api, namespace, hf_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
    session = api.Session(context=kube_cluster.context, namespace=namespace, kubeconfig=kube_cluster.kubeconfig)
    planned = session.plan(TOO_BIG, "trl", "sft", name="api-too-big", base_dir=tmp_path)
    with pytest.raises(api.WontFit) as refused:
        session.submit(planned, check_memory=True)
    assert refused.value.estimate.gpu.source == "nodes"
    assert everything(kube_api, namespace) == []
    run = session.submit(planned, check_memory=True, force=True)
    assert run.launch is not None and "Job/api-too-big-trainer" in run.launch.created
    unchecked = session.plan(TOO_BIG, "trl", "sft", name="api-unchecked", base_dir=tmp_path)
    assert session.submit(unchecked).name == "api-unchecked"  # the check is an option of the library
