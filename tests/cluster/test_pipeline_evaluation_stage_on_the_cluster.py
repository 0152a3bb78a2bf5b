"""A pipeline's evaluation stage (`evaluate: dpo`) against a real API server: the keeper skips it
when DPO fails. (That it creates the evaluation only after DPO succeeded, and that the evaluation
scores the DPO model, is proven in real pods: test_the_real_node_trains_and_leaves_nothing.)

As in test_pipelines_and_the_gate_on_the_cluster, the keeper's exact ``cw_pipeline.py`` and
``pipeline.json`` from its ConfigMap run as a local process with a real token of its
ServiceAccount (KWOK runs no containers).
"""

from __future__ import annotations

from pathlib import Path

from test_cw_end_to_end import completed_job, create_bound_volumes, run_cw, write_config
from test_pipelines_and_the_gate_on_the_cluster import DPO, FAILING, KEPT, _jobs, _keeper, _once, _states


def _pipeline(tmp_path: Path, name: str, dpo: dict) -> Path:
    write_config(tmp_path, KEPT, "sft.yaml")
    write_config(tmp_path, dpo, "dpo.yaml")
    stages = {"sft": {"framework": "trl", "type": "sft", "config": "sft.yaml"},
              "dpo": {"framework": "trl", "type": "dpo", "config": "dpo.yaml"},  # waits for sft through run:sft
              "eval": {"evaluate": "dpo", "tasks": ["hellaswag"], "gpu": 0}}  # fmt: skip
    return write_config(tmp_path, {"name": name, "stages": stages}, f"{name}.yaml")


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
