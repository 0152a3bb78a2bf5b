"""Evaluate one model of a run with lm-evaluation-harness (or verifiers' vf-eval) and write its scores beside it.

Runs in the evaluation pod (shipped in its ConfigMap; standard library only). The harness runs as
it is, as its own command (``python -m lm_eval --model hf|vllm ...``): cw computes no metric. Its
results JSON is kept under ``<out>/lm-eval/``; ``<out>/scores.json`` is written last, whole or not
at all (docs/evaluation.md)::

    {"checkpoint": "checkpoint-40", "step": 40, "model": "/checkpoints/run/checkpoint-40",
     "harness": "lm-eval 0.4.13", "metric": "hellaswag/acc_norm", "higher_is_better": true,
     "scores": {"hellaswag/acc_norm": 0.31, "hellaswag/acc": 0.29}, "finished_at": "2026-..Z"}

A score's name is ``<task>/<metric>`` for lm-eval's unfiltered result and
``<task>/<metric>,<filter>`` otherwise (cw_cli/config/eval_tasks.py checks ``metric:`` against the
same names). The evaluation's settings come from ``--spec``, a JSON file cw renders::

    {"tasks": [...], "task_files": {"my_task.yaml": "...", "data.jsonl": "..."}, "limit": 200,
     "num_fewshot": null, "gen_kwargs": "temperature=0", "batch_size": 8, "backend": "hf",
     "device": "cpu", "gpu": 0, "metric": "...", "higher_is_better": true}

Settings with ``"harness": "vf-eval"`` score verifiers environments instead, with verifiers' own
``vf-eval`` against a server started on the model (cw_vf_eval.py, shipped beside this file).

Usage: ``cw_eval.py --spec SPEC --model PATH --out DIR --checkpoint NAME [--step N]``.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

SCORES_FILE = "scores.json"
HARNESS_DIR = "lm-eval"


def lm_eval_command(spec: dict[str, Any], model: str, output_path: str, include_path: str | None) -> list[str]:
    """The harness's command line for ``model`` (the pod's own Python runs ``-m lm_eval``)."""
    backend = spec.get("backend") or "hf"
    model_args = f"pretrained={model}"
    adapter = os.path.join(model, "adapter_config.json")
    if os.path.isfile(adapter):  # a LoRA checkpoint: the base model named in it, with the adapter on top
        with open(adapter, encoding="utf-8") as handle:
            base = json.load(handle).get("base_model_name_or_path") or model
        model_args = f"pretrained={base}," + (f"peft={model}" if backend == "hf" else f"lora_local_path={model},enable_lora=True")
    if backend == "vllm" and int(spec.get("gpu") or 1) > 1:
        model_args += f",tensor_parallel_size={int(spec['gpu'])}"
    command = [sys.executable, "-m", "lm_eval", "--model", backend, "--model_args", model_args,
               "--tasks", ",".join(spec["tasks"]), "--batch_size", str(spec.get("batch_size") or 1),
               "--output_path", output_path]  # fmt: skip
    if backend == "hf":
        command += ["--device", spec.get("device") or "cpu"]
    if spec.get("limit") is not None:
        command += ["--limit", str(spec["limit"])]
    if spec.get("num_fewshot") is not None:
        command += ["--num_fewshot", str(spec["num_fewshot"])]
    if spec.get("gen_kwargs"):
        command += ["--gen_kwargs", str(spec["gen_kwargs"])]
    if include_path:
        command += ["--include_path", include_path]
    return command


def _score_name(task: str, key: str) -> str:
    metric, _, filtered = key.partition(",")
    return f"{task}/{metric}" if filtered in ("", "none") else f"{task}/{metric},{filtered}"


def scores_of(results: dict[str, Any]) -> dict[str, float]:
    """The numbers of lm-eval's ``results`` section, by score name (no standard errors, no aliases)."""
    scores: dict[str, float] = {}
    for task, values in sorted((results.get("results") or {}).items()):
        for key, value in sorted(values.items()):
            if "," not in key or "_stderr," in key or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            scores[_score_name(task, key)] = float(value)
    return scores


