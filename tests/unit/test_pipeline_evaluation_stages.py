"""A pipeline's evaluation stage (`evaluate: dpo`) is checked with the rest of the file (a stage
named that is none, an evaluation of an evaluation, another checkpoint than final, a cycle, an
evaluated stage without `eval:` and no tasks: each naming the file and the stage), and rendered
at launch exactly as `cw eval rlhf-dpo --checkpoint final` renders it (render/evaluation.py),
kept for the keeper, whose Role may create and read it by name and no more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cw_cli.after_training.evaluation import eval_facts, run_settings
from cw_cli.api.pipelines import plan_pipeline
from cw_cli.config.evaluation import LM_EVAL_REQUIREMENT
from cw_cli.config.pipeline import parse_pipeline
from cw_cli.errors import ConfigError
from cw_cli.render.evaluation import EvalResources, eval_manifests, target
from cw_cli.render.naming import is_run_name

FILE = Path("/work/p.yaml")
TRAIN = {"framework": "trl", "type": "sft", "config": "x.yaml"}
SFT = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara", "checkpoint_volume": "ckpts"}
EVAL = {"tasks": ["gsm8k"], "metric": "gsm8k/exact_match,strict-match"}
DPO = {"model_name_or_path": "run:sft", "dataset_name": "trl-lib/ultrafeedback_binarized", "checkpoint_volume": "ckpts", "eval": EVAL}


@pytest.mark.parametrize(
    "stages,message",
    [({"sft": TRAIN, "eval": {"evaluate": "dop"}}, "/work/p.yaml: stage eval: evaluate: 'dop' is no stage of the file; stages: sft, eval"),
     ({"sft": TRAIN, "e1": {"evaluate": "sft"}, "e2": {"evaluate": "e1"}},
      "/work/p.yaml: stage e2: evaluate: 'e1' is an evaluation, not a run: name a training stage"),
     ({"sft": TRAIN, "eval": {"evaluate": "sft", "checkpoint": "best"}},
      "/work/p.yaml: stage eval: checkpoint: 'best': a pipeline evaluates the final model only"),
     ({"sft": TRAIN, "eval": {"evaluate": "sft", "task": ["gsm8k"]}}, "/work/p.yaml: stage eval: unknown key 'task' in an evaluation stage"),
     ({"sft": TRAIN, "eval": {"evaluate": "sft", "gpu": 9}}, "/work/p.yaml: stage eval: gpu: expected 0 to 8"),
     ({"sft": TRAIN, "eval": {"evaluate": "sft", "tasks": ["gsm8k"], "environments": ["primeintellect/gsm8k"]}},
      "/work/p.yaml: stage eval: tasks and environments: name one"),
     ({"sft": TRAIN, "eval": {"evaluate": "sft", "environments": {"gsm8k": 1}}},
      "/work/p.yaml: stage eval: environments: expected a list of verifiers environments"),
     ({"sft": {**TRAIN, "after": ["eval"]}, "eval": {"evaluate": "sft"}}, "/work/p.yaml: the stages wait for each other in a cycle: "),
     ({"sft": {**TRAIN, "evaluate": "x"}}, "/work/p.yaml: stage sft: unknown key 'framework' in an evaluation stage")],
)  # fmt: skip
def test_a_bad_evaluation_stage_is_refused_naming_the_file_and_the_stage(stages, message):
    with pytest.raises(ConfigError) as raised:
        parse_pipeline(FILE, {"stages": stages}, is_run_name)
    assert any(issue.startswith(message) for issue in raised.value.issues), raised.value.issues


def test_an_evaluation_stage_waits_for_the_stage_it_evaluates():
    pipeline = parse_pipeline(FILE, {"name": "rlhf", "stages": {"eval": {"evaluate": "dpo", "tasks": "gsm8k, hellaswag"},
                                                                "dpo": {**TRAIN, "after": "sft"}, "sft": TRAIN}}, is_run_name)  # fmt: skip
    assert [(s.name, s.after) for s in pipeline.stages] == [("sft", ()), ("dpo", ("sft",)), ("eval", ("dpo",))]
    evaluation = pipeline.stage("eval").evaluation
    assert evaluation is not None and evaluation.of == "dpo" and evaluation.tasks == ("gsm8k", "hellaswag")


def _files(tmp_path: Path, dpo: dict = DPO, evaluation: dict | None = None) -> Path:
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(SFT))
    (tmp_path / "dpo.yaml").write_text(yaml.safe_dump(dpo))
    stages = {"sft": {"framework": "trl", "type": "sft", "config": "sft.yaml"},
              "dpo": {"framework": "trl", "type": "dpo", "config": "dpo.yaml"},
              "eval": evaluation or {"evaluate": "dpo"}}  # fmt: skip
    path = tmp_path / "rlhf.yaml"
    path.write_text(yaml.safe_dump({"name": "rlhf", "stages": stages}))
    return path


def test_an_evaluated_stage_without_eval_settings_and_no_tasks_is_refused(tmp_path):
    no_eval = {key: value for key, value in DPO.items() if key != "eval"}
    with pytest.raises(ConfigError) as raised:
        plan_pipeline(_files(tmp_path, no_eval))
    assert raised.value.message == (f"{tmp_path}/rlhf.yaml: stage eval: evaluates stage dpo, whose config {tmp_path}/dpo.yaml "
                                    "has no eval: block, and names no tasks")  # fmt: skip
    with pytest.raises(ConfigError) as raised:
        plan_pipeline(_files(tmp_path, no_eval, {"evaluate": "dpo", "tasks": ["no-such-task"]}))
    assert raised.value.message.startswith(f"{tmp_path}/rlhf.yaml: stage eval: tasks") and "no-such-task" in raised.value.message


class _Planned:
    """`cw eval`'s reads of a run, answered from the run's planned objects."""

    namespace = None

    def __init__(self, manifests: list[dict]) -> None:
        self.objects = {(m["kind"], m["metadata"]["name"]): m for m in manifests}

    def get(self, kind: str, name: str) -> dict | None:
        return self.objects.get((kind, name))


def test_an_evaluation_stage_is_rendered_as_cw_eval_final_renders_it_and_kept_for_the_keeper(tmp_path):
    planned = plan_pipeline(_files(tmp_path))
    assert [(s.name, s.after) for s in planned.stages] == [("sft", ()), ("dpo", ("sft",)), ("eval", ("dpo",))]
    assert "eval" not in planned.runs and planned.first == ["sft"]
    stage = planned.stages[-1]
    # What `cw eval rlhf-dpo --checkpoint final` makes of the run (api.Run.evaluate without the reader pod).
    kube = _Planned(planned.runs["dpo"].manifests)
    facts = eval_facts(kube, "rlhf-dpo")  # type: ignore[arg-type]
    settings = run_settings(kube, "rlhf-dpo")[0]  # type: ignore[arg-type]
    assert settings is not None and settings["tasks"] == ["gsm8k"]
    expected = eval_manifests(facts, settings, target(facts.run_dir, "final"), EvalResources(gpu=int(settings["gpu"])),
                              requirements=[LM_EVAL_REQUIREMENT])  # fmt: skip
    assert stage.plan.manifests == expected
    job, config_map = stage.plan.manifests
    assert job["metadata"]["name"] == "rlhf-dpo-eval-final" == stage.plan.run_name
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--model") + 1] == "/checkpoints/rlhf-dpo" and command[-2:] == ["--checkpoint", "final"]
    assert job["metadata"]["labels"]["cw-cli.dev/run"] == "rlhf-dpo"  # `cw logs rlhf-dpo --role eval` finds it
    keeper_config, role = planned.keeper[1], planned.keeper[3]
    document = json.loads(keeper_config["data"]["pipeline.json"])
    entry = document["stages"]["eval"]
    assert entry["after"] == ["dpo"] and entry["created"] is False and document["order"] == ["sft", "dpo", "eval"]
    assert [(o["body"]["kind"], o["body"]["metadata"]["name"]) for o in entry["objects"]] == [("Job", "rlhf-dpo-eval-final"),
                                                                                            ("ConfigMap", "rlhf-dpo-eval-final")]  # fmt: skip
    rules = role["rules"]
    named = [rule for rule in rules if "rlhf-dpo-eval-final" in rule.get("resourceNames", [])]
    assert [rule["verbs"] for rule in named] == [["get"], ["patch"]]  # read its state, release it: by name only
    assert all("delete" not in rule["verbs"] and "list" not in rule["verbs"] for rule in rules)
    assert planned.to_yaml().count("name: rlhf-dpo-eval-final\n") >= 2


def test_an_evaluation_stages_tasks_replace_the_evaluated_stages(tmp_path):
    planned = plan_pipeline(_files(tmp_path, evaluation={"evaluate": "dpo", "tasks": ["hellaswag"], "gpu": 0, "cpu": "2"}))
    job, config_map = planned.stages[-1].plan.manifests
    settings = json.loads(config_map["data"]["cw-eval.json"])
    assert settings["tasks"] == ["hellaswag"] and settings["backend"] == "hf" and settings["gpu"] == 0
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "32Gi"}


def test_an_evaluation_stage_may_score_verifiers_environments_with_vf_eval(tmp_path):
    planned = plan_pipeline(_files(tmp_path, evaluation={"evaluate": "dpo", "environments": ["primeintellect/gsm8k"], "limit": 8,
                                                         "gpu": 0}))  # fmt: skip
    job, config_map = planned.stages[-1].plan.manifests
    settings = json.loads(config_map["data"]["cw-eval.json"])
    assert (settings["harness"], settings["environments"], settings["num_examples"]) == ("vf-eval", ["primeintellect/gsm8k"], 8)
    assert settings["metric"] == "gsm8k/reward" and settings["install"] and "cw_vf_eval.py" in config_map["data"]


def test_the_shipped_example_pipeline_plans_sft_then_dpo_from_it_then_its_evaluation():
    from unit_helpers import CONFIGS

    planned = plan_pipeline(CONFIGS / "pipelines" / "rlhf.yaml")  # dpo's model is `set:` to run:sft: it waits for sft
    assert [(s.name, s.after, s.plan.run_name) for s in planned.stages] == [
        ("sft", (), "rlhf-sft"), ("dpo", ("sft",), "rlhf-dpo"), ("eval", ("dpo",), "rlhf-dpo-eval-final")]  # fmt: skip
    mounted = yaml.safe_load(next(m for m in planned.runs["dpo"].manifests if m["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert mounted["model_name_or_path"].startswith("/checkpoints/rlhf-sft")
    settings = json.loads(planned.stages[-1].plan.manifests[1]["data"]["cw-eval.json"])
    assert settings["tasks"] == ["hellaswag"] and settings["metric"] == "hellaswag/acc_norm"


def test_the_test_cluster_pipeline_runs_its_keeper_in_the_clusters_helper_image(tmp_path):
    """configs/test-cluster-pipeline.yaml plans the README's run, DPO from it and the DPO model's
    evaluation on CPU; its keeper takes the helper image the kubeconfig context names (a real
    node has no other), and the public default without a connection."""
    from unit_helpers import CONFIGS

    from cw_cli.labels import READER
    from cw_cli.render.helper_pods import READER_IMAGE

    class _Kube:  # what plan_pipeline asks of a connection on a dry run: the context's helper image
        def helper_image(self, role: str, default: str) -> str:
            return {READER: "cw.local/cw-runtime:x"}.get(role, default)

    planned = plan_pipeline(CONFIGS / "test-cluster-pipeline.yaml")
    assert [(s.name, s.after) for s in planned.stages] == [("sft", ()), ("dpo", ("sft",)), ("eval", ("dpo",))]
    assert planned.keeper[0]["spec"]["template"]["spec"]["containers"][0]["image"] == READER_IMAGE
    evaluation = planned.stages[-1].plan.manifests[0]["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in evaluation["resources"].get("limits", {}) and evaluation["resources"]["limits"]["memory"] == "4Gi"
    connected = plan_pipeline(CONFIGS / "test-cluster-pipeline.yaml", connect=_Kube, if_reachable=True)
    assert connected.keeper[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "cw.local/cw-runtime:x"
