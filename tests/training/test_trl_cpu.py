"""The training containers really train: cw's rendered TRL trainer (ConfigMap + command) is run
through cw's local runner on CPU with a tiny random Llama, offline.

For each of ``configs/trl-{sft,dpo,grpo}.yaml`` the plan is rendered by cw_cli.render.plan (as
``--dry-run`` would print it), with the model and dataset pointed at local fixtures via
``--set``; the local runner writes the ConfigMap files, maps /etc/cw and /checkpoints, and runs
the trainer container's exact command. CPU-only knobs (use_cpu, bf16: false, tiny batch and
step counts) are applied to config.yaml as overrides.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from training_helpers import CONFIGS_DIR, OFFLINE_ENV, RewardServerProcess

from cw_cli.localrun.runner import LocalRunner

pytestmark = pytest.mark.training

CPU_OVERRIDES = {
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    "logging_steps": 1,
    "save_steps": 2,
    "save_strategy": "steps",
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "dataloader_num_workers": 0,
    "seed": 0,
    "max_steps": 2,
}


def run_trainer(manifests: list[dict], checkpoints: Path, workdir: Path, overrides: dict, extra_env=None):
    runner = LocalRunner(
        manifests,
        checkpoints,
        workdir=workdir,
        config_overrides={**CPU_OVERRIDES, **overrides},
        extra_env={**OFFLINE_ENV, **(extra_env or {})},
        cpu_only=True,
    )
    prepared = runner.prepare()
    started = time.monotonic()
    lines: list[str] = []
    code = runner.run(lines.append)
    elapsed = time.monotonic() - started
    log = "\n".join(lines)
    (workdir / "trainer.log").write_text(log)
    assert code == 0, f"trainer exited {code}; command {prepared.command}\n{log[-6000:]}"
    return prepared, log, elapsed


def trainer_state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def losses(state: dict, key: str = "loss") -> list[float]:
    return [entry[key] for entry in state["log_history"] if key in entry]


def assert_trained(output_dir: Path, steps: int, loss_key: str = "loss") -> dict:
    checkpoint = output_dir / f"checkpoint-{steps}"
    assert checkpoint.is_dir(), f"no {checkpoint.name} in {sorted(p.name for p in output_dir.iterdir())}"
    assert any(checkpoint.glob("*.safetensors")), "checkpoint has no weights"
    assert (checkpoint / "optimizer.pt").is_file(), "checkpoint has no optimizer state (cannot resume)"
    state = trainer_state(checkpoint)
    assert state["global_step"] == steps
    values = losses(state, loss_key)
    assert values, f"no {loss_key!r} logged: {state['log_history']}"
    assert all(math.isfinite(v) for v in values), values
    assert (output_dir / "config.json").is_file(), "final model not saved to output_dir"
    return state


def test_trl_sft_trains_then_resumes(render_plan, with_launcher, tiny_model, sft_dataset, tmp_path):
    manifests, _ = with_launcher(
        render_plan(
            "trl", "sft", CONFIGS_DIR / "trl-sft.yaml", run_name="t-sft",
            sets=[f"model_name_or_path={tiny_model}", f"dataset_name={sft_dataset}"],
        )
    )
    checkpoints = tmp_path / "checkpoints"
    output_dir = checkpoints / "t-sft"
    overrides = {"max_length": 64}

    _, log, first = run_trainer(manifests, checkpoints, tmp_path / "run1", overrides)
    assert "no checkpoint in" in log  # cw_entrypoint looked, found nothing, started fresh
    state = assert_trained(output_dir, 2)
    assert len(losses(state)) == 2

    # Tag the saved state: only a run that loads this checkpoint carries the tag forward.
    marker = {"cw_resume_marker": 1, "step": 2}
    ckpt2 = output_dir / "checkpoint-2"
    tagged = trainer_state(ckpt2)
    tagged["log_history"].append(marker)
    (ckpt2 / "trainer_state.json").write_text(json.dumps(tagged))

    _, log, second = run_trainer(manifests, checkpoints, tmp_path / "run2", {**overrides, "max_steps": 4})
    assert f"resuming from checkpoint {ckpt2}" in log
    assert f"--resume_from_checkpoint {ckpt2}" in log
    state = assert_trained(output_dir, 4)
    assert marker in state["log_history"], "checkpoint-4 does not descend from checkpoint-2"
    steps_logged = [e["step"] for e in state["log_history"] if "loss" in e]
    assert steps_logged == [1, 2, 3, 4]
    print(f"\nsft: first run {first:.1f}s, resumed run {second:.1f}s")


def test_trl_dpo_trains(render_plan, with_launcher, tiny_model, dpo_dataset, tmp_path):
    manifests, _ = with_launcher(
        render_plan(
            "trl", "dpo", CONFIGS_DIR / "trl-dpo.yaml", run_name="t-dpo",
            sets=[f"model_name_or_path={tiny_model}", f"dataset_name={dpo_dataset}"],
        )
    )
    checkpoints = tmp_path / "checkpoints"
    _, _, elapsed = run_trainer(manifests, checkpoints, tmp_path / "run", {"max_length": 64})
    state = assert_trained(checkpoints / "t-dpo", 2)
    assert any("rewards/chosen" in e for e in state["log_history"]), state["log_history"]
    print(f"\ndpo: {elapsed:.1f}s")


def test_trl_grpo_with_reward_server_and_user_reward(
    render_plan, with_launcher, tiny_model, tiny_reward_model, grpo_dataset, tmp_path
):
    manifests, _ = with_launcher(
        render_plan(
            "trl", "grpo", CONFIGS_DIR / "trl-grpo.yaml", run_name="t-grpo",
            sets=[
                f"model_name_or_path={tiny_model}",
                f"dataset_name={grpo_dataset}",
                f"services.reward.model={tiny_reward_model}",
            ],
        )
    )
    config_map = next(m for m in manifests if m["kind"] == "ConfigMap")["data"]
    assert {"cw_reward.py", "cw_reward_server.py", "rewards.py"} <= set(config_map), sorted(config_map)

    checkpoints = tmp_path / "checkpoints"
    workdir = tmp_path / "run"
    # Start the reward server from the file cw ships in the ConfigMap (written by the runner).
    runner = LocalRunner(manifests, checkpoints, workdir=workdir)
    shipped_server = runner.prepare().files["cw_reward_server.py"]
    server = RewardServerProcess(shipped_server, tiny_reward_model, tmp_path / "reward.log")
    try:
        grpo = {
            "use_vllm": False,  # no vLLM on CPU: generate with the policy itself
            "vllm_mode": None,
            "vllm_server_host": None,
            "vllm_server_port": None,
            "num_generations": 2,
            "max_completion_length": 8,
            "max_prompt_length": None,
            "temperature": 1.0,
        }
        _, log, elapsed = run_trainer(
            manifests, checkpoints, workdir, grpo, extra_env={"CW_REWARD_URL": server.url}
        )
        stats = server.stats()
    finally:
        server.stop()
    assert stats["requests"] >= 2 and stats["texts"] >= 4, stats
    assert stats["errors"] == 0, stats
    state = assert_trained(checkpoints / "t-grpo", 2)
    for name in ("remote_reward", "length_penalty"):
        values = [e[f"rewards/{name}/mean"] for e in state["log_history"] if f"rewards/{name}/mean" in e]
        assert len(values) == 2 and all(math.isfinite(v) for v in values), (name, state["log_history"])
    print(f"\ngrpo: {elapsed:.1f}s, reward server {stats}")


def test_reward_server_scores_with_a_real_model(reward_server):
    import urllib.request

    def post(payload):
        req = urllib.request.Request(reward_server.url + "/score", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["scores"]

    texts = ["the cat is happy .", "a dog", "two plus three equals five .", "no", "sun"]
    scores = post({"texts": texts})
    assert len(scores) == 5 and all(math.isfinite(s) for s in scores)
    assert post({"texts": texts[:1]}) == pytest.approx(scores[:1], abs=1e-4)  # padding does not change scores
    convs = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]]
    assert len(post({"messages": convs})) == 1
    assert reward_server.stats()["texts"] == 7


def test_config_as_written_for_a_workstation_keeps_its_outputs_on_the_volume_and_resumes(
    render_plan, with_launcher, tiny_model, sft_dataset, tmp_path
):
    """A user's own config: a relative `output_dir` and a dataset folder next to the file. The
    exact rendered command (the ConfigMap, /checkpoints mapped to a local folder) writes the
    checkpoint into the run's folder on the volume; relaunching the same config resumes from it;
    another model under the same run name is refused instead of resuming from or overwriting it."""
    import shutil

    import yaml

    user = tmp_path / "workstation"
    shutil.copytree(sft_dataset, user / "data" / "sft")
    config = user / "sft.yaml"
    config.write_text(yaml.safe_dump({
        "checkpoint_volume": "ckpts",
        "model_name_or_path": str(tiny_model),
        "dataset_name": "data/sft",          # relative to the config, shipped with the run
        "output_dir": "outputs/tiny-sft",    # relative: lands in /checkpoints/<run>/outputs/tiny-sft
        "max_length": 64,
    }))
    manifests, _ = with_launcher(render_plan("trl", "sft", config, run_name="t-rel"))
    checkpoints = tmp_path / "volume"
    output_dir = checkpoints / "t-rel" / "outputs" / "tiny-sft"

    prepared, log, _ = run_trainer(manifests, checkpoints, tmp_path / "run1", {})
    assert prepared.cwd == checkpoints / "t-rel"
    assert "no checkpoint in outputs/tiny-sft" in log
    assert_trained(output_dir, 2)
    assert json.loads((checkpoints / "t-rel" / ".cw-run.json").read_text())["model"] == str(tiny_model)

    _, log, _ = run_trainer(manifests, checkpoints, tmp_path / "run2", {"max_steps": 4})
    assert "resuming from checkpoint outputs/tiny-sft/checkpoint-2" in log
    state = assert_trained(output_dir, 4)
    assert [e["step"] for e in state["log_history"] if "loss" in e] == [1, 2, 3, 4]

    other = yaml.safe_load(config.read_text()) | {"model_name_or_path": "someone/else"}
    config.write_text(yaml.safe_dump(other))
    manifests, _ = with_launcher(render_plan("trl", "sft", config, run_name="t-rel"))
    runner = LocalRunner(manifests, checkpoints, workdir=tmp_path / "run3", extra_env=OFFLINE_ENV, cpu_only=True)
    lines: list[str] = []
    assert runner.run(lines.append) == 3
    assert "holds the outputs of another run" in "\n".join(lines)


def test_trl_reports_to_wandb_under_the_cw_run_name_and_a_relaunch_resumes_it(
    render_plan, with_launcher, tiny_model, sft_dataset, tmp_path
):
    """The W&B run id and name cw sets are the ones wandb itself uses (offline mode, no network)."""
    manifests, _ = with_launcher(
        render_plan(
            "trl", "sft", CONFIGS_DIR / "trl-sft.yaml", run_name="t-wandb",
            sets=[f"model_name_or_path={tiny_model}", f"dataset_name={sft_dataset}", "report_to=wandb",
                  "secrets.WANDB_API_KEY=wandb"],
        )
    )
    checkpoints, wandb_dir = tmp_path / "checkpoints", tmp_path / "wandb-dir"
    wandb_dir.mkdir()
    offline = {"WANDB_MODE": "offline", "WANDB_DISABLED": "false", "WANDB_DIR": str(wandb_dir), "WANDB_API_KEY": "x" * 40}
    run_trainer(manifests, checkpoints, tmp_path / "run1", {"max_length": 64, "report_to": "wandb"}, offline)
    runs = sorted((wandb_dir / "wandb").glob("offline-run-*"))
    assert [run.name.rsplit("-", 2)[-2:] for run in runs] == [["t", "wandb"]], runs  # id = the run name
    # A relaunch of the same run (cw_entrypoint resumes its checkpoint) logs to the same W&B run id.
    run_trainer(manifests, checkpoints, tmp_path / "run2", {"max_length": 64, "report_to": "wandb", "max_steps": 4}, offline)
    runs = sorted((wandb_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(run.name.endswith("-t-wandb") for run in runs), runs
