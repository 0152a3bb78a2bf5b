"""Render, with cw itself, what a LoRA SFT run and its merge-export run in their pods.

Runs here (no cluster needed): ``cw trl sft benchmarks/gpu/lora-sft.yaml --dry-run --name lora-bench``
gives the trainer Job and its ConfigMap; the export Job of ``cw export lora-bench --merge`` is rendered
by the same function ``cw export`` uses (cw_cli.render.export.export_manifests), from the facts
``cw export`` reads off that trainer. What the pods would run is written to benchmarks/gpu/rendered/:

* ``trainer.json``: the trainer container's command, env and workingDir, exactly as rendered;
* ``export.json``: the export container's command and env, exactly as rendered;
* ``etc-cw/``: the ConfigMap files mounted at /etc/cw in each pod (config.yaml, cw_entrypoint.py,
  cw_export.py).

The device script (lora_train_export_try.py) then rewrites only paths (/etc/cw, /checkpoints, the
model and the dataset) and runs those commands.

Usage: .venv/bin/python benchmarks/gpu/render_run.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONFIG = HERE / "lora-sft.yaml"
RUN = "lora-bench"


def render_trainer() -> tuple[dict, dict]:
    """The trainer container and the ConfigMap's data of the dry run."""
    cw = Path(sys.executable).with_name("cw")
    out = subprocess.run([str(cw), "trl", "sft", str(CONFIG), "--dry-run", "--name", RUN],
                         check=True, capture_output=True, text=True, cwd=REPO).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    job = next(d for d in docs if d["kind"] == "Job")
    container = next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer")
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    return container, config_map["data"]


def render_export(trainer: dict) -> tuple[dict, dict]:
    """The export container and ConfigMap data of ``cw export lora-bench --merge`` (defaults otherwise)."""
    sys.path.insert(0, str(REPO))
    from cw_cli.render.export import ExportChoice, ExportFacts, export_manifests

    facts = ExportFacts(run_name=RUN, run_dir=trainer["workingDir"], claim="model-checkpoints", image=trainer["image"],
                        labels={}, env=[e for e in trainer.get("env", []) if e["name"].startswith("HF_")])  # fmt: skip
    job, config_map = export_manifests(facts, ExportChoice(merge=True))
    container = job["spec"]["template"]["spec"]["containers"][0]
    return container, config_map["data"]


def main() -> int:
    trainer, trainer_files = render_trainer()
    export, export_files = render_export(trainer)
    dest = HERE / "rendered"
    (dest / "etc-cw").mkdir(parents=True, exist_ok=True)
    for name, text in {**trainer_files, **export_files}.items():
        (dest / "etc-cw" / name).write_text(text, encoding="utf-8")
    keep = ("image", "command", "args", "env", "workingDir", "resources")
    (dest / "trainer.json").write_text(json.dumps({k: trainer[k] for k in keep if k in trainer}, indent=1) + "\n")
    (dest / "export.json").write_text(json.dumps({k: export[k] for k in keep if k in export}, indent=1) + "\n")
    print(f"trainer: {json.dumps(trainer['command'])}\nexport:  {json.dumps(export['command'])}\nwritten to {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
