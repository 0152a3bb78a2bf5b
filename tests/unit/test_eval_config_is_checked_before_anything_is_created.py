"""An `eval:` block is checked when the config is read, before any object exists: an unknown task
name, a metric the task does not report, a user task without its data or with a metric its YAML
does not list are one clear line each naming `eval.<field>`; a good block loads; the shipped task
list is lm-eval's registry; cw_eval.py turns lm-eval's results into the scores.json names."""

from __future__ import annotations

import json

import pytest
from unit_helpers import load, write_config

from cw_cli.errors import ConfigError

BASE = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara"}
USER_TASK = """\
task: my_mc
dataset_path: json
dataset_kwargs: {data_files: {test: data.jsonl}}
output_type: multiple_choice
doc_to_text: "{{q}}"
doc_to_choice: choices
doc_to_target: answer
metric_list: [{metric: acc}]
"""


def _error(tmp_path, block) -> str:
    with pytest.raises(ConfigError) as caught:
        load("trl", "sft", write_config(tmp_path, {**BASE, "eval": block}))
    return "\n".join(caught.value.issues)


def test_an_unknown_task_name_is_refused_with_close_names(tmp_path):
    text = _error(tmp_path, {"tasks": ["hellaswg"], "metric": "hellaswg/acc"})
    assert "`eval.tasks`: 'hellaswg' is no lm-eval 0.4" in text and "did you mean hellaswag" in text


def test_a_metric_the_task_does_not_report_is_refused_naming_what_it_reports(tmp_path):
    text = _error(tmp_path, {"tasks": ["hellaswag"], "metric": "hellaswag/exact_match"})
    assert "`eval.metric`: hellaswag does not report 'hellaswag/exact_match'" in text
    assert "hellaswag/acc_norm" in text
    text = _error(tmp_path, {"tasks": ["gsm8k"], "metric": "gsm8k/exact_match"})
    assert "gsm8k/exact_match,strict-match" in text  # a filtered score needs its filter


def test_a_metric_of_a_task_not_evaluated_is_refused(tmp_path):
    text = _error(tmp_path, {"tasks": ["hellaswag"], "metric": "arc_easy/acc"})
    assert "names task 'arc_easy', which is not in eval.tasks" in text


def test_a_registry_task_and_a_user_task_load(tmp_path):
    (tmp_path / "mine.yaml").write_text(USER_TASK)
    (tmp_path / "data.jsonl").write_text(json.dumps({"q": "a", "choices": ["x", "y"], "answer": 0}) + "\n")
    config = load("trl", "sft", write_config(tmp_path, {**BASE, "eval": {
        "tasks": ["gsm8k", "mine.yaml"], "metric": "my_mc/acc", "limit": 50, "generation": {"temperature": 0}}}))  # fmt: skip
    spec = config.cluster.eval
    assert spec is not None and spec.user_tasks() == ["mine.yaml"] and spec.gen_kwargs() == "temperature=0"
    from cw_cli.config.eval_tasks import check_eval
    from cw_cli.render.evaluation import pod_spec

    problems, users = check_eval(spec, tmp_path)
    settings = pod_spec(spec, users, gpu=0)
    assert settings["tasks"] == ["gsm8k", "my_mc"] and settings["backend"] == "hf" and settings["limit"] == 50
    assert set(settings["task_files"]) == {"mine.yaml", "data.jsonl"}
    assert pod_spec(spec, users, gpu=1)["backend"] == "vllm"


def test_a_user_task_metric_its_yaml_does_not_list_and_missing_data_are_refused(tmp_path):
    (tmp_path / "mine.yaml").write_text(USER_TASK)
    text = _error(tmp_path, {"tasks": ["mine.yaml"], "metric": "my_mc/acc"})
    assert "`eval.tasks`: mine.yaml:" in text and "data.jsonl" in text
    (tmp_path / "data.jsonl").write_text("{}\n")
    text = _error(tmp_path, {"tasks": ["mine.yaml"], "metric": "my_mc/acc_norm"})
    assert "my_mc does not report 'my_mc/acc_norm'; it reports my_mc/acc" in text


