"""`--checkpoint best` is the checkpoint whose evaluation scores best on its deciding metric (the
scores files the evaluation writes, read by the pod-side lister), and the export gate refuses a
checkpoint that scores worse than the base model by more than the config's `gate.max_drop`,
naming both scores; the gate a config declares is recorded on the run's owner for `cw export`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cw_cli import api
from cw_cli.errors import ConfigError, ExitCode, GateRefused
from cw_cli.render.artifact_choice import choose_source
from cw_cli.render.export import ExportChoice, check_choice, check_gate, resolve_best
from cw_cli.render.scores import GATE_ANNOTATION, Gate, best_checkpoint, gate_of, gate_refusal
from cw_cli.runtime.cw_artifacts import list_artifacts

METRIC = "gsm8k/exact_match"


def _scores(name: str, value: float, *, metric: str = METRIC, higher: bool = True) -> dict[str, Any]:
    step = int(name.removeprefix("checkpoint-")) if name.startswith("checkpoint-") else None
    return {"checkpoint": name, "step": step, "model": f"/checkpoints/r/{name}", "harness": "lm-eval",
            "metric": metric, "higher_is_better": higher, "scores": {metric: value, "other/x": 1.0},
            "finished_at": "2026-11-27T15:00:00Z"}  # fmt: skip


def _listing(values: dict[int, float | None], base: float | None = 0.50, higher: bool = True) -> dict[str, Any]:
    artifacts = [{"kind": "checkpoint", "path": f"r/checkpoint-{step}", "step": step, "complete": True,
                  "scores": _scores(f"checkpoint-{step}", value, higher=higher) if value is not None else None}
                 for step, value in values.items()]  # fmt: skip
    base_scores = _scores("base", base, higher=higher) if base is not None else None
    return {"run_dir": "/checkpoints/r", "exists": True, "artifacts": artifacts, "base_scores": base_scores}


def test_best_is_the_highest_scored_checkpoint_and_ties_go_to_the_earlier():
    assert best_checkpoint(_listing({10: 0.4, 20: 0.6, 30: 0.55, 40: None}))["step"] == 20
    assert best_checkpoint(_listing({10: 0.6, 20: 0.6}))["step"] == 10


def test_best_is_the_lowest_where_lower_is_better():
    assert best_checkpoint(_listing({10: 2.0, 20: 1.5, 30: 1.7}, higher=False))["step"] == 20


def test_best_ignores_incomplete_checkpoints():
    listing = _listing({10: 0.4, 20: 0.9})
    listing["artifacts"][1]["complete"] = False
    assert best_checkpoint(listing)["step"] == 10


def test_best_without_scores_says_to_run_cw_eval():
    with pytest.raises(ConfigError) as raised:
        best_checkpoint(_listing({10: None, 20: None}))
    assert "no checkpoint in /checkpoints/r has evaluation scores" in raised.value.message
    assert "cw eval RUN" in str(raised.value.hint) and "eval:" in str(raised.value.hint)


def test_download_serve_and_try_choose_best_as_its_checkpoint_folder():
    source = choose_source(_listing({10: 0.4, 20: 0.6}), "best")
    assert source.folder == "r/checkpoint-20" and source.label == "checkpoint-20" and not source.top


def test_export_takes_best_and_turns_it_into_the_step():
    assert check_choice(ExportChoice(checkpoint="best")) == []
    assert resolve_best(ExportChoice(checkpoint="best"), _listing({10: 0.4, 20: 0.6})).checkpoint == "20"
    assert resolve_best(ExportChoice(checkpoint="latest"), _listing({10: 0.4})).checkpoint == "latest"


def test_the_lister_reads_the_scores_of_checkpoints_final_and_base(tmp_path):
    run = tmp_path / "run"
    for step, value in ((10, 0.4), (20, 0.6)):
        folder = run / f"checkpoint-{step}"
        (folder / "cw-eval").mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        (folder / "cw-eval" / "scores.json").write_text(json.dumps(_scores(f"checkpoint-{step}", value)))
    (run / "model.safetensors").write_bytes(b"\0")
    for name, value in (("base", 0.5), ("final", 0.58)):
        (run / "cw-eval" / name).mkdir(parents=True)
        (run / "cw-eval" / name / "scores.json").write_text(json.dumps(_scores(name, value)))
    listing = list_artifacts(str(run))
    by_kind = {(a["kind"], a["step"]): a["scores"] for a in listing["artifacts"]}
    assert by_kind[("checkpoint", 10)]["scores"][METRIC] == 0.4
    assert by_kind[("final", 20)]["checkpoint"] == "final"
    assert listing["base_scores"]["scores"][METRIC] == 0.5
    assert best_checkpoint(listing)["step"] == 20


def test_the_gate_refuses_a_checkpoint_worse_than_the_base_naming_both_scores():
    gate = Gate(METRIC, 0.02)
    listing = _listing({10: 0.40, 20: 0.49})
    refusal = gate_refusal(gate, listing["artifacts"][0], listing["base_scores"])
    assert refusal == ("checkpoint-10 scores gsm8k/exact_match 0.4, worse than the base model's 0.5 by 0.1: "
                       "more than the gate's max_drop 0.02")  # fmt: skip
    assert gate_refusal(gate, listing["artifacts"][1], listing["base_scores"]) is None  # 0.01 worse: within the margin
    with pytest.raises(GateRefused) as raised:
        check_gate(gate, ExportChoice(checkpoint="10"), listing)
    assert raised.value.exit_code == ExitCode.GATE_REFUSED == 9 and "--force" in str(raised.value.hint)
    check_gate(gate, ExportChoice(checkpoint="20"), listing)


def test_the_gate_refuses_where_lower_is_better_and_the_score_rose():
    gate = Gate("wikitext/perplexity", 0.5, higher_is_better=False)
    chosen = {"kind": "checkpoint", "step": 5, "scores": {"scores": {"wikitext/perplexity": 12.0}}}
    refusal = gate_refusal(gate, chosen, {"scores": {"wikitext/perplexity": 10.0}})
    assert refusal is not None and "12" in refusal and "10" in refusal


def test_the_gate_cannot_judge_without_scores_and_says_which_is_missing():
    gate = Gate(METRIC, 0.02)
    listing = _listing({10: None}, base=0.5)
    assert "checkpoint-10 has no score" in str(gate_refusal(gate, listing["artifacts"][0], listing["base_scores"]))
    listing = _listing({10: 0.6}, base=None)
    assert "no base model score" in str(gate_refusal(gate, listing["artifacts"][0], None))


SFT = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara", "checkpoint_volume": "none"}


def test_the_config_gate_is_recorded_on_the_runs_owner(tmp_path: Path):
    gated = api.plan({**SFT, "gate": {"metric": METRIC, "max_drop": 0.02}}, "trl", "sft", name="g", base_dir=tmp_path)
    owner = gated.manifests[0]
    assert owner["kind"] == "Job" and json.loads(owner["metadata"]["annotations"][GATE_ANNOTATION])["max_drop"] == 0.02
    assert gate_of(owner) == Gate(METRIC, 0.02, True)
    plain = api.plan(SFT, "trl", "sft", name="p", base_dir=tmp_path).manifests[0]
    assert GATE_ANNOTATION not in (plain["metadata"].get("annotations") or {}) and gate_of(plain) is None


def test_the_gate_takes_the_eval_blocks_metric_and_direction_where_it_names_none(tmp_path: Path):
    evaluated = {**SFT, "eval": {"tasks": ["hellaswag"], "metric": "hellaswag/acc_norm", "higher_is_better": False},
                 "gate": {"max_drop": 0.05}}  # fmt: skip
    owner = api.plan(evaluated, "trl", "sft", name="g", base_dir=tmp_path).manifests[0]
    assert gate_of(owner) == Gate("hellaswag/acc_norm", 0.05, False)
    with pytest.raises(ConfigError) as raised:
        api.plan({**SFT, "gate": {"max_drop": 0.05}}, "trl", "sft", name="g", base_dir=tmp_path)
    assert raised.value.message.endswith("gate.metric: the gate needs the task/metric it compares, and the config has no "
                                         "`eval:` block to take it from")  # fmt: skip


@pytest.mark.parametrize("gate,field", [({"metric": "gsm8k"}, "gate.metric"), ({"metric": METRIC, "max_drop": -1}, "gate.max_drop"),
                                        ({"metric": METRIC, "margin": 1}, "gate.margin")])  # fmt: skip
def test_a_bad_gate_is_a_config_error_naming_the_field(tmp_path: Path, gate, field):
    with pytest.raises(ConfigError) as raised:
        api.plan({**SFT, "gate": gate}, "trl", "sft", name="g", base_dir=tmp_path)
    assert any(field in issue for issue in raised.value.issues), raised.value.issues
