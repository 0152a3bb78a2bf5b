"""`cw export RUN` against a real API server: the export Job takes over the run's image, checkpoint
claim, HF cache and Hub token, runs cw_export.py on the run's output folder, owns its ConfigMap,
and is followed like a run (`--wait`, `cw logs --role export`). What cannot be exported is
refused before anything is created, with the documented exit code."""

from __future__ import annotations

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, create_bound_volumes, run_cw, write_config

KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "hf_cache_volume": "hf-cache", "output_dir": "outputs/sft",
        "secrets": {"HF_TOKEN": "hf-token"}, "gpu": 1}  # fmt: skip


def _secret(api: client.ApiClient, namespace: str) -> None:
    client.CoreV1Api(api).create_namespaced_secret(
        namespace, {"metadata": {"name": "hf-token"}, "stringData": {"HF_TOKEN": "x"}}
    )


def test_a_finished_run_is_exported_merged_by_a_job_that_takes_over_its_volume(kube_api, namespace, cw_env, tmp_path):
    create_bound_volumes(kube_api, namespace, "ckpts", "hf-cache")
    _secret(kube_api, namespace)
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "ex", "-n", namespace, "--wait",
                      timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    done = run_cw(cw_env, "export", "ex", "--merge", "--push-to-hub", "my-org/ex-model", "--private", "--wait",
                  "-n", namespace, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "export ex-export-final-merged started: /checkpoints/ex/outputs/sft/exported/" in done.stderr
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    job = batch.read_namespaced_job("ex-export-final-merged", namespace)
    assert job.status.succeeded == 1
    pod = job.spec.template.spec
    trainer = batch.read_namespaced_job("ex-trainer", namespace).spec.template.spec.containers[0]
    export = pod.containers[0]
    assert export.image == trainer.image
    assert export.command == ["python3", "/etc/cw/cw_export.py", "--run-dir", "/checkpoints/ex/outputs/sft",
                              "--checkpoint", "final", "--merge", "--push-to-hub", "my-org/ex-model", "--private"]  # fmt: skip
    claims = {v.name: v.persistent_volume_claim.claim_name for v in pod.volumes if v.persistent_volume_claim}
    assert claims == {"checkpoints": "ckpts", "hf-cache": "hf-cache"}
    env = {e.name: e for e in export.env}
    assert env["HF_TOKEN"].value_from.secret_key_ref.name == "hf-token" and env["HF_HOME"].value == "/hf-cache"
    assert job.metadata.labels["cw-cli.dev/run"] == "ex" and job.metadata.labels["app.kubernetes.io/component"] == "export"
    config_map = core.read_namespaced_config_map("ex-export-final-merged", namespace)
    assert "def merge(" in config_map.data["cw_export.py"]
    assert config_map.metadata.owner_references[0].uid == job.metadata.uid  # the Job's TTL removes both
    logs = run_cw(cw_env, "logs", "ex", "--role", "export", "-n", namespace)
    assert logs.returncode == 0, logs.stderr

    again = run_cw(cw_env, "export", "ex", "--merge", "-n", namespace)
    assert again.returncode == 5 and "exists already" in again.stderr


def test_what_cannot_be_exported_is_refused_before_anything_is_created(kube_api, namespace, cw_env, tmp_path):
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, SFT_CONFIG)), "--name", "scratch", "-n", namespace)
    assert launched.returncode == 0, launched.stderr
    cases = [
        (["export", "scratch"], 2, "kept its outputs on no volume"),
        (["export", "nosuch"], 4, "has no trainer here"),
        (["export", "scratch", "--checkpoint", "x"], 2, "expected final, latest or a step number"),
        (["export", "scratch", "--push-to-hub", "bad repo"], 2, "expected a Hub repository"),
        (["export", "BAD"], 2, "is not a run name"),
    ]
    for args, code, message in cases:
        result = run_cw(cw_env, *args, "-n", namespace)
        assert result.returncode == code and message in result.stderr, (args, result.stderr)
    jobs = [j.metadata.name for j in client.BatchV1Api(kube_api).list_namespaced_job(namespace).items]
    assert jobs == ["scratch-trainer"]


def test_final_is_refused_while_the_run_trains_and_latest_is_offered(kube_api, namespace, cw_env, tmp_path):
    create_bound_volumes(kube_api, namespace, "ckpts", "hf-cache")
    _secret(kube_api, namespace)
    slow = {**KEPT, "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "300s"}}
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, slow)), "--name", "busy", "-n", namespace)
    assert launched.returncode == 0, launched.stderr
    refused = run_cw(cw_env, "export", "busy", "-n", namespace)
    assert refused.returncode == 2 and "it has no final model yet" in refused.stderr
    assert "cw export busy --checkpoint latest" in refused.stderr
    latest = run_cw(cw_env, "export", "busy", "--checkpoint", "latest", "-n", namespace)
    assert latest.returncode == 0, latest.stderr
    assert client.BatchV1Api(kube_api).read_namespaced_job("busy-export-latest", namespace)
