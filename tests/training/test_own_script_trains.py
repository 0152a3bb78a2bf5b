"""A user's own training script, at a git commit, trains through cw: `cw trl sft CONFIG --local`
with `code: {git, commit}` and `script:` clones the commit, runs the script under `accelerate
launch` with the mounted config (its own keys included), and it resumes like `trl sft`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from training_helpers import OFFLINE_ENV

pytestmark = [pytest.mark.training, pytest.mark.skipif(shutil.which("git") is None, reason="needs git")]

#: An open-r1-style script: TrlParser over its own arguments (`system_prompt`, which `trl sft`
#: refuses) and TRL's, a helper imported from the repository's src/ layout.
SCRIPT = '''
from dataclasses import dataclass
from pathlib import Path

from datasets import load_dataset
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser

from myrecipes.marks import MARK


@dataclass
class ScriptArguments:
    dataset_name: str = ""
    system_prompt: str = ""


def main(script_args, training_args, model_args):
    data = load_dataset(script_args.dataset_name, split="train")
    data = data.map(lambda row: {"messages": [{"role": "system", "content": script_args.system_prompt}, *row["messages"]]})
    trainer = SFTTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=data)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    Path(training_args.output_dir, "own-script.json").write_text(
        f'{{"mark": "{MARK}", "system_prompt": "{script_args.system_prompt}", '
        f'"resumed_from": "{training_args.resume_from_checkpoint or ""}"}}'
    )


if __name__ == "__main__":
    main(*TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config())
'''


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _repository(root: Path) -> tuple[Path, str]:
    repo = root / "recipes-repo"
    (repo / "src" / "myrecipes").mkdir(parents=True)
    (repo / "train_sft.py").write_text(SCRIPT)
    (repo / "src" / "myrecipes" / "__init__.py").write_text("")
    (repo / "src" / "myrecipes" / "marks.py").write_text('MARK = "from-the-commit"\n')
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "-qm", "recipe", cwd=repo)
    commit = _git("rev-parse", "HEAD", cwd=repo)
    (repo / "src" / "myrecipes" / "marks.py").write_text('MARK = "a-later-commit"\n')  # not what the run asked for
    _git("commit", "-qam", "later", cwd=repo)
    return repo, commit


def _launch(config: Path, cwd: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "cw_cli", "trl", "sft", str(config), "--local", "--name", "own-script", *flags]
    env = {**os.environ, **OFFLINE_ENV, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_a_script_at_a_git_commit_trains_with_its_own_keys_and_resumes(tiny_model, sft_dataset, tmp_path):
    repo, commit = _repository(tmp_path)
    config = {
        "model_name_or_path": str(tiny_model),
        "dataset_name": str(sft_dataset),
        "system_prompt": "you are a cat",
        "max_steps": 1,
        "save_steps": 1,
        "max_length": 64,
        "per_device_train_batch_size": 2,
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "checkpoint_volume": "none",
        "code": {"git": f"file://{repo}", "commit": commit},
        "script": "train_sft.py",
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(config))
    first = _launch(path, tmp_path)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    output = tmp_path / "cw-local" / "own-script" / "own-script"
    assert json.loads((output / "checkpoint-1" / "trainer_state.json").read_text())["global_step"] == 1
    marks = json.loads((output / "own-script.json").read_text())
    assert marks["mark"] == "from-the-commit" and marks["system_prompt"] == "you are a cat"
    assert f"checked out file://{repo} at {commit}" in first.stdout + first.stderr

    # The same run again, one step further (a changed config, so --resume): cw's launcher resumes
    # the script from checkpoint-1, as it does `trl sft`.
    path.write_text(yaml.safe_dump({**config, "max_steps": 2}))
    second = _launch(path, tmp_path, "--resume")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert json.loads((output / "own-script.json").read_text())["resumed_from"].endswith("checkpoint-1")
    assert json.loads((output / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 2
