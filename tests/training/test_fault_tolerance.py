"""A warned fault costs at most one step, a save cut short is never resumed from, a stall is caught
(issue 34), proven on CPU with cw's rendered TRL trainer (the exact ConfigMap and command, through
cw_entrypoint.py and cw_fault.py) and a tiny random Llama, offline.

The signals are sent as the cluster sends them: SIGTERM to the entrypoint alone (the kubelet
signals PID 1 of the container), SIGKILL to every process (the kubelet after the grace period, a
lost node). Test-only behaviour (slow steps, a slow save) comes from tests/training/fault_hooks/,
a sitecustomize that cw's own shim chains to.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from training_helpers import CONFIGS_DIR, OFFLINE_ENV, RUNTIME_DIR

from cw_cli.localrun.runner import LocalRunner

pytestmark = pytest.mark.training

HOOKS = Path(__file__).resolve().parent / "fault_hooks"
CPU = {
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_steps": 1000,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "dataloader_num_workers": 0,
    "seed": 0,
    "max_length": 64,
    "max_steps": 400,
}


def _entrypoint():
    sys.path.insert(0, str(RUNTIME_DIR))
    import cw_entrypoint

    return cw_entrypoint


class Trainer:
    """The trainer container of a rendered plan, run by cw's local runner in a thread."""

    def __init__(self, manifests, checkpoints: Path, workdir: Path, overrides: dict, env: dict | None = None):
        self.tmp = workdir / "tmp"
        self.tmp.mkdir(parents=True)
        extra = {**OFFLINE_ENV, "TMPDIR": str(self.tmp), "PYTHONPATH": str(HOOKS), **(env or {})}
        self.runner = LocalRunner(manifests, checkpoints, workdir=workdir, config_overrides={**CPU, **overrides},
                                  extra_env=extra, cpu_only=True)  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self.code: int | None = None
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.runner.run(lambda line: self.lines.append((time.monotonic(), line)))

    @property
    def log(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def ranks(self) -> list[dict]:
        found = []
        for path in self.tmp.glob("cw-ft-*/ranks/rank-*.json"):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                pass
        return found

    def wait_for(self, condition, timeout: float = 240, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            assert self.thread.is_alive(), f"trainer ended ({self.code}) before {what}:\n{self.log[-5000:]}"
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log[-5000:]}")

    def step(self) -> int:
        return max((r["step"] for r in self.ranks()), default=-1)

    def join(self, timeout: float = 300) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"trainer did not end:\n{self.log[-5000:]}"
        assert self.code is not None
        return self.code

    def kill_everything(self) -> None:
        """SIGKILL to every process of the pod: the entrypoint's group and the command's."""
        groups = {os.getpgid(r["pid"]) for r in self.ranks()}
        groups.add(self.runner.process.pid)
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def sft_plan(render_plan, tiny_model, sft_dataset):
    def render(run_name: str, gpu: int = 0) -> list[dict]:
        manifests = render_plan("trl", "sft", CONFIGS_DIR / "trl-sft.yaml", run_name=run_name, gpu=gpu,
                                sets=[f"model_name_or_path={tiny_model}", f"dataset_name={sft_dataset}"])  # fmt: skip
        data = next(m for m in manifests if m["kind"] == "ConfigMap")["data"]
        assert {"cw_entrypoint.py", "cw_fault.py"} <= set(data), sorted(data)
        return manifests

    return render


def _state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def _first_step_after(trainer: Trainer, start: float) -> float:
    for stamp, line in trainer.lines:
        if "'loss'" in line or '"loss"' in line:
            return stamp - start
    raise AssertionError(f"no step logged:\n{trainer.log[-3000:]}")


# One process is proven in a real pod on the test cluster's real node (the kubelet's SIGTERM to PID 1,
# the Job's next pod resuming: tests/cluster/test_the_real_node_trains_and_leaves_nothing.py); the
# step bounds and every rank's save are proven here, on 2 ranks.
@pytest.mark.parametrize("ranks", [2])
def test_sigterm_stops_every_rank_at_the_next_step_with_a_complete_checkpoint_and_a_relaunch_resumes(
    sft_plan, tmp_path, ranks
):
    """2 CPU ranks (gloo) through accelerate launch as rendered for 2 GPUs."""
    manifests = sft_plan("t-term", gpu=0 if ranks == 1 else ranks)
    checkpoints = tmp_path / "volume"
    output_dir = checkpoints / "t-term"
    target = random.randint(3, 12)
    # Steps of half a second (on a GPU a step takes seconds): "the next step" is then well defined.
    trainer = Trainer(manifests, checkpoints, tmp_path / "run1", {}, {"CW_TEST_STEP_SLEEP": "0.5"})
    trainer.wait_for(lambda: len(trainer.ranks()) == ranks and trainer.step() >= target, what=f"step {target}")
    seen = trainer.step()
    signalled = time.monotonic()
    os.kill(trainer.runner.process.pid, signal.SIGTERM)  # the kubelet signals PID 1 only
    code = trainer.join()
    to_exit = time.monotonic() - signalled
    assert code == 143, trainer.log[-5000:]  # not 0: a Job would count the pod as succeeded
    checkpoint = _entrypoint().latest_checkpoint(output_dir)
    assert checkpoint is not None, trainer.log[-5000:]
    step = _state(checkpoint)["global_step"]
    assert seen <= step <= seen + 1, (seen, step)
    assert (checkpoint / ".cw-complete").is_file() and (checkpoint / "optimizer.pt").is_file()
    assert not (output_dir / "config.json").exists(), "the final model was saved although training was cut short"
    assert f"stopped at step {step} with a complete checkpoint" in trainer.log
    assert trainer.log.count(f"stop requested: saving a checkpoint at step {step}") == ranks  # every rank, one step

    relaunch = Trainer(manifests, checkpoints, tmp_path / "run2", {"max_steps": step + 3})
    assert relaunch.join() == 0, relaunch.log[-5000:]
    resumed = _first_step_after(relaunch, relaunch.started)
    assert f"resuming from checkpoint {checkpoint}" in relaunch.log
    final = _state(output_dir / f"checkpoint-{step + 3}")
    assert [e["step"] for e in final["log_history"] if "loss" in e] == list(range(1, step + 4))
    print(f"\n{ranks} rank(s): SIGTERM at step {seen} (target {target}): checkpoint-{step}, exit 143 {to_exit:.1f}s after; "
          f"relaunch to first resumed step {resumed:.1f}s")  # fmt: skip
    print(next(line for line in trainer.log.splitlines() if "stopped at step" in line))


@pytest.mark.parametrize("point", ["rng", "after_state"])
def test_a_kill_in_the_middle_of_a_save_leaves_a_checkpoint_the_entrypoint_skips(sft_plan, tmp_path, point):
    """``rng``: killed before trainer_state.json; ``after_state``: after it, before every rank is done
    (cw's .cw-complete marker is missing). Either way the relaunch resumes from the one before."""
    manifests = sft_plan("t-kill")
    checkpoints = tmp_path / "volume"
    output_dir = checkpoints / "t-kill"
    sentinel = tmp_path / "saving"
    env = {"CW_TEST_SLOW_SAVE_AT": "4", "CW_TEST_SENTINEL": str(sentinel), "CW_TEST_SLOW_SAVE_POINT": point}
    trainer = Trainer(manifests, checkpoints, tmp_path / "run1", {"save_steps": 2}, env)
    trainer.wait_for(sentinel.exists, what="the slow save of checkpoint-4")
    trainer.kill_everything()
    assert trainer.join() == -signal.SIGKILL
    assert (output_dir / "checkpoint-4").is_dir()
    assert (output_dir / "checkpoint-4" / "trainer_state.json").is_file() == (point == "after_state")
    assert not (output_dir / "checkpoint-4" / ".cw-complete").exists()
    assert _entrypoint().latest_checkpoint(output_dir) == output_dir / "checkpoint-2"

    relaunch = Trainer(manifests, checkpoints, tmp_path / "run2", {"save_steps": 2, "max_steps": 6})
    assert relaunch.join() == 0, relaunch.log[-5000:]
    assert f"resuming from checkpoint {output_dir / 'checkpoint-2'}" in relaunch.log
    final = _state(output_dir / "checkpoint-6")
    assert [e["step"] for e in final["log_history"] if "loss" in e] == [1, 2, 3, 4, 5, 6]


def _two_ranks(trainer: Trainer, step: int) -> None:
    trainer.wait_for(lambda: len(trainer.ranks()) == 2 and min(r["step"] for r in trainer.ranks()) >= step,
                     what=f"both ranks at step {step}")  # fmt: skip


def test_a_rank_stopped_with_sigstop_is_caught_its_stacks_and_the_others_saved_and_the_pod_exits_to_restart(
    sft_plan, tmp_path
):
    """2 CPU ranks (gloo, through accelerate launch as rendered for 2 GPUs); rank 1 is stopped. The
    derived timeout (floor 5 s here; 5 x the slowest step) fires, both ranks' stacks are written."""
    manifests = sft_plan("t-stall", gpu=2)
    run_dir = tmp_path / "volume" / "t-stall"
    env = {"CW_STALL_FLOOR": "5", "CW_TEST_STEP_SLEEP": "0.3"}
    trainer = Trainer(manifests, tmp_path / "volume", tmp_path / "run1", {}, env)
    _two_ranks(trainer, 6)
    victim = next(r for r in trainer.ranks() if r["rank"] == 1)
    os.kill(victim["pid"], signal.SIGSTOP)
    stopped = time.monotonic()
    code = trainer.join()
    detected = time.monotonic() - stopped
    assert code == 75, trainer.log[-5000:]
    stall = json.loads((run_dir / ".cw" / "stall.json").read_text())
    assert stall["ranks"] == [0, 1] and stall["timeout_derived"] and stall["timeout_s"] >= 5
    assert detected <= stall["timeout_s"] + 15, (detected, stall)  # + polling, the stack dump, the kill
    for rank in (0, 1):
        stacks = (run_dir / stall["stacks"] / f"rank-{rank}.txt").read_text()
        assert "most recent call first" in stacks and "File " in stacks, stacks
    assert "stalled since" in trainer.log and f"stacks in {run_dir / stall['stacks']}" in trainer.log
    for rank in trainer.ranks():
        with pytest.raises(ProcessLookupError):
            os.kill(rank["pid"], 0)
    print(f"\nstall: SIGSTOP to exit 75 in {detected:.1f}s (timeout {stall['timeout_s']}s); {stall}")


def test_a_healthy_run_with_slow_steps_raises_no_alarm(sft_plan, tmp_path):
    """Steps of 2 s against a floor of 1 s: the timeout follows the run's own steps."""
    manifests = sft_plan("t-slow", gpu=2)
    env = {"CW_STALL_FLOOR": "1", "CW_TEST_STEP_SLEEP": "2"}
    trainer = Trainer(manifests, tmp_path / "volume", tmp_path / "run1", {"max_steps": 8, "save_steps": 4}, env)
    assert trainer.join() == 0, trainer.log[-5000:]
    assert not (tmp_path / "volume" / "t-slow" / ".cw" / "stall.json").exists()
    assert "stalled" not in trainer.log


def test_cw_local_stops_with_a_checkpoint_on_sigterm_and_the_same_name_resumes(tiny_model, sft_dataset, tmp_path):
    """`cw trl sft CONFIG --local`, SIGTERM to cw itself (as a user tries it on a laptop)."""
    import subprocess

    def launch(max_steps: int, temp: Path) -> subprocess.Popen:
        sets = {**CPU, "model_name_or_path": tiny_model, "dataset_name": sft_dataset, "max_steps": max_steps,
                "use_cpu": "true", "bf16": "false", "checkpoint_volume": "null", "secrets": "{}"}  # fmt: skip
        args = [sys.executable, "-m", "cw_cli", "trl", "sft", str(CONFIGS_DIR / "trl-sft.yaml"), "--local", "--name", "t-local"]
        for key, value in sets.items():
            args += ["--set", f"{key}={value}"]
        temp.mkdir()
        env = {**os.environ, **OFFLINE_ENV, "TMPDIR": str(temp), "PYTHONPATH": str(HOOKS), "CW_TEST_STEP_SLEEP": "0.5"}
        return subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def step(temp: Path) -> int:
        found = [json.loads(p.read_text()) for p in temp.glob("cw-ft-*/ranks/rank-*.json")]
        return max((r["step"] for r in found), default=-1)

    cw = launch(16, tmp_path / "tmp1")
    target = random.randint(3, 10)
    deadline = time.monotonic() + 300
    while step(tmp_path / "tmp1") < target:
        assert cw.poll() is None and time.monotonic() < deadline, cw.communicate()[0][-5000:]
        time.sleep(0.1)
    seen = step(tmp_path / "tmp1")
    signalled = time.monotonic()
    cw.send_signal(signal.SIGTERM)
    output, _ = cw.communicate(timeout=300)
    to_exit = time.monotonic() - signalled
    assert cw.returncode == 130, output[-5000:]  # cw's exit code for an interrupted command
    output_dir = tmp_path / "cw-local" / "t-local" / "t-local"
    checkpoint = _entrypoint().latest_checkpoint(output_dir)
    assert checkpoint is not None, output[-5000:]
    saved = _state(checkpoint)["global_step"]
    assert seen <= saved <= seen + 1 and (checkpoint / ".cw-complete").is_file(), (seen, saved)

    again = launch(16, tmp_path / "tmp2")  # the same command: the same config
    output, _ = again.communicate(timeout=600)
    assert again.returncode == 0, output[-5000:]
    assert f"resuming from checkpoint {checkpoint}" in output, output[-5000:]
    final = _state(output_dir / "checkpoint-16")
    assert [e["step"] for e in final["log_history"] if "loss" in e] == list(range(1, 17))
    print(f"\ncw --local: SIGTERM at step {seen}, checkpoint-{saved}, cw exited {to_exit:.1f}s later")


def test_sigterm_to_a_rank_itself_also_ends_in_a_checkpoint_and_the_restart_code(sft_plan, tmp_path):
    """A user's `kill <trainer pid>` (or a launcher forwarding SIGTERM): the rank's own handler asks."""
    manifests = sft_plan("t-rank")
    trainer = Trainer(manifests, tmp_path / "volume", tmp_path / "run1", {}, {"CW_TEST_STEP_SLEEP": "0.5"})
    trainer.wait_for(lambda: trainer.step() >= 3, what="step 3")
    seen = trainer.step()
    os.kill(trainer.ranks()[0]["pid"], signal.SIGTERM)
    assert trainer.join() == 143, trainer.log[-5000:]
    checkpoint = _entrypoint().latest_checkpoint(tmp_path / "volume" / "t-rank")
    assert checkpoint is not None and seen <= _state(checkpoint)["global_step"] <= seen + 1
