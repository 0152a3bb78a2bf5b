"""`model_name_or_path: run:NAME[@best|@final|@latest|@N]` starts a run from another run's model on
the same volume: the reference is parsed (a bad one is a config error naming the file and key),
and resolved at launch into the in-pod path of that model, refused clearly when the run does not
exist, did not succeed, lives on another volume or lacks the model; a --local run is refused and
an offline plan keeps the reference with a notice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cw_cli import api
from cw_cli.after_training import run_refs as cluster_refs
from cw_cli.errors import ConfigError
from cw_cli.render.run_refs import RunRef, find_refs, parse_ref

CONFIG = Path("/work/dpo.yaml")
METRIC = "gsm8k/exact_match"


@pytest.mark.parametrize("text,run,which", [("run:my-sft", "my-sft", "final"), ("run:my-sft@best", "my-sft", "best"),
                                            ("run:a1@40", "a1", "40"), ("run:a1@final", "a1", "final")])  # fmt: skip
def test_a_reference_names_a_run_and_which_model(text, run, which):
    assert parse_ref(CONFIG, "model_name_or_path", text) == RunRef("model_name_or_path", text, run, which)


@pytest.mark.parametrize("text,message", [("run:", "'' is not a run name"), ("run:My_SFT", "'My_SFT' is not a run name"),
                                          ("run:sft@worst", "expected @best, @final, @latest or a step number")])  # fmt: skip
def test_a_malformed_reference_is_a_config_error_naming_file_and_key(text, message):
    with pytest.raises(ConfigError) as raised:
        parse_ref(CONFIG, "model_name_or_path", text)
    assert raised.value.message.startswith("/work/dpo.yaml: model_name_or_path: ") and message in raised.value.message


def test_only_the_frameworks_model_key_is_a_reference():
    assert find_refs(CONFIG, {"model_name_or_path": "Qwen/Qwen2.5-0.5B"}, "model_name_or_path") == []
    assert [r.run for r in find_refs(CONFIG, {"base_model": "run:sft"}, "base_model")] == ["sft"]


def _job(run: str, state: str, claim: str | None = "ckpts") -> dict[str, Any]:
    volumes = [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    conditions = {"Succeeded": [{"type": "Complete", "status": "True"}],
                  "Failed": [{"type": "Failed", "status": "True"}]}.get(state, [])  # fmt: skip
    return {"kind": "Job", "metadata": {"name": f"{run}-trainer", "labels": {}},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "workingDir": f"/checkpoints/{run}"}],
                                           "volumes": volumes}}},
            "status": {"conditions": conditions, "active": 1 if state == "Running" else 0}}  # fmt: skip


class FakeKube:
    namespace = "team"

    def __init__(self, *jobs: dict[str, Any]) -> None:
        self.objects = {("Job", job["metadata"]["name"]): job for job in jobs}

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, name))


LISTING = {"run_dir": "/checkpoints/sft", "exists": True, "base_scores": None, "artifacts": [
    {"kind": "checkpoint", "path": "sft/checkpoint-10", "step": 10, "complete": True,
     "scores": {"metric": METRIC, "scores": {METRIC: 0.6}}},
    {"kind": "checkpoint", "path": "sft/checkpoint-20", "step": 20, "complete": True,
     "scores": {"metric": METRIC, "scores": {METRIC: 0.5}}},
    {"kind": "final", "path": "sft", "step": 20, "complete": True}]}  # fmt: skip


@pytest.fixture
def listing(monkeypatch):
    monkeypatch.setattr(cluster_refs, "read_artifacts", lambda kube, run: LISTING)


@pytest.mark.parametrize("which,path", [("final", "/checkpoints/sft"), ("best", "/checkpoints/sft/checkpoint-10"),
                                        ("20", "/checkpoints/sft/checkpoint-20"), ("latest", "/checkpoints/sft/checkpoint-20")])  # fmt: skip
def test_a_reference_resolves_to_the_models_path_on_the_volume(listing, which, path):
    ref = RunRef("model_name_or_path", f"run:sft@{which}", "sft", which)
    assert cluster_refs.resolve_ref(FakeKube(_job("sft", "Succeeded")), CONFIG, ref, "ckpts") == path


@pytest.mark.parametrize(
    "kube,which,message",
    [(FakeKube(), "final", "no run 'sft' in namespace team"),
     (FakeKube(_job("sft", "Running")), "final", "run 'sft' is Pending, not finished"),
     (FakeKube(_job("sft", "Failed")), "final", "run 'sft' is Failed, not finished"),
     (FakeKube(_job("sft", "Succeeded", "other")), "final", "run 'sft' lives on volume other and this run's checkpoint_volume is ckpts"),
     (FakeKube(_job("sft", "Succeeded", None)), "final", "kept its outputs on no volume"),
     (FakeKube(_job("sft", "Succeeded")), "30", "run:sft@30: the run has no 30; there: checkpoint 10, checkpoint 20, final")],
)  # fmt: skip
def test_a_reference_to_nothing_is_refused_naming_the_file_and_what_is_wrong(listing, kube, which, message):
    ref = RunRef("model_name_or_path", f"run:sft@{which}", "sft", which)
    with pytest.raises(ConfigError) as raised:
        cluster_refs.resolve_ref(kube, CONFIG, ref, "ckpts")
    assert raised.value.message.startswith("/work/dpo.yaml: model_name_or_path: run:sft@") and message in raised.value.message


def test_best_of_a_run_without_scores_says_to_evaluate(monkeypatch):
    unscored = {**LISTING, "artifacts": [{**a, "scores": None} for a in LISTING["artifacts"]]}
    monkeypatch.setattr(cluster_refs, "read_artifacts", lambda kube, run: unscored)
    with pytest.raises(ConfigError) as raised:
        cluster_refs.resolve_ref(FakeKube(_job("sft", "Succeeded")), CONFIG, RunRef("m", "run:sft@best", "sft", "best"), "ckpts")
    assert "has evaluation scores" in raised.value.message and "cw eval" in str(raised.value.hint)


DPO = {"model_name_or_path": "run:sft@best", "dataset_name": "trl-lib/ultrafeedback_binarized", "checkpoint_volume": "ckpts"}


def test_a_launch_renders_the_resolved_path(listing, tmp_path):
    planned = api.plan(DPO, "trl", "dpo", name="dpo", base_dir=tmp_path, connect=lambda: FakeKube(_job("sft", "Succeeded")))
    mounted = next(m for m in planned.manifests if m["kind"] == "ConfigMap")["data"]["config.yaml"]
    assert "model_name_or_path: /checkpoints/sft/checkpoint-10" in mounted and "run:sft" not in mounted
    assert any("run:sft@best is /checkpoints/sft/checkpoint-10 on volume ckpts" in n for n in planned.notices)


def test_an_offline_plan_keeps_the_reference_and_a_local_run_is_refused(tmp_path):
    planned = api.plan(DPO, "trl", "dpo", name="dpo", base_dir=tmp_path)
    assert any("run:sft@best is resolved at launch" in n for n in planned.notices)
    with pytest.raises(ConfigError) as raised:
        api.plan(DPO, "trl", "dpo", name="dpo", base_dir=tmp_path, local=True)
    assert "a --local run cannot start from a run on the cluster" in raised.value.message
