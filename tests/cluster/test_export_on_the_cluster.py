"""`cw export RUN` against a real API server: the export Job takes over the run's image, checkpoint
claim, HF cache and Hub token, runs cw_export.py on the run's output folder, owns its ConfigMap,
and is followed like a run (`--wait`, `cw logs --role export`). What cannot be exported is
refused before anything is created, with the documented exit code: the run's folder is read first
(a reader pod, whose exec kwok routes to a local folder standing in for the volume)."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes import client
from test_artifacts_on_the_cluster import _route_exec
from test_cw_end_to_end import SFT_CONFIG, completed_job, create_bound_volumes, run_cw, write_config

from cw_cli.render.export import ExportChoice, export_name

KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "hf_cache_volume": "hf-cache", "output_dir": "outputs/sft",
        "secrets": {"HF_TOKEN": "hf-token"}, "gpu": 1}  # fmt: skip


def _secret(api: client.ApiClient, namespace: str) -> None:
    client.CoreV1Api(api).create_namespaced_secret(
        namespace, {"metadata": {"name": "hf-token"}, "stringData": {"HF_TOKEN": "x"}}
    )


def _folder(volume: Path, run: str, *, adapter: bool = False, steps: tuple[int, ...] = (), final: bool = True) -> None:
    """What the trainer left in /checkpoints/RUN/outputs/sft (the reader pod lists it before the Job)."""
    run_dir = volume / run / "outputs" / "sft"
    run_dir.mkdir(parents=True, exist_ok=True)
    for step in steps:
        (run_dir / f"checkpoint-{step}").mkdir(exist_ok=True)
        (run_dir / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"\0" * 100)
        (run_dir / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if final:
        (run_dir / ("adapter_model.safetensors" if adapter else "model.safetensors")).write_bytes(b"\0" * 100)
        if adapter:
            (run_dir / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "tiny", "r": 8}))


def test_a_finished_run_is_exported_merged_by_a_job_that_takes_over_its_volume(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    create_bound_volumes(kube_api, namespace, "ckpts", "hf-cache")
    _secret(kube_api, namespace)
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "ex", "-n", namespace, "--wait",
                      timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    _folder(tmp_path / "volume", "ex", adapter=True)
    _route_exec(kube_api, namespace, "ex-reader", tmp_path / "volume")
    done = run_cw(cw_env, "export", "ex", "--merge", "--push-to-hub", "my-org/ex-model", "--private", "--wait",
                  "-n", namespace, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    name = export_name("ex", ExportChoice(merge=True, push_to_hub="my-org/ex-model"))
    assert name.startswith("ex-export-final-merged-to-")  # one Job per destination: a plain export may exist already
    assert f"export {name} started: /checkpoints/ex/outputs/sft/exported/" in done.stderr
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    job = completed_job(kube_api, namespace, name)  # --wait ends at SuccessCriteriaMet, one update before the counts
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
    config_map = core.read_namespaced_config_map(name, namespace)
    assert "def merge(" in config_map.data["cw_export.py"]
    assert config_map.metadata.owner_references[0].uid == job.metadata.uid  # the Job's TTL removes both
    logs = run_cw(cw_env, "logs", "ex", "--role", "export", "-n", namespace)
    assert logs.returncode == 0, logs.stderr

    again = run_cw(cw_env, "export", "ex", "--merge", "--push-to-hub", "my-org/ex-model", "-n", namespace)
    assert again.returncode == 5 and "exists already" in again.stderr


def test_what_cannot_be_exported_is_refused_before_anything_is_created(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, SFT_CONFIG)), "--name", "scratch", "-n", namespace)
    assert launched.returncode == 0, launched.stderr
    cases = [
        (["export", "scratch"], 2, "kept its outputs on no volume"),
        (["export", "nosuch"], 4, "run 'nosuch' not found in namespace"),
        (["export", "scratch", "--checkpoint", "x"], 2, "expected final, latest, best or a step number"),
        (["export", "scratch", "--push-to-hub", "bad repo"], 2, "expected a Hub repository"),
        (["export", "scratch", "--push-to-hub", "org/name--x"], 2, "the Hub refuses '--' and '..'"),
        (["export", "scratch", "--to", "s3://Bad/x"], 2, "bucket 'Bad'"),
        (["export", "scratch", "--wait", "--timeout", "-5"], 2, "--timeout -5: expected a positive number"),
        (["export", "BAD"], 2, "is not a run name"),
    ]
    for args, code, message in cases:
        result = run_cw(cw_env, *args, "-n", namespace)
        assert result.returncode == code and message in result.stderr, (args, result.stderr)
    jobs = [j.metadata.name for j in client.BatchV1Api(kube_api).list_namespaced_job(namespace).items]
    assert jobs == ["scratch-trainer"]


def test_final_is_refused_while_the_run_trains_and_latest_is_offered(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    create_bound_volumes(kube_api, namespace, "ckpts", "hf-cache")
    _secret(kube_api, namespace)
    slow = {**KEPT, "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "300s"}}
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, slow)), "--name", "busy", "-n", namespace)
    assert launched.returncode == 0, launched.stderr
    refused = run_cw(cw_env, "export", "busy", "-n", namespace)
    assert refused.returncode == 2 and "it has no final model yet" in refused.stderr
    assert "cw export busy --checkpoint latest" in refused.stderr
    _route_exec(kube_api, namespace, "busy-reader", tmp_path / "volume")
    _folder(tmp_path / "volume", "busy", final=False)
    nothing = run_cw(cw_env, "export", "busy", "--checkpoint", "latest", "-n", namespace, timeout=180)
    assert nothing.returncode == 2 and "holds no complete checkpoint yet" in nothing.stderr, nothing.stderr
    _folder(tmp_path / "volume", "busy", steps=(5,), final=False)
    full = run_cw(cw_env, "export", "busy", "--checkpoint", "latest", "--merge", "-n", namespace, timeout=180)
    assert full.returncode == 2 and "holds a full model, not a LoRA adapter" in full.stderr, full.stderr
    assert [j.metadata.name for j in client.BatchV1Api(kube_api).list_namespaced_job(namespace).items] == ["busy-trainer"]
    latest = run_cw(cw_env, "export", "busy", "--checkpoint", "latest", "-n", namespace, timeout=180)
    assert latest.returncode == 0, latest.stderr
    assert client.BatchV1Api(kube_api).read_namespaced_job("busy-export-latest", namespace)
