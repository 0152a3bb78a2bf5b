"""The export gate on real scores: a tiny Llama is the base model, checkpoint-10 a copy of it and
checkpoint-20 a copy whose weights were made worse on purpose (Gaussian noise added to every
weight); each is really evaluated by cw's pod-side evaluation (cw_eval.py running
lm-evaluation-harness, word perplexity of a local text task: lower is better), which writes the
scores files where the run's folder keeps them. The pod-side lister reads them, `best` is
checkpoint-10, and the gate refuses checkpoint-20 naming both perplexities while it lets
checkpoint-10 out. Offline, on CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from training_helpers import OFFLINE_ENV

from cw_cli.errors import GateRefused
from cw_cli.frameworks.runtime_files import RUNTIME_DIR
from cw_cli.render.export import ExportChoice, check_gate
from cw_cli.render.scores import Gate, best_checkpoint
from cw_cli.runtime.cw_artifacts import list_artifacts

pytestmark = pytest.mark.training

METRIC = "cw_tiny_text/word_perplexity"
TASK_YAML = """\
task: cw_tiny_text
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/tiny_text.jsonl
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
"""
TEXTS = ["the sea is big and blue and cold .", "a small cat was happy in the sun .", "the moon is up in the sky .",
         "two plus three equals five .", "the dog is happy ."]  # fmt: skip
SPEC = {"harness": "lm-eval", "tasks": ["cw_tiny_text"], "limit": None, "num_fewshot": None, "gen_kwargs": None,
        "batch_size": 1, "backend": "hf", "device": "cpu", "gpu": 0, "metric": METRIC, "higher_is_better": False,
        "task_files": {"tiny_text.yaml": TASK_YAML,
                       "data/tiny_text.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in TEXTS)}}  # fmt: skip


def _worsen(folder: Path) -> None:
    """Add Gaussian noise to every weight of the model in ``folder`` (made worse on purpose)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    weights = load_file(str(path))
    generator = torch.Generator().manual_seed(0)
    noisy = {name: (w + torch.randn(w.shape, generator=generator) * 0.5).to(w.dtype) if w.is_floating_point() else w
             for name, w in weights.items()}  # fmt: skip
    save_file({name: w.contiguous() for name, w in noisy.items()}, str(path), metadata={"format": "pt"})


def _evaluate(spec: Path, model: Path, out: Path, checkpoint: str, step: int | None, home: Path) -> None:
    command = [sys.executable, str(RUNTIME_DIR / "cw_eval.py"), "--spec", str(spec), "--model", str(model),
               "--out", str(out), "--checkpoint", checkpoint, *(["--step", str(step)] if step is not None else [])]  # fmt: skip
    env = {**OFFLINE_ENV, "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(home)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


# Two real lm-eval runs (about 6 minutes on 2 cores): the gate's rule is held by the unit and cluster
# tests, and cw_eval.py's scores by test_eval_scores_match_the_harness; CW_LONG_TESTS=1 runs this too.
@pytest.mark.skipif(os.environ.get("CW_LONG_TESTS") != "1", reason="a 6-minute proof: CW_LONG_TESTS=1 runs it")
def test_a_checkpoint_made_worse_on_purpose_is_refused_by_the_gate(tiny_model, tmp_path):
    pytest.importorskip("lm_eval", reason="the evaluation needs lm-eval (the 'eval' extra)")
    run = tmp_path / "checkpoints" / "gated"
    for step in (10, 20):
        shutil.copytree(tiny_model, run / f"checkpoint-{step}")
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    _worsen(run / "checkpoint-20")
    spec = tmp_path / "cw-eval.json"
    spec.write_text(json.dumps(SPEC))
    _evaluate(spec, tiny_model, run / "cw-eval" / "base", "base", None, tmp_path)
    for step in (10, 20):
        _evaluate(spec, run / f"checkpoint-{step}", run / f"checkpoint-{step}" / "cw-eval", f"checkpoint-{step}", step, tmp_path)

    listing = list_artifacts(str(run))
    base = listing["base_scores"]["scores"][METRIC]
    scores = {a["step"]: a["scores"]["scores"][METRIC] for a in listing["artifacts"]}
    assert scores[10] == pytest.approx(base) and scores[20] > base * 2, (base, scores)  # the noise made it worse
    assert best_checkpoint(listing)["step"] == 10
    gate = Gate(METRIC, max_drop=1.0, higher_is_better=False)
    with pytest.raises(GateRefused) as refused:
        check_gate(gate, ExportChoice(checkpoint="20"), listing)
    assert refused.value.message.startswith(f"checkpoint-20 scores {METRIC} {scores[20]:.4g}, worse than the base model's {base:.4g}")
    check_gate(gate, ExportChoice(checkpoint="10"), listing)
    print(f"\nword perplexity: base {base:.4g}, checkpoint-10 {scores[10]:.4g}, checkpoint-20 (noised) {scores[20]:.4g}")
