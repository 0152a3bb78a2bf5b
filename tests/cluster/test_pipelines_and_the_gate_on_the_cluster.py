"""Pipelines, runs that start from runs and the export gate against a real API server.

KWOK runs no containers, so the pipeline keeper's pod never executes here: as the server keeper's
tests do, each test runs the exact ``cw_pipeline.py`` and ``pipeline.json`` of the pipeline's
ConfigMap as a local process, with a real token of the keeper's ServiceAccount (TokenRequest), so
the Role cw created is what allows, or refuses, each of its calls. A run's folder on the volume
is a local folder the reader pod's exec is routed to (as in test_artifacts_on_the_cluster); the
scores in it are written by the test (the evaluation's own files, in the shared format).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes import client
from test_artifacts_on_the_cluster import _route_exec
from test_cw_end_to_end import SFT_CONFIG, completed_job, create_bound_volumes, run_cw, write_config

from cw_cli.render.scores import GATE_ANNOTATION

KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "gpu": 1}  # 1 GPU: fits beside what earlier tests on the shared cluster still hold
DPO = {**KEPT, "model_name_or_path": "run:sft", "dataset_name": "trl-lib/ultrafeedback_binarized"}
SLOW = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "30s"}}
FAILING = {"annotations": {"kwok.cw/exit-code": "1"}, "backoff_limit": 0}


def _pipeline(tmp_path: Path, name: str, sft: dict) -> Path:
    write_config(tmp_path, sft, "sft.yaml")
    write_config(tmp_path, DPO, "dpo.yaml")
    write_config(tmp_path, {**KEPT, "model_name_or_path": "run:dpo"}, "eval.yaml")  # stands in for the evaluation stage
    stages = {"sft": {"framework": "trl", "type": "sft", "config": "sft.yaml"},
              "dpo": {"framework": "trl", "type": "dpo", "config": "dpo.yaml"},  # waits for sft through run:sft
              "eval": {"framework": "trl", "type": "sft", "config": "eval.yaml", "after": ["dpo"]}}  # fmt: skip
    return write_config(tmp_path, {"name": name, "stages": stages}, f"{name}.yaml")


def _keeper(api: client.ApiClient, namespace: str, pipeline: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """cw_pipeline.py and pipeline.json as the ConfigMap ships them, and the keeper container's
    environment with a real token of its ServiceAccount."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    data = core.read_namespaced_config_map(f"{pipeline}-pipeline", namespace).data
    (tmp_path / "cw_pipeline.py").write_text(data["cw_pipeline.py"])
    (tmp_path / "cw_pod_api.py").write_text(data["cw_pod_api.py"])
    (tmp_path / "pipeline.json").write_text(data["pipeline.json"])
    template = batch.read_namespaced_job(f"{pipeline}-pipeline", namespace).spec.template.spec
    token = core.create_namespaced_service_account_token(template.service_account_name, namespace,
                                                         {"spec": {"expirationSeconds": 600}}).status.token  # fmt: skip
    (tmp_path / "token").write_text(token)
    env = {**{e.name: e.value for e in template.containers[0].env}, "CW_PIPELINE_FILE": str(tmp_path / "pipeline.json"),
           "CW_KEEPER_API": api.configuration.host, "CW_KEEPER_CA_FILE": api.configuration.ssl_ca_cert,
           "CW_KEEPER_TOKEN_FILE": str(tmp_path / "token"), "CW_KEEPER_NAMESPACE": namespace, "CW_PIPELINE_POLL_S": "1",
           "PATH": os.environ.get("PATH", "")}  # fmt: skip
    return tmp_path / "cw_pipeline.py", env


def _once(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), "--once"], env=env, capture_output=True, text=True, timeout=60)


def _jobs(api: client.ApiClient, namespace: str) -> set[str]:
    return {job.metadata.name for job in client.BatchV1Api(api).list_namespaced_job(namespace).items}


def _states(api: client.ApiClient, namespace: str, pipeline: str) -> dict[str, str]:
    annotations = client.CoreV1Api(api).read_namespaced_config_map(f"{pipeline}-pipeline", namespace).metadata.annotations
    return json.loads((annotations or {}).get("cw-cli.dev/pipeline-stages", "{}"))


