"""A run stopped 3 times and resumed each time logs the curve of the run that was never stopped
(issue 34): cw's rendered TRL trainer (ConfigMap + exact command, through cw_entrypoint.py and
cw_fault.py as the pod runs them) on CPU with a tiny random Llama and local data, offline.

Each stop is a SIGTERM to the entrypoint alone (what the kubelet sends PID 1): the ranks stop at
the next step end with a complete checkpoint, the pod exits 143, and the next launch of the same
command in the same run folder resumes from it (``--resume_from_checkpoint``, added by the
entrypoint). The per-step ``log_history`` of the final ``trainer_state.json`` (loss, learning
rate, grad norm, and for GRPO the reward and its parts) is compared with the uninterrupted run's
with the same seed: equal within :data:`TOLERANCE`. GRPO generates with the policy itself (no
vLLM on CPU), sampling at temperature 1, so the generation RNG must continue too.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

from cw_cli.localrun.runner import LocalRunner

pytestmark = pytest.mark.training

HOOKS = Path(__file__).resolve().parent / "fault_hooks"  # CW_TEST_STEP_SLEEP: steps long enough to be signalled
#: Largest |resumed - uninterrupted| of any logged value (relative for values above 1). Measured
#: 2026-11-27: 0.0 (bit-equal) for SFT, GRPO and RLOO (torch 2.15, TRL 1.16, CPU); the margin
#: allows another CPU's kernels.
TOLERANCE = 1e-6
STOPS = 3
BASE = {
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_steps": 1000,  # only cw's stops (and the end) save: every resume is from a stop
    "gradient_accumulation_steps": 1,
    "dataloader_num_workers": 0,
    "seed": 7,
}
SFT = {**BASE, "per_device_train_batch_size": 8, "max_length": 64, "max_steps": 8}  # 32 rows: 2 epochs
RL = {
    **BASE,
    "use_vllm": False,  # no vLLM on CPU: the policy generates (TRL's default)
    "per_device_train_batch_size": 4,
    "num_generations": 2,
    "max_completion_length": 8,
    "max_prompt_length": None,
    "temperature": 1.0,
    "max_steps": 8,
}
#: Logged values that measure time, not training.
_CLOCK = ("runtime", "per_second", "time", "flos")


class Launch:
    """One launch of the trainer container (the local runner in a thread), as a pod runs it."""

    def __init__(self, manifests: list[dict], volume: Path, workdir: Path, overrides: dict) -> None:
        self.tmp = workdir / "tmp"
        self.tmp.mkdir(parents=True)
        env = {**OFFLINE_ENV, "TMPDIR": str(self.tmp), "PYTHONPATH": str(HOOKS), "CW_TEST_STEP_SLEEP": "0.3"}
        self.runner = LocalRunner(manifests, volume, workdir=workdir, config_overrides=overrides, extra_env=env,
                                  cpu_only=True)  # fmt: skip
        self.lines: list[str] = []
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.runner.run(self.lines.append)

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def step(self) -> int:
        """The newest step any rank reported (cw_fault's heartbeats), -1 before the first."""
        steps = []
        for path in self.tmp.glob("cw-ft-*/ranks/rank-*.json"):
            try:
                steps.append(json.loads(path.read_text())["step"])
            except (OSError, ValueError, KeyError):
                pass
        return max(steps, default=-1)

    def stop_after(self, step: int, timeout: float = 300) -> None:
        """SIGTERM to the entrypoint (PID 1 of the pod) once a rank reported ``step``."""
        deadline = time.monotonic() + timeout
        while self.step() < step:
            assert self.thread.is_alive(), f"trainer ended ({self.code}) before step {step}:\n{self.log[-5000:]}"
            assert time.monotonic() < deadline, f"no step {step}:\n{self.log[-5000:]}"
            time.sleep(0.05)
        assert self.runner.process is not None
        os.kill(self.runner.process.pid, signal.SIGTERM)

    def join(self, timeout: float = 600) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"trainer did not end:\n{self.log[-5000:]}"
        assert self.code is not None
        return self.code


def _state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def _curve(state: dict) -> dict[int, dict[str, float]]:
    """Per step, the numbers logged for it (the end-of-training summary has no 'loss' and is left out)."""
    return {
        e["step"]: {k: float(v) for k, v in e.items()
                    if isinstance(v, (int, float)) and k != "step" and not any(c in k for c in _CLOCK)}
        for e in state["log_history"] if "loss" in e
    }  # fmt: skip


def _difference(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    return abs(a - b) / max(1.0, abs(a), abs(b))


def _run_straight_and_stopped(manifests: list[dict], run: str, overrides: dict, tmp_path: Path,
                              counted_per_process: tuple[str, ...] = ()):  # fmt: skip
    """The uninterrupted run, then the same command stopped ``STOPS`` times and resumed each time.

    ``counted_per_process``: logged totals the framework keeps in the trainer object only, not in
    the checkpoint: after a resume they count from 0 again; checked to be exactly that.
    """
    steps = overrides["max_steps"]
    started = time.monotonic()
    straight = Launch(manifests, tmp_path / "straight", tmp_path / "s", overrides)
    assert straight.join() == 0, straight.log[-5000:]
    straight_s = time.monotonic() - started

    volume = tmp_path / "stopped"
    output_dir = volume / run
    stops: list[int] = []
    for i in range(STOPS):
        launch = Launch(manifests, volume, tmp_path / f"r{i}", overrides)
        launch.stop_after((stops[-1] if stops else 0) + 1)
        code = launch.join()
        assert code == 143, f"stop {i + 1}: exit {code}\n{launch.log[-5000:]}"
        newest = max(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        stops.append(_state(newest)["global_step"])
        if i:
            assert f"resuming from checkpoint {output_dir / f'checkpoint-{stops[-2]}'}" in launch.log, launch.log[-5000:]
    assert stops == sorted(set(stops)) and stops[-1] < steps, f"stops must fall before the end: {stops}"
    last = Launch(manifests, volume, tmp_path / "last", overrides)
    assert last.join() == 0, last.log[-5000:]
    assert f"resuming from checkpoint {output_dir / f'checkpoint-{stops[-1]}'}" in last.log, last.log[-5000:]

    want = _curve(_state(tmp_path / "straight" / run / f"checkpoint-{steps}"))
    got = _curve(_state(output_dir / f"checkpoint-{steps}"))
    assert sorted(want) == sorted(got) == list(range(1, steps + 1)), (sorted(want), sorted(got))
    worst: dict[str, float] = {}
    for step in want:
        assert set(want[step]) == set(got[step]), (step, set(want[step]) ^ set(got[step]))
        resumed_at = max((s for s in stops if s < step), default=0)
        for key in counted_per_process:
            since = want[step][key] - (want[resumed_at][key] if resumed_at else 0)
            assert got[step].pop(key) in (want[step][key], since), (key, step, want[step][key], since)
        for key, value in want[step].items():
            if key in counted_per_process:
                continue
            worst[key] = max(worst.get(key, 0.0), _difference(value, got[step][key]))
    total_s = time.monotonic() - started
    print(f"\n{run}: stopped after steps {stops} of {steps}; uninterrupted {straight_s:.1f}s, all {total_s:.1f}s; "
          f"max difference {max(worst.values()):.3g} ({', '.join(f'{k} {v:.3g}' for k, v in sorted(worst.items()))})")
    off = {k: v for k, v in worst.items() if v > TOLERANCE}
    assert not off, f"resumed curve differs from the uninterrupted one: {off}\nwant {want}\ngot {got}"
    return want, got, stops


# Five launches of the exact command (about 10 minutes on 2 cores): CI keeps to the RL variant below,
# which takes the same resume path; CW_LONG_TESTS=1 runs this one too (passed: max difference 0).
@pytest.mark.skipif(os.environ.get("CW_LONG_TESTS") != "1", reason="a 10-minute proof: CW_LONG_TESTS=1 runs it")
def test_sft_stopped_three_times_logs_the_uninterrupted_curve(render_plan, tiny_model, sft_dataset, tmp_path):
    """Two epochs of 4 steps: a stop may fall on the epoch boundary, so the data order of epoch 2
    (the seedable sampler's epoch seed) must continue too."""
    manifests = render_plan("trl", "sft", CONFIGS_DIR / "trl-sft.yaml", run_name="t-sft-resume",
                            sets=[f"model_name_or_path={tiny_model}", f"dataset_name={sft_dataset}"])  # fmt: skip
    # TRL's SFTTrainer counts `num_tokens` in `self._total_train_tokens`, set to 0 in __init__
    # (trl/trainer/sft_trainer.py:1215, TRL 1.16) and never saved: after a resume it counts anew.
    want, _, _ = _run_straight_and_stopped(manifests, "t-sft-resume", SFT, tmp_path, ("num_tokens",))
    assert len({round(v["loss"], 6) for v in want.values()}) > 1, want  # the curve moves


# "rloo" takes the same path (measured once: bit-equal, 456 s here); left out to save 8 minutes of CPU.
@pytest.mark.parametrize("trainer", ["grpo"])
def test_rl_stopped_three_times_logs_the_uninterrupted_loss_and_reward(
    render_plan, tiny_model, grpo_dataset, tmp_path, trainer
):
    """configs/trl-{grpo,rloo}.yaml with their shipped reward function (rewards.length_penalty, a
    file of the run), GRPO without its servers; sampled generations, so the RNG shows in the reward."""
    run = f"t-{trainer}-resume"
    sets = [f"model_name_or_path={tiny_model}", f"dataset_name={grpo_dataset}"]
    manifests = render_plan("trl", trainer, CONFIGS_DIR / f"trl-{trainer}.yaml", run_name=run,
                            sets=sets + (["services={}"] if trainer == "grpo" else []))  # fmt: skip
    config = next(m for m in manifests if m["kind"] == "ConfigMap")["data"]
    assert "rewards.py" in config and "rewards.length_penalty" in config["config.yaml"], sorted(config)
    want, _, _ = _run_straight_and_stopped(manifests, run, RL, tmp_path)
    assert all("reward" in v and "rewards/length_penalty/mean" in v for v in want.values()), want
    assert len({round(v["reward"], 6) for v in want.values()}) > 1, want  # sampling varies per step