def _write_task_files(files: dict[str, str], folder: str) -> None:
    for relative, text in files.items():
        if os.path.isabs(relative) or ".." in relative.split("/"):
            raise SystemExit(f"cw_eval: refusing task file {relative!r} outside the task folder")
        path = os.path.join(folder, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def _harness_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"lm-eval {version('lm_eval')}"
    except PackageNotFoundError:
        return "lm-eval"


def _newest_results(folder: str, since: float) -> str | None:
    found = [p for p in glob.glob(os.path.join(folder, "**", "results_*.json"), recursive=True) if os.path.getmtime(p) >= since]
    return max(found, key=os.path.getmtime) if found else None


def write_json_atomically(path: str, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` whole or not at all (a reader never sees half a file)."""
    folder = os.path.dirname(path) or "."
    fd, temporary = tempfile.mkstemp(prefix=".scores-", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def log_to_wandb(document: dict[str, Any], environ: dict[str, str]) -> bool:
    """Log the scores to W&B where the run reports there (``CW_EVAL_WANDB_RUN``: the evaluation's
    W&B run, ``<run>-eval`` in the run's group), each as ``eval/<score>`` over the trainer's step
    (``train/global_step``, as the Trainer logs it). False where W&B is not configured or installed;
    a W&B failure is said, never the evaluation's."""
    run_id = environ.get("CW_EVAL_WANDB_RUN")
    if not run_id or environ.get("WANDB_MODE") == "disabled" or environ.get("WANDB_DISABLED") in ("true", "1"):
        return False
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        print("cw_eval: W&B is configured but not installed here; scores not logged there", file=sys.stderr, flush=True)
        return False
    try:
        import wandb

        run = wandb.init(id=run_id, name=run_id, group=environ.get("CW_EVAL_WANDB_GROUP"), job_type="eval", resume="allow")
        run.define_metric("train/global_step")
        run.define_metric("eval/*", step_metric="train/global_step")
        values: dict[str, Any] = {f"eval/{name}": value for name, value in document["scores"].items()}
        if document.get("step") is not None:
            values["train/global_step"] = document["step"]
        run.log(values)
        run.finish()
        return True
    except Exception as exc:  # noqa: BLE001 - the scores are on the volume whatever W&B says
        print(f"cw_eval: W&B refused the scores: {exc}", file=sys.stderr, flush=True)
        return False


def _vf_eval(spec: dict[str, Any], model: str, out: str) -> tuple[int, dict[str, float], str]:
    """vf-eval's scores of the environments (cw_vf_eval.py, beside this file in the pod)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cw_vf_eval

    code, scores = cw_vf_eval.evaluate(spec, model, out)
    return code, scores, cw_vf_eval.harness_version()


def _lm_eval(spec: dict[str, Any], model: str, out: str) -> tuple[int, dict[str, float], str]:
    """lm-eval's scores of the tasks, its results kept under ``out/lm-eval``."""
    import time

    output_path = os.path.join(out, HARNESS_DIR)
    started = time.time() - 1
    with tempfile.TemporaryDirectory(prefix="cw-eval-tasks-") as tasks_dir:
        files = spec.get("task_files") or {}
        _write_task_files(files, tasks_dir)
        command = lm_eval_command(spec, model, output_path, tasks_dir if files else None)
        print("cw_eval: " + " ".join(command), flush=True)
        # The task folder is the working folder: a user task's relative data_files resolve there.
        code = subprocess.call(command, cwd=tasks_dir)
    if code != 0:
        print(f"cw_eval: lm-eval exited {code}; no scores written", file=sys.stderr, flush=True)
        return code, {}, ""
    results_file = _newest_results(output_path, started)
    if results_file is None:
        print(f"cw_eval: lm-eval wrote no results under {output_path}", file=sys.stderr, flush=True)
        return 1, {}, ""
    with open(results_file, encoding="utf-8") as handle:
        return 0, scores_of(json.load(handle)), _harness_version()


def evaluate(spec: dict[str, Any], model: str, out: str, checkpoint: str, step: int | None) -> int:
    """Run the harness on ``model`` and write ``out/scores.json``; the harness's exit status."""
    os.makedirs(out, exist_ok=True)
    code, scores, harness = (_vf_eval if spec.get("harness") == "vf-eval" else _lm_eval)(spec, model, out)
    if code != 0:
        return code
    document = {
        "checkpoint": checkpoint, "step": step, "model": model, "harness": harness,
        "metric": spec.get("metric"), "higher_is_better": bool(spec.get("higher_is_better", True)), "scores": scores,
        "finished_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }  # fmt: skip
    write_json_atomically(os.path.join(out, SCORES_FILE), document)
    log_to_wandb(document, dict(os.environ))
    print(f"cw_eval: {checkpoint}: " + ", ".join(f"{k} {v:.4g}" for k, v in scores.items()), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="the evaluation's settings (JSON)")
    parser.add_argument("--model", required=True, help="the model folder to evaluate (or a Hub id: the base model)")
    parser.add_argument("--out", required=True, help="where scores.json and the harness's output go")
    parser.add_argument("--checkpoint", required=True, help="checkpoint-N, final or base (recorded in scores.json)")
    parser.add_argument("--step", type=int, default=None, help="the checkpoint's step")
    args = parser.parse_args(argv)
    with open(args.spec, encoding="utf-8") as handle:
        spec = json.load(handle)
    return evaluate(spec, args.model, args.out, args.checkpoint, args.step)


if __name__ == "__main__":
    sys.exit(main())
