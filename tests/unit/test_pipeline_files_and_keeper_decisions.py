"""A pipeline file is checked before anything is rendered (unknown keys, an `after:` naming no
stage, a cycle: each error names the file and the stage), its stages are planned as ordinary runs
labelled with the pipeline, a stage whose model is another stage's (`run:sft`) waits for it and
starts from its output folder, the later stages are kept for the keeper with a Role that allows
no more than creating them, and the keeper's decisions (create, wait, skip) follow the stages'
states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cw_cli.api.pipelines import plan_pipeline
from cw_cli.config.pipeline import parse_pipeline
from cw_cli.errors import ConfigError
from cw_cli.render.naming import is_run_name
from cw_cli.render.pipeline import PIPELINE_LABEL, STAGE_LABEL
from cw_cli.runtime.cw_pipeline import decide

FILE = Path("/work/p.yaml")
SFT = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara", "checkpoint_volume": "ckpts",
       "output_dir": "out"}  # fmt: skip
DPO = {"model_name_or_path": "run:sft", "dataset_name": "trl-lib/ultrafeedback_binarized", "checkpoint_volume": "ckpts"}


def _stage(config: str = "x.yaml", after: list[str] | None = None) -> dict:
    return {"framework": "trl", "type": "sft", "config": config, **({"after": after} if after is not None else {})}


@pytest.mark.parametrize(
    "stages,message",
    [({"a": _stage(after=["b"]), "b": _stage(after=["c"]), "c": _stage(after=["a"])},
      "/work/p.yaml: the stages wait for each other in a cycle: a -> b -> c -> a"),
     ({"sft": _stage(), "dpo": _stage(after=["stf"])}, "/work/p.yaml: stage dpo: after: 'stf' is no stage of the file; stages: sft, dpo"),
     ({"sft": _stage(after=["sft"])}, "/work/p.yaml: stage sft: after: a stage cannot wait for itself"),
     ({"sft": {"framework": "trl", "type": "sft"}}, "/work/p.yaml: stage sft: config is missing"),
     ({"sft": {**_stage(), "afterr": ["x"]}}, "/work/p.yaml: stage sft: unknown key 'afterr'"),
     ({"SFT": _stage()}, "/work/p.yaml: stage SFT: 'p-SFT' (pipeline name + stage) is not a run name")],
)  # fmt: skip
def test_a_bad_pipeline_is_refused_naming_the_file_and_the_stage(stages, message):
    with pytest.raises(ConfigError) as raised:
        parse_pipeline(FILE, {"stages": stages}, is_run_name)
    assert any(issue.startswith(message) for issue in raised.value.issues), raised.value.issues


def test_stages_are_ordered_after_those_they_wait_for():
    pipeline = parse_pipeline(FILE, {"name": "rlhf", "stages": {"eval": _stage(after=["dpo"]), "dpo": _stage(after="sft"), "sft": _stage()}}, is_run_name)
    assert [(s.name, s.run, s.after) for s in pipeline.stages] == [("sft", "rlhf-sft", ()), ("dpo", "rlhf-dpo", ("sft",)),
                                                                   ("eval", "rlhf-eval", ("dpo",))]  # fmt: skip
    assert pipeline.stage("sft").config == Path("/work/x.yaml")


def _files(tmp_path: Path, dpo: dict = DPO, stages: dict | None = None) -> Path:
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(SFT))
    (tmp_path / "dpo.yaml").write_text(yaml.safe_dump(dpo))
    stages = stages or {"sft": {"framework": "trl", "type": "sft", "config": "sft.yaml"},
                        "dpo": {"framework": "trl", "type": "dpo", "config": "dpo.yaml"}}  # fmt: skip
    path = tmp_path / "rlhf.yaml"
    path.write_text(yaml.safe_dump({"name": "rlhf", "stages": stages}))
    return path


def test_a_stage_starting_from_another_waits_for_it_and_reads_its_output_folder(tmp_path):
    planned = plan_pipeline(_files(tmp_path))  # dpo names no `after:`: its `run:sft` makes it wait
    assert [(s.name, s.after) for s in planned.stages] == [("sft", ()), ("dpo", ("sft",))] and planned.first == ["sft"]
    dpo = planned.runs["dpo"]
    mounted = yaml.safe_load(next(m for m in dpo.manifests if m["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert mounted["model_name_or_path"] == "/checkpoints/rlhf-sft/out"
    for stage, run in planned.runs.items():
        for manifest in run.manifests:
            assert manifest["metadata"]["labels"][PIPELINE_LABEL] == "rlhf" and manifest["metadata"]["labels"][STAGE_LABEL] == stage
    job, config_map, account, role, binding = planned.keeper
    assert [m["kind"] for m in planned.keeper] == ["Job", "ConfigMap", "ServiceAccount", "Role", "RoleBinding"]
    document = json.loads(config_map["data"]["pipeline.json"])
    assert document["stages"]["sft"]["created"] is True and "objects" not in document["stages"]["sft"]
    assert [o["body"]["kind"] for o in document["stages"]["dpo"]["objects"]][0] == "Job"
    assert "def decide(" in config_map["data"]["cw_pipeline.py"]
    rules = role["rules"]
    assert {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": ["rlhf-dpo-trainer", "rlhf-sft-trainer"], "verbs": ["get"]} in rules
    assert {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": ["rlhf-dpo-trainer"], "verbs": ["patch"]} in rules
    assert all("delete" not in rule["verbs"] and "list" not in rule["verbs"] for rule in rules)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "rlhf-pipeline" == binding["subjects"][0]["name"]
    assert "kind: Role" in planned.to_yaml() and planned.to_yaml().count("kind: Job\n") == 3


def test_a_stage_reference_to_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(ConfigError) as raised:
        plan_pipeline(_files(tmp_path, {**DPO, "model_name_or_path": "run:sft@best"}))
    assert "stage dpo" in raised.value.message and "has only its final model known before it runs" in raised.value.message


def test_a_stage_reference_across_volumes_is_refused(tmp_path):
    with pytest.raises(ConfigError) as raised:
        plan_pipeline(_files(tmp_path, {**DPO, "checkpoint_volume": "other"}))
    assert "stage dpo starts from stage sft's model, which is on volume ckpts, and its own checkpoint_volume is other" in raised.value.message


@pytest.mark.parametrize("adapter,line,switch", [({"use_peft": True}, "use_peft: true", "use_peft: false"),
                                                  ({"use_peft": "true", "load_in_4bit": True}, "use_peft: true", "use_peft: false")])
def test_a_stage_starting_from_a_stage_that_trains_a_lora_adapter_is_refused_naming_the_line(tmp_path, adapter, line, switch):
    """TRL loads a whole model (config.json), which an adapter folder lacks: found on a real node,
    where such a DPO stage failed in its pod after the SFT stage had trained."""
    path = _files(tmp_path)
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({**SFT, **adapter}))
    with pytest.raises(ConfigError) as raised:
        plan_pipeline(path)
    assert raised.value.message == (f"{path}: stage dpo: model_name_or_path: run:sft is stage sft's final model, a LoRA adapter "
                                    f"({line} in {tmp_path / 'sft.yaml'}), and a run starts from a whole model")  # fmt: skip
    assert f"`set: {{{switch}}}` on it in {path}" in (raised.value.hint or "")
    stages = {"sft": {"framework": "trl", "type": "sft", "config": "sft.yaml", "set": {"use_peft": False}},
              "dpo": {"framework": "trl", "type": "dpo", "config": "dpo.yaml"}}  # fmt: skip
    path = _files(tmp_path, stages=stages)
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({**SFT, **adapter}))
    assert [s.name for s in plan_pipeline(path).stages] == ["sft", "dpo"]  # as the hint says


def test_a_cycle_made_by_references_is_refused(tmp_path):
    stages = {"sft": {"framework": "trl", "type": "sft", "config": "sft.yaml", "after": ["dpo"]},
              "dpo": {"framework": "trl", "type": "dpo", "config": "dpo.yaml"}}  # fmt: skip
    with pytest.raises(ConfigError) as raised:
        plan_pipeline(_files(tmp_path, stages=stages))
    assert "in a cycle" in raised.value.message


DOC = {"stages": {"dpo": {"after": ["sft"]}, "eval": {"after": ["dpo"]}, "sft": {"after": [], "created": True}},
       "order": ["sft", "dpo", "eval"]}  # the stages as JSON keeps them: sorted, so the order says which comes first


def _job(condition: str | None) -> dict:
    return {"status": {"conditions": [{"type": condition, "status": "True"}] if condition else []}}


def test_the_keeper_creates_a_stage_only_once_its_predecessors_succeeded():
    assert decide(DOC, {}, {"sft": _job(None)}) == {"sft": "Running", "dpo": "Waiting", "eval": "Waiting"}
    assert decide(DOC, {}, {"sft": _job("Complete")}) == {"sft": "Succeeded", "dpo": "Create", "eval": "Waiting"}
    states = {"sft": "Succeeded", "dpo": "Created", "eval": "Waiting"}
    assert decide(DOC, states, {"sft": _job("Complete"), "dpo": _job("Complete")})["eval"] == "Create"


def test_the_keeper_skips_the_rest_after_a_failure_or_a_deletion():
    assert decide(DOC, {}, {"sft": _job("Failed")}) == {"sft": "Failed", "dpo": "Skipped", "eval": "Skipped"}
    assert decide(DOC, {}, {"sft": None}) == {"sft": "Deleted", "dpo": "Skipped", "eval": "Skipped"}
    states = {"sft": "Succeeded", "dpo": "Created", "eval": "Waiting"}
    assert decide(DOC, states, {"sft": _job("Complete"), "dpo": _job("Failed")})["eval"] == "Skipped"


def test_a_stages_run_says_its_pipeline_in_cw_lists_json():
    from cw_cli.cli.formats import run_dict
    from cw_cli.k8s.run_view import collect_runs

    labels = {"cw-cli.dev/run": "rlhf-dpo", PIPELINE_LABEL: "rlhf", STAGE_LABEL: "dpo"}
    job = {"kind": "Job", "metadata": {"name": "rlhf-dpo-trainer", "namespace": "ns", "labels": labels},
           "spec": {"template": {"spec": {"containers": [{"name": "trainer"}]}}}, "status": {}}  # fmt: skip
    views, _ = collect_runs([("Job", job)], "ns")
    assert run_dict(views[("ns", "rlhf-dpo")])["pipeline"] == {"name": "rlhf", "stage": "dpo"}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(use_peft=st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
       | st.lists(st.integers(), max_size=3) | st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
def test_any_use_peft_value_of_a_referenced_stage_plans_or_is_refused_naming_the_line(tmp_path, use_peft):
    """The adapter check reads a value of the user's config: whatever it is, a plan or a ConfigError."""
    path = _files(tmp_path)
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({**SFT, "use_peft": use_peft}))
    try:
        plan_pipeline(path)
    except ConfigError as exc:
        assert "stage" in exc.message, exc.message