def test_bad_shapes_are_refused_by_the_model(tmp_path):
    assert "`eval.metric`" in _error(tmp_path, {"tasks": ["hellaswag"], "metric": "acc"})
    assert "`eval.tasks`" in _error(tmp_path, {"tasks": [], "metric": "hellaswag/acc"})
    assert "`eval.generation`" in _error(tmp_path, {"tasks": ["hellaswag"], "metric": "hellaswag/acc",
                                                   "generation": {"until": "a,b"}})  # fmt: skip


def test_the_shipped_list_is_the_installed_harness_registry_where_lm_eval_is_installed():
    from cw_cli.config.eval_tasks import registry

    known = registry()
    assert {"hellaswag", "arc_easy", "gsm8k"} <= set(known["tasks"]) and "mmlu" in known["groups"]
    try:
        from importlib.metadata import version

        installed = version("lm_eval")
    except Exception:  # noqa: BLE001 - lm-eval is not installed here: the list alone is checked
        return
    assert known["lm_eval"] == installed, "refresh it: python tools/lm_eval_tasks.py | gzip -9n > cw_cli/config/lm_eval_tasks.json.gz"


def test_cw_eval_names_scores_as_the_metric_is_checked():
    from cw_cli.runtime.cw_eval import scores_of

    results = {"results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.1},
                           "hellaswag": {"acc,none": 0.5, "acc_norm,none": 0.75, "acc_stderr,none": 0.01}}}  # fmt: skip
    assert scores_of(results) == {"gsm8k/exact_match,strict-match": 0.25, "hellaswag/acc": 0.5, "hellaswag/acc_norm": 0.75}