def test_a_pipelines_dpo_stage_is_created_only_after_its_sft_stage_succeeded(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): they let it create the keeper's Role.
    cw_env = as_documented_roles("read-only", "launch")
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(cw_env, "pipeline", str(_pipeline(tmp_path, "rlhf", {**KEPT, **SLOW})), "-n", namespace, timeout=180)
    assert launched.returncode == 0, launched.stderr
    assert "stage dpo: run rlhf-dpo created in the cluster once sft succeeded" in launched.stderr
    assert _jobs(kube_api, namespace) == {"rlhf-sft-trainer", "rlhf-pipeline"}  # nothing of dpo or eval yet
    script, env = _keeper(kube_api, namespace, "rlhf", tmp_path)

    waiting = _once(script, env)  # sft still runs: the keeper creates nothing
    assert waiting.returncode == 3, waiting.stderr
    assert "rlhf-dpo-trainer" not in _jobs(kube_api, namespace)
    assert _states(kube_api, namespace, "rlhf") == {"sft": "Running", "dpo": "Waiting", "eval": "Waiting"}
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert listed.returncode == 0 and "rlhf/sft" in listed.stdout, listed.stderr
    assert "pipeline rlhf: not created yet: dpo waiting, eval waiting" in listed.stderr

    sft = completed_job(kube_api, namespace, "rlhf-sft-trainer", timeout=240)
    finished = max(c.last_transition_time for c in sft.status.conditions if c.type == "Complete")
    created = _once(script, env)
    assert created.returncode == 3 and "creating run rlhf-dpo" in created.stderr, created.stderr
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    dpo = batch.read_namespaced_job("rlhf-dpo-trainer", namespace)
    assert dpo.metadata.creation_timestamp >= finished.replace(microsecond=0)
    assert dpo.metadata.labels["cw-cli.dev/pipeline"] == "rlhf" and dpo.metadata.labels["cw-cli.dev/pipeline-stage"] == "dpo"
    assert not dpo.spec.suspend  # created suspended, released once its ConfigMap was there
    config_map = core.read_namespaced_config_map("rlhf-dpo-config", namespace)
    assert yaml.safe_load(config_map.data["config.yaml"])["model_name_or_path"] == "/checkpoints/rlhf-sft"
    assert config_map.metadata.owner_references[0].uid == dpo.metadata.uid  # `cw delete rlhf-dpo` removes the stage
    assert "rlhf-eval-trainer" not in _jobs(kube_api, namespace)
    status = run_cw(cw_env, "status", "rlhf-dpo", "-n", namespace)
    assert status.returncode == 0, status.stderr  # an ordinary run

    keeper = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert keeper.returncode == 0, keeper.stderr  # dpo succeeds, eval is created and succeeds: all decided
    assert _states(kube_api, namespace, "rlhf") == {"sft": "Succeeded", "dpo": "Succeeded", "eval": "Succeeded"}
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert sorted(line.split()[1] for line in listed.stdout.splitlines()[1:]) == ["rlhf/dpo", "rlhf/eval", "rlhf/sft"], listed.stdout


def test_a_failed_stage_stops_the_rest_and_the_keeper_may_do_nothing_else(kube_api, namespace, as_documented_roles, tmp_path):
    cw_env = as_documented_roles("read-only", "launch")
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(cw_env, "pipeline", str(_pipeline(tmp_path, "bad", {**KEPT, **FAILING})), "-n", namespace, timeout=180)
    assert launched.returncode == 0, launched.stderr
    completed_job(kube_api, namespace, "bad-sft-trainer", timeout=240, condition="Failed")
    script, env = _keeper(kube_api, namespace, "bad", tmp_path)
    done = _once(script, env)
    assert done.returncode == 0 and "stage dpo: skipped" in done.stderr, done.stderr
    assert _states(kube_api, namespace, "bad") == {"sft": "Failed", "dpo": "Skipped", "eval": "Skipped"}
    assert _jobs(kube_api, namespace) == {"bad-sft-trainer", "bad-pipeline"}
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert "pipeline bad: not created yet: dpo skipped, eval skipped" in listed.stderr, listed.stderr
    # The keeper's token reads the stages' owners and nothing else: no Secret, no other Job.
    probe = [sys.executable, "-c", "import sys, json; sys.path.insert(0, sys.argv[1]); import cw_pipeline as k; "
             "api = k.Api(__import__('os').environ); print(json.dumps([api.call('GET', p) is None for p in sys.argv[2:]]))",
             str(script.parent), "/api/v1/namespaces/{ns}/secrets", "/apis/batch/v1/namespaces/{ns}/jobs/other"]  # fmt: skip
    refused = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=60)
    assert "403" in refused.stderr, refused.stderr


def test_bad_pipelines_and_run_references_are_refused_before_anything_is_created(kube_api, namespace, cw_env, tmp_path):
    create_bound_volumes(kube_api, namespace, "ckpts", "other")
    busy = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, {**KEPT, **{"annotations": {
        "pod-complete.stage.kwok.x-k8s.io/delay": "300s"}}}, "busy.yaml")), "--name", "busy", "-n", namespace)  # fmt: skip
    assert busy.returncode == 0, busy.stderr
    done = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, KEPT, "done.yaml")), "--name", "done", "-n", namespace, "--wait",
                  timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    cycle = write_config(tmp_path, {"stages": {"a": {"framework": "trl", "type": "sft", "config": "x.yaml", "after": ["b"]},
                                               "b": {"framework": "trl", "type": "sft", "config": "x.yaml", "after": ["a"]}}},
                         "cycle.yaml")  # fmt: skip
    missing = write_config(tmp_path, {"stages": {"a": {"framework": "trl", "type": "sft", "config": "x.yaml", "after": ["z"]}}},
                           "missing.yaml")  # fmt: skip
    cases = [
        (["pipeline", str(cycle)], "the stages wait for each other in a cycle: a -> b -> a"),
        (["pipeline", str(missing)], "stage a: after: 'z' is no stage of the file"),
        (["trl", "dpo", str(write_config(tmp_path, {**DPO, "model_name_or_path": "run:nosuch"}, "d1.yaml"))],
         f"model_name_or_path: run:nosuch: no run 'nosuch' in namespace {namespace}"),
        (["trl", "dpo", str(write_config(tmp_path, {**DPO, "model_name_or_path": "run:busy"}, "d2.yaml"))],
         "run 'busy' is"),
        (["trl", "dpo", str(write_config(tmp_path, {**DPO, "model_name_or_path": "run:done", "checkpoint_volume": "other"}, "d3.yaml"))],
         "run:done: run 'done' lives on volume ckpts and this run's checkpoint_volume is other"),
        (["trl", "dpo", str(write_config(tmp_path, {**DPO, "model_name_or_path": "run:done@best@x"}, "d4.yaml"))],
         "expected @best, @final, @latest or a step number"),
    ]  # fmt: skip
    for args, message in cases:
        result = run_cw(cw_env, *args, "-n", namespace, timeout=120)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
    assert _jobs(kube_api, namespace) == {"busy-trainer", "done-trainer"}


