"""`cw metrics` against real trainer output: cw's rendered TRL SFT run trains on CPU (as in
test_trl_cpu.py), its raw stdout+stderr (tqdm's \\r bars included) is captured byte for byte,
and the series parsed from that log must equal the numbers of the same run's
trainer_state.json log_history: same steps, same values (the log prints them rounded to 4
significant digits, so the state's values are rounded the same way before comparing).

With CW_RECORD_METRICS_FIXTURES=1 the captured log and trainer_state.json are (re)written to
tests/fixtures/metrics/, the recorded output the unit and cluster tests use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_trl_cpu import CPU_OVERRIDES
from training_helpers import CONFIGS_DIR, OFFLINE_ENV, REPO, RewardServerProcess

from cw_cli.localrun.runner import LocalRunner
from cw_cli.metrics.parse import RecordParser, RunMetrics, default_metrics, records_from_log_history
from cw_cli.metrics.sources import load_path

pytestmark = pytest.mark.training

FIXTURES = REPO / "tests" / "fixtures" / "metrics"
STEPS = 6


def capture_trainer(manifests: list[dict], checkpoints: Path, workdir: Path, overrides: dict,
                    extra_env: dict | None = None) -> bytes:
    """Run the trainer's exact command with stdout and stderr into one file, as a terminal or a
    container runtime sees them (the local runner's line reader would turn \\r into lines)."""
    runner = LocalRunner(manifests, checkpoints, workdir=workdir, config_overrides={**CPU_OVERRIDES, **overrides},
                         extra_env={**OFFLINE_ENV, **(extra_env or {})}, cpu_only=True)
    prepared = runner.prepare()
    log = workdir / "trainer.out"
    with open(log, "wb") as fh:
        done = subprocess.run(prepared.command, cwd=prepared.cwd, env=prepared.env, stdout=fh,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=900)
    raw = log.read_bytes()
    assert done.returncode == 0, raw.decode(errors="replace")[-6000:]
    return raw


def four_digits(value: float) -> float:
    """What transformers 5's ProgressCallback prints for a float (``f"{v:.4g}"``)."""
    return float(f"{value:.4g}")


def record_fixture(kind: str, raw: bytes, history: list) -> None:
    """Keep the captured output as the recorded fixture (CW_RECORD_METRICS_FIXTURES=1 only)."""
    if os.environ.get("CW_RECORD_METRICS_FIXTURES") != "1":
        return
    import transformers
    import trl

    FIXTURES.mkdir(parents=True, exist_ok=True)
    stem = f"trl-{trl.__version__}-transformers-{transformers.__version__}-{kind}"
    (FIXTURES / f"{stem}.log").write_bytes(raw)
    (FIXTURES / f"{stem}.trainer_state.json").write_text(json.dumps({"log_history": history}, indent=1) + "\n")


def assert_log_matches_state(raw: bytes, history: list) -> list:
    """The training records parsed from the raw log equal the state's, step by step."""
    parsed = list(RecordParser().feed_all(raw.decode("utf-8", errors="replace").split("\n")))
    train = [r for r in parsed if r.kind == "train"]
    expected = [r for r in records_from_log_history(history) if r.kind == "train"]
    assert [r.step for r in train] == [r.step for r in expected] == list(range(1, STEPS + 1))
    for got, want in zip(train, expected):
        assert set(got.values) == set(want.values), (got, want)
        for name, value in want.values.items():
            assert got.values[name] == four_digits(value), (got.step, name, got.values[name], value)
    # The last record is the end-of-training summary, on the last step, not a step of its own.
    assert parsed[-1].kind == "summary" and parsed[-1].step == STEPS and "train_loss" in parsed[-1].values
    return parsed


def test_log_of_a_real_sft_run_parses_to_its_trainer_state(render_plan, with_launcher, tiny_model, sft_dataset,
                                                           tmp_path):
    manifests, _ = with_launcher(render_plan(
        "trl", "sft", CONFIGS_DIR / "trl-sft.yaml", run_name="t-metrics",
        sets=[f"model_name_or_path={tiny_model}", f"dataset_name={sft_dataset}"],
    ))
    checkpoints = tmp_path / "checkpoints"
    workdir = tmp_path / "run"
    workdir.mkdir()
    raw = capture_trainer(manifests, checkpoints, workdir, {"max_length": 64, "max_steps": STEPS, "save_steps": 3})
    assert b"\r" in raw, "expected tqdm's progress bars in the raw output"

    state_path = checkpoints / "t-metrics" / f"checkpoint-{STEPS}" / "trainer_state.json"
    history = json.loads(state_path.read_text())["log_history"]
    assert_log_matches_state(raw, history)
    record_fixture("sft", raw, history)
    train = [r for r in RecordParser().feed_all(raw.decode().split("\n")) if r.kind == "train"]
    expected = [r for r in records_from_log_history(history) if r.kind == "train"]

    # The same through the path sources: the output folder (newest checkpoint) and the log file.
    from_folder = load_path(checkpoints / "t-metrics")
    assert from_folder.source == str(state_path) and from_folder.step_source == "logged"
    assert from_folder.series()["loss"] == [(r.step, r.values["loss"]) for r in expected]
    (workdir / "run.log").write_bytes(raw)
    from_log = load_path(workdir / "run.log")
    assert from_log.series()["loss"] == [(r.step, r.values["loss"]) for r in train]

    # And `cw metrics` as a user runs it, on the folder.
    done = subprocess.run([sys.executable, "-m", "cw_cli", "metrics", str(checkpoints / "t-metrics"), "-o", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["runs"][0]
    assert [(p["step"], p["value"]) for p in run["series"]["loss"]] == from_folder.series()["loss"]


def test_log_of_a_real_grpo_run_parses_to_its_trainer_state(render_plan, with_launcher, tiny_model,
                                                            tiny_reward_model, grpo_dataset, tmp_path):
    manifests, _ = with_launcher(render_plan(
        "trl", "grpo", CONFIGS_DIR / "trl-grpo.yaml", run_name="t-metrics-grpo",
        sets=[f"model_name_or_path={tiny_model}", f"dataset_name={grpo_dataset}",
              f"services.reward.model={tiny_reward_model}"],
    ))
    checkpoints = tmp_path / "checkpoints"
    workdir = tmp_path / "run"
    workdir.mkdir()
    server_file = LocalRunner(manifests, checkpoints, workdir=tmp_path / "files").prepare().files["cw_reward_server.py"]
    server = RewardServerProcess(server_file, tiny_reward_model, tmp_path / "reward.log")
    try:
        grpo = {"use_vllm": False, "vllm_mode": None, "vllm_server_host": None, "vllm_server_port": None,
                "num_generations": 2, "max_completion_length": 8, "max_prompt_length": None,
                "temperature": 1.0, "max_steps": STEPS, "save_steps": 3}
        raw = capture_trainer(manifests, checkpoints, workdir, grpo, extra_env={"CW_REWARD_URL": server.url})
    finally:
        server.stop()
    history = json.loads((checkpoints / "t-metrics-grpo" / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    parsed = assert_log_matches_state(raw, history["log_history"])
    record_fixture("grpo", raw, history["log_history"])
    assert {"reward", "rewards/remote_reward/mean", "completions/mean_length"} <= set(parsed[0].values)
    assert default_metrics([RunMetrics("r", "log", records=parsed)]) == ["reward"]
