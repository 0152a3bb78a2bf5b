"""cw's callback prints the ``[cw-progress]`` line `cw status` and `cw list` read (issue 34 item 5),
proven on CPU with cw's rendered TRL SFT trainer (the exact ConfigMap and command, through
cw_entrypoint.py, cw_fault.py and cw_progress.py) and a tiny random Llama, offline: rank 0 prints
one line at the start, on each log and after each complete save, with samples per second from
the global batch, tokens per second from TRL's ``num_tokens``, and the last complete checkpoint;
a relaunch that resumes names its checkpoint in its first line. The run's success is recorded where
the evaluation watcher looks for it, beside the final model TRL saved.

``CW_UPDATE_PROGRESS_FIXTURE=1`` writes the log to tests/fixtures/progress/ for the unit tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

from cw_cli.diagnosis.progress import LINE_PREFIX, cw_progress_line, training_progress
from cw_cli.localrun.runner import LocalRunner
from cw_cli.runtime import cw_eval_watch

pytestmark = pytest.mark.training

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "progress" / "trl-sft-cw-progress.log"
CPU = {"use_cpu": True, "bf16": False, "report_to": "none", "logging_steps": 2, "save_strategy": "steps", "save_steps": 3,
       "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "dataloader_num_workers": 0, "seed": 0,
       "max_length": 64, "max_steps": 6}  # fmt: skip


def test_the_callback_prints_step_rates_and_the_last_complete_checkpoint(render_plan, tiny_model, sft_dataset, tmp_path):
    manifests = render_plan("trl", "sft", CONFIGS_DIR / "trl-sft.yaml", run_name="t-progress",
                            sets=[f"model_name_or_path={tiny_model}", f"dataset_name={sft_dataset}"])  # fmt: skip
    assert "cw_progress.py" in next(m for m in manifests if m["kind"] == "ConfigMap")["data"]
    (tmp_path / "tmp").mkdir()
    runner = LocalRunner(manifests, tmp_path / "volume", workdir=tmp_path / "run", config_overrides=CPU,
                         extra_env={**OFFLINE_ENV, "TMPDIR": str(tmp_path / "tmp")}, cpu_only=True)  # fmt: skip
    lines: list[str] = []
    assert runner.run(lines.append) == 0, "\n".join(lines[-50:])
    log = "\n".join(lines)
    output_dir = tmp_path / "volume" / "t-progress"
    records = [json.loads(line.split(LINE_PREFIX, 1)[1]) for line in log.replace("\r", "\n").split("\n") if LINE_PREFIX in line]
    # One at the start, one per log (steps 2, 4, 6, and the final summary), one per save (3, 6).
    assert [r["step"] for r in records] == [0, 2, 3, 4, 6, 6, 6], records
    assert all(r["total"] == 6 for r in records)
    timed = [r for r in records if r["step"] > 0]
    assert all(r["samples_per_s"] == pytest.approx(r["steps_per_s"] * 4, rel=0.02) for r in timed)  # 2 x 2 x 1 rank
    assert all(r["tokens_per_s"] > 0 for r in timed)  # TRL SFT logs num_tokens
    assert "checkpoint" not in records[1] and records[2]["checkpoint"] == str(output_dir / "checkpoint-3")
    assert records[-1]["checkpoint"] == str(output_dir / "checkpoint-6") and (output_dir / "checkpoint-6" / ".cw-complete").is_file()

    # What `cw status` reads from the tail: the bar's position and the line's rates and checkpoint.
    tail = log.splitlines()[-20:]
    progress = training_progress(tail)
    assert progress is not None and (progress.step, progress.total) == (6, 6), tail
    assert progress.samples_per_s and progress.tokens_per_s and progress.checkpoint == str(output_dir / "checkpoint-6")
    assert cw_progress_line(tail) is not None
    # The entry point recorded the success, and the watcher's last look finds the final model TRL saved at the top.
    finished = output_dir / ".cw" / "finished.json"
    assert json.loads(finished.read_text())["exit_code"] == 0
    assert cw_eval_watch.final_ready(str(output_dir), str(finished))
    if os.environ.get("CW_UPDATE_PROGRESS_FIXTURE"):
        FIXTURE.write_text(log.replace(str(tmp_path), "/tmp/t") + "\n", encoding="utf-8")

    # A relaunch resumes from checkpoint-6: its first line names it before any new step.
    (tmp_path / "tmp2").mkdir()
    again = LocalRunner(manifests, tmp_path / "volume", workdir=tmp_path / "run2", config_overrides={**CPU, "max_steps": 8},
                        extra_env={**OFFLINE_ENV, "TMPDIR": str(tmp_path / "tmp2")}, cpu_only=True)  # fmt: skip
    resumed: list[str] = []
    assert again.run(resumed.append) == 0, "\n".join(resumed[-50:])
    first = json.loads(next(line for line in resumed if LINE_PREFIX in line).split(LINE_PREFIX, 1)[1])
    assert (first["step"], first["total"], first["checkpoint"]) == (6, 8, str(output_dir / "checkpoint-6")), first
