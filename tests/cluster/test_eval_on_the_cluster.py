"""`cw eval RUN` against a real API server, as a user bound to the shipped Roles: a run launched
with an `eval:` block carries its evaluation settings in its ConfigMap; `cw eval` of a checkpoint
and of the base model each create one evaluation Job (the trainer's image and checkpoint claim, the
exact cw_eval.py command, its ConfigMap owned by the Job, component eval); bad input (an unknown
task, a metric the task does not report, a bad --checkpoint, a run without eval: and no --tasks)
is refused with exit 2 before anything is created."""

from __future__ import annotations

import json

from kubernetes import client
from test_artifacts_on_the_cluster import _route_exec
from test_cw_end_to_end import SFT_CONFIG, create_bound_volumes, run_cw, write_config
from test_export_on_the_cluster import _folder

EVAL = {"tasks": ["hellaswag", "arc_easy"], "metric": "hellaswag/acc_norm", "limit": 20}
KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "output_dir": "outputs/sft", "gpu": 1, "eval": EVAL}


def _eval_jobs(api: client.ApiClient, namespace: str) -> list[str]:
    return sorted(j.metadata.name for j in client.BatchV1Api(api).list_namespaced_job(namespace).items if "-eval-" in j.metadata.name)


def test_cw_eval_creates_one_evaluation_job_per_model_from_the_runs_settings(kube_api, namespace, as_documented_roles, tmp_path):
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "ev", "-n", namespace, timeout=180)
    assert launched.returncode == 0, launched.stderr
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
    settings = json.loads(core.read_namespaced_config_map("ev-config", namespace).data["cw-eval.json"])
    assert (settings["tasks"], settings["backend"], settings["gpu"], settings["limit"]) == (["hellaswag", "arc_easy"], "vllm", 1, 20)
    _folder(tmp_path / "volume", "ev", steps=(5,))
    _route_exec(kube_api, namespace, "ev-reader", tmp_path / "volume")

    done = run_cw(cw_env, "eval", "ev", "--checkpoint", "5", "-n", namespace, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "scores to /checkpoints/ev/outputs/sft/checkpoint-5/cw-eval/scores.json" in done.stderr
    job = batch.read_namespaced_job("ev-eval-5", namespace)
    pod = job.spec.template.spec
    trainer = batch.read_namespaced_job("ev-trainer", namespace).spec.template.spec.containers[0]
    container = pod.containers[0]
    assert container.image == trainer.image and container.name == "eval"
    assert container.command == ["python3", "/etc/cw/cw_pip.py", "lm_eval==0.4.13", "--",  # installed where the image lacks it
                                 "python3", "/etc/cw/cw_eval.py", "--spec", "/etc/cw/cw-eval.json",
                                 "--model", "/checkpoints/ev/outputs/sft/checkpoint-5",
                                 "--out", "/checkpoints/ev/outputs/sft/checkpoint-5/cw-eval",
                                 "--checkpoint", "checkpoint-5", "--step", "5"]  # fmt: skip
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    claims = {v.name: v.persistent_volume_claim.claim_name for v in pod.volumes if v.persistent_volume_claim}
    assert claims == {"checkpoints": "ckpts"}
    assert job.metadata.labels["cw-cli.dev/run"] == "ev" and job.metadata.labels["app.kubernetes.io/component"] == "eval"
    config_map = core.read_namespaced_config_map("ev-eval-5", namespace)
    assert json.loads(config_map.data["cw-eval.json"]) == settings and "def scores_of(" in config_map.data["cw_eval.py"]
    assert config_map.metadata.owner_references[0].uid == job.metadata.uid  # the Job's TTL removes both

    base = run_cw(cw_env, "eval", "ev", "--checkpoint", "base", "--gpu", "0", "-n", namespace, timeout=180)
    assert base.returncode == 0, base.stderr
    base_pod = batch.read_namespaced_job("ev-eval-base", namespace).spec.template.spec
    command = base_pod.containers[0].command
    assert command[command.index("--model") + 1] == "Qwen/Qwen2.5-0.5B"
    assert command[command.index("--out") + 1] == "/checkpoints/ev/outputs/sft/cw-eval/base"
    assert json.loads(core.read_namespaced_config_map("ev-eval-base", namespace).data["cw-eval.json"])["backend"] == "hf"

    again = run_cw(cw_env, "eval", "ev", "--checkpoint", "5", "-n", namespace)
    assert again.returncode == 5 and "exists already" in again.stderr
    assert _eval_jobs(kube_api, namespace) == ["ev-eval-5", "ev-eval-base"]


def test_bad_evaluation_input_is_refused_before_anything_is_created(kube_api, namespace, as_documented_roles, tmp_path):
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    create_bound_volumes(kube_api, namespace, "ckpts")
    plain = {k: v for k, v in KEPT.items() if k != "eval"}
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, plain)), "--name", "noev", "-n", namespace, timeout=180)
    assert launched.returncode == 0, launched.stderr
    bad_config = write_config(tmp_path, {**KEPT, "eval": {**EVAL, "tasks": ["hellaswg"]}}, name="bad.yaml")
    refused = run_cw(launcher, "trl", "sft", str(bad_config), "--name", "bad", "-n", namespace)
    assert refused.returncode == 2 and "`eval.tasks`: 'hellaswg' is no lm-eval" in refused.stderr
    cases = [
        (["eval", "noev"], "launched without an eval: block"),
        (["eval", "noev", "--tasks", "hellaswg"], "--tasks: 'hellaswg' is no lm-eval"),
        (["eval", "noev", "--tasks", "hellaswag", "--metric", "hellaswag/exact_match"], "does not report 'hellaswag/exact_match'"),
        (["eval", "noev", "--checkpoint", "x"], "expected final, latest, best, base or a step number"),
    ]
    for args, message in cases:
        result = run_cw(cw_env, *args, "-n", namespace)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
    assert _eval_jobs(kube_api, namespace) == []
    assert client.BatchV1Api(kube_api).list_namespaced_job(namespace, label_selector="cw-cli.dev/run=bad").items == []

    # A run launched without eval: is scored on demand by vf-eval: an environment from the hub, installed in the pod.
    both = run_cw(cw_env, "eval", "noev", "--tasks", "hellaswag", "--environments", "primeintellect/gsm8k", "-n", namespace)
    assert both.returncode == 2 and "--tasks and --environments: name one" in both.stderr, both.stderr
    started = run_cw(cw_env, "eval", "noev", "--checkpoint", "base", "--environments", "primeintellect/gsm8k", "--limit", "10",
                     "--gpu", "0", "-n", namespace, timeout=180)  # fmt: skip
    assert started.returncode == 0, started.stderr
    settings = json.loads(client.CoreV1Api(kube_api).read_namespaced_config_map("noev-eval-base", namespace).data["cw-eval.json"])
    assert (settings["harness"], settings["environments"], settings["num_examples"]) == ("vf-eval", ["primeintellect/gsm8k"], 10)
    assert settings["metric"] == "gsm8k/reward" and settings["install"] and settings["serve_with"] == "transformers"
    assert "cw_vf_eval.py" in client.CoreV1Api(kube_api).read_namespaced_config_map("noev-eval-base", namespace).data
