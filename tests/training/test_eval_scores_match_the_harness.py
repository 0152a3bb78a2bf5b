"""An `eval:` block's evaluation gives the harness's own scores: a tiny Llama trained two steps by
cw's rendered TRL command (through the local runner), then evaluated by the exact command of the
rendered evaluation Job (cw_eval.py running lm-evaluation-harness on a local multiple-choice task
shipped from the config), scores exactly as lm-eval's Python API run by hand on the same
checkpoint. Offline, on CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

from cw_cli.localrun.pod_view import configmap_files, map_paths
from cw_cli.localrun.runner import LocalRunner

pytestmark = pytest.mark.training

TASK_YAML = """\
task: cw_tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/tiny_mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: choices
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""
ROWS = [
    ("what is two plus three ?", ["two plus three equals five .", "the sea is big .", "a dog is fast ."], 0),
    ("why is the sky blue ?", ["a cat was happy .", "the sky is blue because of the sun .", "the moon is up ."], 1),
    ("who is happy ?", ["the sea is cold .", "write a poem .", "the dog is happy ."], 2),
    ("where is the moon ?", ["the moon is up in the sky .", "a model learn .", "the sea is blue ."], 0),
    ("write a poem about the sea .", ["a dog is good .", "the sea is big and blue and cold .", "two plus three ."], 1),
    ("tell me a short story about a cat .", ["the sun is up .", "a reward .", "a small cat was happy in the sun ."], 2),
]
CPU = {"use_cpu": True, "bf16": False, "report_to": "none", "logging_steps": 1, "save_steps": 2, "save_strategy": "steps",
       "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "dataloader_num_workers": 0, "seed": 0,
       "max_steps": 2, "max_length": 64}  # fmt: skip


def _config(folder: Path) -> Path:
    """configs/trl-sft.yaml with an `eval:` block naming a task of the user's own beside it."""
    (folder / "data").mkdir(parents=True)
    (folder / "tiny_mc.yaml").write_text(TASK_YAML)
    rows = [{"question": q, "choices": c, "answer": a} for q, c, a in ROWS]
    (folder / "data" / "tiny_mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = folder / "trl-sft.yaml"
    config.write_text((CONFIGS_DIR / "trl-sft.yaml").read_text() + "eval:\n  tasks: [tiny_mc.yaml]\n"
                      "  metric: cw_tiny_mc/acc_norm\n  limit: 5\n  batch_size: 2\n")  # fmt: skip
    return config


def _run_eval_job(manifests: list[dict], checkpoints: Path, workdir: Path) -> subprocess.CompletedProcess:
    """The evaluation container's exact command, its ConfigMap written where /etc/cw is and the run's
    volume where /checkpoints is (as the local runner maps a trainer's)."""
    job, configmap = manifests
    container = job["spec"]["template"]["spec"]["containers"][0]
    etc = workdir / "etc-cw"
    etc.mkdir(parents=True)
    for key, text in configmap_files(configmap).items():
        (etc / key).write_text(str(text))
    mounts = {"/etc/cw": etc, "/checkpoints": checkpoints}
    command = [map_paths(part, mounts) for part in container["command"]]
    assert command[0] == "python3"
    env = {**OFFLINE_ENV, "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(workdir)}
    return subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, text=True, timeout=1200)


def test_the_rendered_evaluation_scores_as_the_harness_run_by_hand(render_plan, with_launcher, tiny_model, sft_dataset,
                                                                   tmp_path):  # fmt: skip
    pytest.importorskip("lm_eval", reason="the evaluation test needs lm-eval (the 'eval' extra)")
    from cw_cli.config.eval_tasks import check_eval
    from cw_cli.config.loader import load_run_config
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.render.evaluation import EvalResources, eval_manifests, pod_spec, target
    from cw_cli.render.export import ExportFacts

    config = _config(tmp_path / "user")
    sets = [f"model_name_or_path={tiny_model}", f"dataset_name={sft_dataset}"]
    manifests, _ = with_launcher(render_plan("trl", "sft", config, sets=sets, run_name="t-eval"))
    checkpoints = tmp_path / "checkpoints"
    with LocalRunner(manifests, checkpoints, workdir=tmp_path / "run", config_overrides=CPU, extra_env=OFFLINE_ENV,
                     cpu_only=True) as runner:  # fmt: skip
        runner.prepare()
        lines: list[str] = []
        assert runner.run(lines.append) == 0, "\n".join(lines[-80:])
    checkpoint = checkpoints / "t-eval" / "checkpoint-2"
    assert (checkpoint / "config.json").is_file()

    # The evaluation exactly as cw renders it for checkpoint 2 of the run.
    registry = FrameworkRegistry().load_all(include_plugins=False)
    loaded, ttype = registry.resolve_type("trl", "sft")
    spec = load_run_config(config, loaded.framework, ttype, sets=sets).cluster.eval
    assert spec is not None
    problems, users = check_eval(spec, config.parent)
    assert problems == []
    facts = ExportFacts(run_name="t-eval", run_dir="/checkpoints/t-eval", claim="model-checkpoints", image="trainer:1",
                        labels={"cw-cli.dev/run": "t-eval"})  # fmt: skip
    chosen = target(facts.run_dir, "2")
    objects = eval_manifests(facts, pod_spec(spec, users, gpu=0), chosen, EvalResources())
    done = _run_eval_job(objects, checkpoints, tmp_path / "eval")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    scores = json.loads((checkpoint / "cw-eval" / "scores.json").read_text())
    assert set(scores) == {"checkpoint", "step", "model", "harness", "metric", "higher_is_better", "scores", "finished_at"}
    assert (scores["checkpoint"], scores["step"], scores["metric"]) == ("checkpoint-2", 2, "cw_tiny_mc/acc_norm")
    assert scores["harness"].startswith("lm-eval 0.4") and scores["higher_is_better"] is True
    assert list((checkpoint / "cw-eval" / "lm-eval").rglob("results_*.json")), "the harness's own output is kept"

    # lm-eval by hand: its Python API on the same checkpoint, the task from the user's folder.
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    by_hand_dir = tmp_path / "by-hand"
    shutil.copytree(config.parent, by_hand_dir)
    import os

    here = os.getcwd()
    os.chdir(by_hand_dir)  # the task's data_files are relative
    try:
        results = simple_evaluate(model="hf", model_args=f"pretrained={checkpoint}", tasks=["cw_tiny_mc"], limit=5,
                                  batch_size=2, device="cpu",
                                  task_manager=TaskManager(include_path=str(by_hand_dir), include_defaults=False))  # fmt: skip
    finally:
        os.chdir(here)
    by_hand = results["results"]["cw_tiny_mc"]
    assert scores["scores"] == {"cw_tiny_mc/acc": by_hand["acc,none"], "cw_tiny_mc/acc_norm": by_hand["acc_norm,none"]}
    print(f"\nscores of checkpoint-2: {scores['scores']}")
