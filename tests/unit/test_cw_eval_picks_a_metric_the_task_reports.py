"""`cw eval RUN --tasks T` without `--metric` decides by the first score T really reports, as
lm-eval names it: a generation task such as gsm8k reports `exact_match` under its filters only
(`gsm8k/exact_match,strict-match`), never a bare `acc` (which the check then refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cw_cli.after_training.evaluation import flag_settings
from cw_cli.config.eval_tasks import registry


@pytest.mark.parametrize(
    ("task", "expected"),
    [("gsm8k", "gsm8k/exact_match,strict-match"), ("hellaswag", "hellaswag/acc"), ("arc_easy", "arc_easy/acc")],
)
def test_the_default_metric_is_one_the_task_reports(task, expected, tmp_path: Path):
    known = registry()["tasks"][task]
    assert expected.split("/", 1)[1].split(",")[0] in known["metrics"]
    settings = flag_settings([task], None, 5, 0, None, tmp_path)
    assert settings["metric"] == expected