def test_a_run_with_eval_gets_a_watcher_sidecar_its_rbac_and_the_job_it_creates_only_on_a_volume(tmp_path):
    from unit_helpers import plan_for

    block = {"tasks": ["hellaswag"], "metric": "hellaswag/acc_norm"}
    plan = plan_for("trl", "sft", write_config(tmp_path, {**BASE, "gpu": 1, "output_dir": "out", "eval": block}), run_name="ev")
    kinds = [(m["kind"], m["metadata"]["name"]) for m in plan.manifests]
    assert {("ServiceAccount", "ev-eval"), ("Role", "ev-eval"), ("RoleBinding", "ev-eval")} <= set(kinds)
    role = next(m for m in plan.manifests if m["kind"] == "Role")
    assert role["rules"] == [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]
    pod = next(m for m in plan.manifests if m["kind"] == "Job")["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "eval-watch")
    assert sidecar["restartPolicy"] == "Always" and pod["serviceAccountName"] == "ev-eval"
    assert {"name": "CW_EVAL_RUN_DIR", "value": "/checkpoints/ev/out"} in sidecar["env"]
    data = next(m for m in plan.manifests if m["kind"] == "ConfigMap")["data"]
    job = json.loads(data["cw-eval-job.json"])
    spec = job["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "cw-eval" and spec["volumes"][0] == {"name": "config", "configMap": {"name": "ev-config"}}
    assert "/checkpoints/ev/out/checkpoint-987654321" in spec["containers"][0]["command"]
    from cw_cli.runtime.cw_eval_watch import job_for

    made = job_for(job, 40)
    assert made["metadata"]["name"] == "ev-eval-40" and "/checkpoints/ev/out/checkpoint-40" in made["spec"]["template"]["spec"]["containers"][0]["command"]
    # Outputs on no volume: no pod could read the checkpoints, so no watcher (cw eval still works on demand).
    scratch = plan_for("trl", "sft", write_config(tmp_path, {**BASE, "checkpoint_volume": "none", "eval": block}, name="s.yaml"))
    assert not any(m["kind"] == "Role" for m in scratch.manifests)
    assert "cw-eval.json" in next(m for m in scratch.manifests if m["kind"] == "ConfigMap")["data"]


def test_the_watcher_evaluates_complete_checkpoints_without_scores_only(tmp_path):
    from cw_cli.runtime.cw_eval_watch import complete_steps

    for step, marker, scored in ((2, True, True), (4, True, False), (6, False, False)):
        folder = tmp_path / f"checkpoint-{step}"
        (folder / "cw-eval").mkdir(parents=True)
        (folder / "trainer_state.json").write_text("{}")
        if marker:
            (folder / ".cw-complete").write_text("")
        if scored:
            (folder / "cw-eval" / "scores.json").write_text("{}")
    assert complete_steps(str(tmp_path)) == [4]


def test_cw_metrics_of_a_run_folder_has_the_evaluation_curve_over_steps(tmp_path):
    from cw_cli.metrics.sources import load_path

    for step, value in ((10, 0.25), (20, 0.5)):
        folder = tmp_path / f"checkpoint-{step}"
        (folder / "cw-eval").mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": s, "loss": 3.0 - s / 10} for s in range(1, step + 1)]}))
        (folder / "cw-eval" / "scores.json").write_text(json.dumps({"checkpoint": folder.name, "step": step,
                                                                    "scores": {"hellaswag/acc_norm": value}}))  # fmt: skip
    (tmp_path / "checkpoint-20" / "cw-eval" / "scores.json").touch()  # being rewritten: never hides the rest
    (tmp_path / "checkpoint-20" / "cw-eval" / "scores.json").write_text("{")
    series = load_path(tmp_path).series()
    assert series["eval_hellaswag/acc_norm"] == [(10, 0.25)] and len(series["loss"]) == 20


def test_a_jobset_run_evaluates_each_checkpoint_with_the_watchers_own_account(tmp_path):
    from unit_helpers import plan_for

    block = {"tasks": ["hellaswag"], "metric": "hellaswag/acc_norm"}
    plan = plan_for("trl", "sft", write_config(tmp_path, {**BASE, "gpu": 8, "nodes": 2, "jobset": True, "eval": block}),
                    run_name="js", jobset_available=True)  # fmt: skip
    assert plan.owner_kind == "JobSet" and not any("not evaluated" in note for note in plan.notices)
    kinds = {(m["kind"], m["metadata"]["name"]) for m in plan.manifests}
    assert {("ServiceAccount", "js-eval"), ("Role", "js-eval"), ("RoleBinding", "js-eval")} <= kinds
    trainer = next(r for r in plan.manifests[0]["spec"]["replicatedJobs"] if r["name"] == "trainer")
    pod = trainer["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "js-eval"
    assert any("cw_eval_watch" in json.dumps(c) for c in pod.get("initContainers", []) + pod["containers"])


def test_scores_go_to_w_and_b_over_the_trainers_step_where_the_run_reports_there(tmp_path):
    pytest.importorskip("wandb", reason="W&B's own offline run file is the proof")
    from cw_cli.render.evaluation import eval_env
    from cw_cli.runtime.cw_eval import log_to_wandb

    trainer = [{"name": "WANDB_RUN_ID", "value": "r1"}, {"name": "WANDB_PROJECT", "value": "p"},
               {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "WANDB_API_KEY"}}},
               {"name": "SECRET_OF_THE_TRAINER", "value": "x"}]  # fmt: skip
    env = {e["name"]: e.get("value") for e in eval_env(trainer, "r1")}
    assert env == {"WANDB_PROJECT": "p", "WANDB_API_KEY": None, "CW_EVAL_WANDB_RUN": "r1-eval", "CW_EVAL_WANDB_GROUP": "r1"}
    assert eval_env(trainer[1:], "r1") == trainer[1:3]  # a run not reporting to W&B: no evaluation run there
    document = {"checkpoint": "checkpoint-40", "step": 40, "scores": {"hellaswag/acc_norm": 0.3125}}
    import os

    saved = {k: os.environ.get(k) for k in ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_SILENT")}
    os.environ.update({"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_PROJECT": "p", "WANDB_SILENT": "true"})
    try:
        assert log_to_wandb(document, {"CW_EVAL_WANDB_RUN": "r1-eval", "CW_EVAL_WANDB_GROUP": "r1"}) is True
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    logged = b"".join(p.read_bytes() for p in tmp_path.rglob("run-r1-eval.wandb"))
    assert b"eval/hellaswag/acc_norm" in logged and b"0.3125" in logged and b"train/global_step" in logged
    assert log_to_wandb(document, {}) is False  # not configured: nothing asked of W&B
