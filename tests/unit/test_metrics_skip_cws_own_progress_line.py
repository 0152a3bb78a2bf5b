"""`cw metrics RUN` reads the trainer's log: cw's own `[cw-progress]` line (step, rates, the last
checkpoint) is not one of the trainer's records and must not count as a training step."""

from __future__ import annotations

from pathlib import Path

from cw_cli.metrics.parse import RecordParser

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "progress" / "trl-sft-cw-progress.log"


def test_cws_progress_lines_are_not_training_records():
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    assert any(line.startswith("[cw-progress]") for line in lines)
    records = list(RecordParser().feed_all(lines))
    trainer_logs = [line for line in lines if line.lstrip().startswith("{") and "'loss'" in line]
    assert len([r for r in records if r.kind == "train"]) == len(trainer_logs)
    assert [r.step for r in records if r.kind == "train"] == list(range(1, len(trainer_logs) + 1))