def _scores(name: str, value: float) -> str:
    step = int(name.removeprefix("checkpoint-")) if name.startswith("checkpoint-") else None
    return json.dumps({"checkpoint": name, "step": step, "model": f"/checkpoints/gated/{name}", "harness": "lm-eval",
                       "metric": "gsm8k/exact_match", "higher_is_better": True, "scores": {"gsm8k/exact_match": value},
                       "finished_at": "2026-11-27T15:00:00Z"})  # fmt: skip


def test_the_export_gate_refuses_a_checkpoint_made_worse_and_best_and_force_pass(kube_api, namespace, cw_env, tmp_path):
    create_bound_volumes(kube_api, namespace, "ckpts")
    gated = {**KEPT, "gate": {"metric": "gsm8k/exact_match", "max_drop": 0.02}}
    launched = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, gated)), "--name", "gated", "-n", namespace, "--wait",
                      timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    owner = client.BatchV1Api(kube_api).read_namespaced_job("gated-trainer", namespace)
    assert json.loads(owner.metadata.annotations[GATE_ANNOTATION]) == {"metric": "gsm8k/exact_match", "max_drop": 0.02,
                                                                       "higher_is_better": True}  # fmt: skip
    # checkpoint-20's weights were made worse on purpose: its scores file (written here) shows the drop.
    run_dir = tmp_path / "volume" / "gated"
    for name, value in (("checkpoint-10", 0.52), ("checkpoint-20", 0.31)):
        (run_dir / name / "cw-eval").mkdir(parents=True)
        (run_dir / name / "model.safetensors").write_bytes(b"\0" * 100)
        (run_dir / name / "trainer_state.json").write_text(json.dumps({"global_step": int(name[11:])}))
        (run_dir / name / "cw-eval" / "scores.json").write_text(_scores(name, value))
    (run_dir / "cw-eval" / "base").mkdir(parents=True)
    (run_dir / "cw-eval" / "base" / "scores.json").write_text(_scores("base", 0.53))
    _route_exec(kube_api, namespace, "gated-reader", tmp_path / "volume")

    refused = run_cw(cw_env, "export", "gated", "--checkpoint", "20", "-n", namespace, timeout=180)
    assert refused.returncode == 9, refused.stderr
    assert ("checkpoint-20 scores gsm8k/exact_match 0.31, worse than the base model's 0.53 by 0.22: "
            "more than the gate's max_drop 0.02") in refused.stderr and "--force" in refused.stderr  # fmt: skip
    assert "gated-export-20" not in _jobs(kube_api, namespace)
    best = run_cw(cw_env, "export", "gated", "--checkpoint", "best", "-n", namespace, timeout=180)
    assert best.returncode == 0 and "gated-export-10" in best.stderr, best.stderr  # 0.52: within 0.02 of the base
    forced = run_cw(cw_env, "export", "gated", "--checkpoint", "20", "--force", "-n", namespace, timeout=180)
    assert forced.returncode == 0, forced.stderr
    assert {"gated-export-10", "gated-export-20"} <= _jobs(kube_api, namespace)
    downloaded = run_cw(cw_env, "download", "gated", str(tmp_path / "best"), "--checkpoint", "best", "-n", namespace, timeout=180)
    assert downloaded.returncode == 0, downloaded.stderr
    assert json.loads((tmp_path / "best" / "cw-eval" / "scores.json").read_text())["step"] == 10
    # A run that starts from this one's best checkpoint gets its path on the shared volume.
    dpo = write_config(tmp_path, {**DPO, "model_name_or_path": "run:gated@best"}, "dpo-from-gated.yaml")
    started = run_cw(cw_env, "trl", "dpo", str(dpo), "--name", "from-gated", "-n", namespace, timeout=180)
    assert started.returncode == 0, started.stderr
    mounted = client.CoreV1Api(kube_api).read_namespaced_config_map("from-gated-config", namespace).data["config.yaml"]
    assert yaml.safe_load(mounted)["model_name_or_path"] == "/checkpoints/gated/checkpoint-10"
