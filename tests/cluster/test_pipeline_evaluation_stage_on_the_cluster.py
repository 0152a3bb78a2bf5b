"""A pipeline's evaluation stage (`evaluate: dpo`) against a real API server: the keeper creates
the evaluation Job `cw eval RUN --checkpoint final` would create only after the DPO stage's Job
succeeded, with the Role cw gave it, and skips it when DPO fails.

As in test_pipelines_and_the_gate_on_the_cluster, the keeper's exact ``cw_pipeline.py`` and
``pipeline.json`` from its ConfigMap run as a local process with a real token of its
ServiceAccount (KWOK runs no containers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kubernetes import client
from test_cw_end_to_end import completed_job, create_bound_volumes, run_cw, write_config
from test_pipelines_and_the_gate_on_the_cluster import DPO, FAILING, KEPT, SLOW, _jobs, _keeper, _once, _states


def _pipeline(tmp_path: Path, name: str, dpo: dict) -> Path:
    write_config(tmp_path, KEPT, "sft.yaml")
    write_config(tmp_path, dpo, "dpo.yaml")
    stages = {"sft": {"framework": "trl", "type": "sft", "config": "sft.yaml"},
              "dpo": {"framework": "trl", "type": "dpo", "config": "dpo.yaml"},  # waits for sft through run:sft
              "eval": {"evaluate": "dpo", "tasks": ["hellaswag"], "gpu": 0}}  # fmt: skip
    return write_config(tmp_path, {"name": name, "stages": stages}, f"{name}.yaml")


def test_the_evaluation_stage_is_created_only_after_the_dpo_stage_succeeded(kube_api, namespace, as_documented_roles, tmp_path):
    cw_env = as_documented_roles("read-only", "launch")
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(cw_env, "pipeline", str(_pipeline(tmp_path, "evp", {**DPO, **SLOW})), "-n", namespace, timeout=180)
    assert launched.returncode == 0, launched.stderr
    assert "stage eval: evaluation evp-dpo-eval-final created in the cluster once dpo succeeded" in launched.stderr
    script, env = _keeper(kube_api, namespace, "evp", tmp_path)
    completed_job(kube_api, namespace, "evp-sft-trainer", timeout=240)
    created = _once(script, env)  # sft succeeded: dpo is created, the evaluation waits for it
    assert created.returncode == 3 and "creating run evp-dpo" in created.stderr, created.stderr
    waiting = _once(script, env)
    assert waiting.returncode == 3, waiting.stderr
    assert "evp-dpo-eval-final" not in _jobs(kube_api, namespace)
    assert _states(kube_api, namespace, "evp") == {"sft": "Succeeded", "dpo": "Running", "eval": "Waiting"}
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert "pipeline evp: not created yet: eval waiting" in listed.stderr, listed.stderr

    dpo = completed_job(kube_api, namespace, "evp-dpo-trainer", timeout=240)
    finished = max(c.last_transition_time for c in dpo.status.conditions if c.type == "Complete")
    evaluated = _once(script, env)
    assert "creating run evp-dpo-eval-final" in evaluated.stderr, evaluated.stderr
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    job = batch.read_namespaced_job("evp-dpo-eval-final", namespace)
    assert job.metadata.creation_timestamp >= finished.replace(microsecond=0)
    assert not job.spec.suspend  # created suspended, released once its ConfigMap was there
    command = job.spec.template.spec.containers[0].command
    assert command[command.index("--model") + 1] == "/checkpoints/evp-dpo" and command[-2:] == ["--checkpoint", "final"]
    assert job.spec.template.spec.volumes[1].persistent_volume_claim.claim_name == "ckpts"
    config_map = core.read_namespaced_config_map("evp-dpo-eval-final", namespace)
    assert json.loads(config_map.data["cw-eval.json"])["tasks"] == ["hellaswag"] and "cw_eval.py" in config_map.data
    assert config_map.metadata.owner_references[0].uid == job.metadata.uid  # the Job's TTL removes both

    keeper = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert keeper.returncode == 0, keeper.stderr  # the evaluation's pod ends (KWOK): every stage decided
    assert _states(kube_api, namespace, "evp") == {"sft": "Succeeded", "dpo": "Succeeded", "eval": "Succeeded"}
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert listed.returncode == 0 and "pipeline evp: evaluations: eval succeeded" in listed.stderr, (listed.stdout, listed.stderr)
    assert sorted(line.split()[1] for line in listed.stdout.splitlines()[1:]) == ["evp/dpo", "evp/sft"], listed.stdout


def test_the_evaluation_stage_is_skipped_when_the_dpo_stage_fails(kube_api, namespace, as_documented_roles, tmp_path):
    cw_env = as_documented_roles("read-only", "launch")
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(cw_env, "pipeline", str(_pipeline(tmp_path, "evbad", {**DPO, **FAILING})), "-n", namespace, timeout=180)
    assert launched.returncode == 0, launched.stderr
    script, env = _keeper(kube_api, namespace, "evbad", tmp_path)
    completed_job(kube_api, namespace, "evbad-sft-trainer", timeout=240)
    created = _once(script, env)
    assert created.returncode == 3 and "creating run evbad-dpo" in created.stderr, created.stderr
    completed_job(kube_api, namespace, "evbad-dpo-trainer", timeout=240, condition="Failed")
    done = _once(script, env)
    assert done.returncode == 0 and "stage eval: skipped" in done.stderr, done.stderr
    assert _states(kube_api, namespace, "evbad") == {"sft": "Succeeded", "dpo": "Failed", "eval": "Skipped"}
    assert "evbad-dpo-eval-final" not in _jobs(kube_api, namespace)
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert "pipeline evbad: not created yet: eval skipped" in listed.stderr, listed.stderr
