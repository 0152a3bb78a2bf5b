"""`cw metrics` without a cluster: the record parser on real and hostile log lines, step
inference, trainer_state.json reading, the JSON/CSV formats, the terminal chart and the PNG.

The real logs are tests/fixtures/metrics/*.log, recorded from TRL CPU training runs together
with the same runs' trainer_state.json (see the README there); expectations are computed from
those files, never typed in.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from unit_helpers import REPO

from cw_cli.errors import NotFound
from cw_cli.metrics.chart import chart_text, draw
from cw_cli.metrics.export import to_csv, to_json
from cw_cli.metrics.parse import (
    EVAL,
    SUMMARY,
    TRAIN,
    RecordParser,
    RunMetrics,
    default_metrics,
    parse_record,
    records_from_log_history,
)
from cw_cli.metrics.sources import load_path, newest_trainer_state, read_lines

FIXTURES = REPO / "tests" / "fixtures" / "metrics"
RECORDED = sorted(FIXTURES.glob("*.log"))


def parse_text(text: str) -> list:
    return list(RecordParser().feed_all(text.split("\n")))


# --------------------------------------------------------------------------- real output


@pytest.mark.parametrize("log", RECORDED, ids=[p.stem for p in RECORDED])
def test_recorded_log_parses_to_the_same_runs_trainer_state(log: Path):
    assert RECORDED, "no recorded logs in tests/fixtures/metrics"
    state = json.loads(log.with_suffix(".trainer_state.json").read_text())
    expected = [r for r in records_from_log_history(state["log_history"]) if r.kind == TRAIN]
    parsed = parse_text(log.read_bytes().decode())
    train = [r for r in parsed if r.kind == TRAIN]
    assert len(expected) >= 2 and [r.step for r in train] == [r.step for r in expected]
    for got, want in zip(train, expected):
        assert got.values == {k: float(f"{v:.4g}") for k, v in want.values.items()}  # printed with 4 digits
    assert parsed[-1].kind == SUMMARY and parsed[-1].step == expected[-1].step


def test_recorded_lines_mix_tqdm_bars_and_records_on_one_line():
    text = RECORDED[0].read_bytes().decode()
    mixed = [line for line in text.split("\n") if "\r" in line and "{'loss'" in line and "%|" in line]
    assert mixed, "the recording should hold a bar and a record on one line"
    for line in mixed:
        (record,) = RecordParser().feed(line)
        assert "loss" in record.values


# --------------------------------------------------------------------------- tricky lines


def test_strings_numbers_nan_and_inf():
    assert parse_record("{'loss': '2.5', 'learning_rate': '2e-05', 'epoch': 0.5}") == {
        "loss": 2.5, "learning_rate": 2e-05, "epoch": 0.5}
    values = parse_record("{'loss': nan, 'grad_norm': inf, 'reward': -inf, 'epoch': 1}")
    assert math.isnan(values["loss"]) and values["grad_norm"] == math.inf and values["reward"] == -math.inf
    quoted = parse_record("{'loss': 'nan', 'grad_norm': 'inf', 'epoch': '1'}")
    assert math.isnan(quoted["loss"]) and quoted["grad_norm"] == math.inf


def test_lines_that_are_not_records():
    for line in [
        "plain text",
        "{oops",
        "{'loss': 1.0",  # cut off
        "{'loss': tensor(1.0), 'epoch': 1}",  # a call: never evaluated
        "{'loss': __import__('os').system('echo hacked'), 'epoch': 1}",
        "{'model': 'qwen', 'dataset': 'capybara'}",  # a dict of non-metrics
        "{'batch_size': 8, 'num_workers': 2}",  # numbers, but no trainer key: a printed config
        "{'epoch': 'soon', 'loss': None}",  # trainer keys, no numeric value
        "['loss', 1.0]",
        "{1: 2, 'a': 3}",
    ]:
        assert parse_record(line) is None, line
        assert RecordParser().feed(line) == [], line


def test_records_inside_other_text_and_escape_codes():
    line = "\x1b[32m2026-01-01 INFO trainer:\x1b[0m {'loss': 1.5, 'epoch': 0.1} (logged)"
    (record,) = RecordParser().feed(line)
    assert record.values == {"loss": 1.5, "epoch": 0.1}
    # A JSON-style dict, and two records on one \r-separated line.
    records = RecordParser().feed('{"loss": 1.0, "epoch": 1}\r 10%|#  | 1/10\r{"loss": 0.5, "epoch": 2}')
    assert [(r.step, r.values["loss"]) for r in records] == [(1, 1.0), (2, 0.5)]


def test_step_inference_counts_training_records_only():
    text = "\n".join([
        "{'loss': 3.0, 'epoch': 0.1}",
        "{'eval_loss': 2.9, 'eval_runtime': 1.0, 'epoch': 0.1}",
        "warning: something",
        "{'loss': 2.0, 'epoch': 0.2}",
        "{'train_runtime': 5.0, 'train_loss': 2.5, 'epoch': 0.2}",
    ])
    records = parse_text(text)
    assert [(r.step, r.kind) for r in records] == [(1, TRAIN), (1, EVAL), (2, TRAIN), (2, SUMMARY)]
    run = read_lines(text.split("\n"), "r", "test")
    assert run.step_source == "counted"
    assert run.series()["loss"] == [(1, 3.0), (2, 2.0)]
    assert run.latest()["train_loss"] == (2, 2.5)


def test_logged_steps_win_and_counting_continues_from_them():
    parser = RecordParser()
    records = list(parser.feed_all([
        "{'loss': 3.0, 'global_step': 10, 'epoch': 0.1}",
        "{'loss': 2.0, 'epoch': 0.2}",
        "{'loss': 1.0, 'step': 30}",
    ]))
    assert [r.step for r in records] == [10, 11, 30]
    assert parser.explicit_steps and all("step" not in r.values and "global_step" not in r.values for r in records)


def test_a_huge_log_is_parsed_quickly_and_huge_lines_are_skipped():
    noise = "x" * 200
    lines = []
    for step in range(1, 50_001):
        lines.append(f"\r {step}/50000 [00:01<00:00]" + noise)
        if step % 5 == 0:
            lines.append(f"{{'loss': {1 / step!r}, 'epoch': {step / 1000!r}}}")
    lines.append("{'loss': " + "1" * (200 * 1024) + ", 'epoch': 1}")  # 200 KiB: not a record
    lines.append("{'loss': [" * 5000 + "]" * 5000 + "}")  # deep nesting: no crash
    started = time.perf_counter()
    run = read_lines(iter(lines), "big", "test")
    elapsed = time.perf_counter() - started
    assert [s for s, _ in run.series()["loss"]] == list(range(1, 10_001))
    assert run.series()["loss"][-1][1] == 1 / 50_000
    assert elapsed < 10, elapsed


# --------------------------------------------------------------------------- trainer_state.json


def write_state(folder: Path, losses: list[float], first_step: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    history = [{"loss": v, "step": first_step + i, "epoch": 0.1 * (i + 1)} for i, v in enumerate(losses)]
    history.append({"eval_loss": 9.0, "step": first_step + len(losses) - 1})
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": first_step + len(losses) - 1,
                                                           "log_history": history}))
    return folder / "trainer_state.json"


def test_the_newest_checkpoint_is_the_highest_step_not_the_last_name(tmp_path):
    write_state(tmp_path / "out" / "checkpoint-9", [3.0] * 9)
    newest = write_state(tmp_path / "out" / "checkpoint-10", [2.0] * 10)
    write_state(tmp_path / "out" / "checkpoint-10-tmp", [1.0])
    assert newest_trainer_state(tmp_path / "out") == newest
    # Below the folder (a relative output_dir nests checkpoints), and in the checkpoint itself.
    assert newest_trainer_state(tmp_path) == newest
    assert newest_trainer_state(tmp_path / "out" / "checkpoint-9") == tmp_path / "out" / "checkpoint-9" / "trainer_state.json"
    run = load_path(tmp_path / "out")
    assert run.step_source == "logged" and run.source == str(newest)
    assert run.series()["loss"] == [(s, 2.0) for s in range(1, 11)]
    assert run.series()["eval_loss"] == [(10, 9.0)]


def test_paths_without_metrics_are_not_found(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFound):
        load_path(tmp_path / "empty")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(NotFound):
        load_path(tmp_path / "bad.json")
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": "nope"}))
    with pytest.raises(NotFound):
        load_path(tmp_path / "trainer_state.json")


# --------------------------------------------------------------------------- output formats


def sample_runs() -> list[RunMetrics]:
    a = read_lines(["{'loss': 2.0, 'epoch': 1}", "{'loss': nan, 'reward': inf, 'epoch': 2}"], "run-a", "pod a")
    b = read_lines(["{'loss': 1.5, 'global_step': 5}"], "run-b", "pod b")
    return [a, b]


def test_json_format():
    runs = sample_runs()
    document = json.loads(to_json(runs))  # strict JSON: no bare NaN
    assert [r["run"] for r in document["runs"]] == ["run-a", "run-b"]
    first = document["runs"][0]
    assert set(first) == {"run", "source", "steps", "series"} and first["steps"] == "counted"
    assert first["series"]["loss"] == [{"step": 1, "value": 2.0}, {"step": 2, "value": "nan"}]
    assert first["series"]["reward"] == [{"step": 2, "value": "inf"}]
    assert document["runs"][1]["steps"] == "logged"
    only = json.loads(to_json(runs, ["reward"]))
    assert [list(r["series"]) for r in only["runs"]] == [["reward"], []]

    def no_constants(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    json.loads(to_json(runs), parse_constant=no_constants)  # strict JSON: NaN/Infinity never appear


def test_csv_format():
    rows = list(csv.DictReader(io.StringIO(to_csv(sample_runs()))))
    assert list(rows[0]) == ["run", "metric", "step", "value"]
    expected = [(run.name, name, step, value) for run in sample_runs() for name, points in run.series().items()
                for step, value in points]
    assert len(rows) == len(expected)
    for row, (name, metric, step, value) in zip(rows, expected):
        assert (row["run"], row["metric"], int(row["step"])) == (name, metric, step)
        got = float(row["value"])
        assert got == value or (math.isnan(got) and math.isnan(value))


def test_default_metric_is_reward_when_logged_else_loss():
    assert default_metrics(sample_runs()) == ["reward"]
    assert default_metrics([read_lines(["{'loss': 1.0, 'epoch': 1}"], "x", "y")]) == ["loss"]
    assert default_metrics([read_lines(["{'eval_loss': 1.0, 'epoch': 1}"], "x", "y")]) == ["eval_loss"]
    assert default_metrics([]) == []


# --------------------------------------------------------------------------- charts


def test_terminal_chart_draws_each_run_in_its_colour():
    rising = [(s, float(s)) for s in range(1, 11)]
    canvas, ranges = draw([rising], width=10, height=4)
    assert ranges == (1, 10, 1.0, 10.0)
    rows = canvas.rows()
    assert rows[-1][0] != " " and rows[0][-1] != " "  # bottom-left to top-right
    assert rows[0][0] == " " and rows[-1][-1] == " "
    falling = [(s, -float(s)) for s in range(1, 11)]
    text = chart_text("loss", [("a", rising), ("b", falling)], width=20, height=5)
    styles = {str(span.style) for span in text.spans}
    assert {"cyan", "magenta"} <= styles
    assert draw([[(1, math.nan), (2, math.inf)]], 5, 2) is None


def test_png_has_one_panel_per_metric_and_one_line_per_run(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from cw_cli.metrics.plot import write_png

    runs = [read_lines([f"{{'loss': {v}, 'reward': {v * 2}, 'epoch': 1}}" for v in values], name, "t")
            for name, values in (("a", [3, 2, 1]), ("b", [1, 2, 4]))]
    figure = write_png(runs, ["loss", "reward"], tmp_path / "m.png")
    assert len(figure.axes) == 2 and [len(ax.get_lines()) for ax in figure.axes] == [2, 2]
    assert [line.get_label() for line in figure.axes[0].get_lines()] == ["a", "b"]
    image = imread(tmp_path / "m.png")
    assert image.shape[1] == 800 and image.shape[0] > 400 and image.std() > 0.05


# --------------------------------------------------------------------------- the command


def cw(*args: object, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", **(env or {})}
    return subprocess.run([sys.executable, "-m", "cw_cli", "metrics", *map(str, args)], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=environ)


def test_command_on_paths_prints_table_and_chart_and_never_imports_kubernetes(tmp_path):
    fake = tmp_path / "site" / "kubernetes"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('kubernetes must not be imported for local paths')\n")
    log = RECORDED[0]
    state = log.with_suffix(".trainer_state.json")
    done = cw(log, state, "--metric", "loss", env={"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}"})
    assert done.returncode == 0, done.stderr
    last_loss = parse_text(log.read_text())[-2].values["loss"]
    assert f"{last_loss:.4g}" in done.stdout and "┤" in done.stdout and "step" in done.stdout
    as_json = json.loads(cw(log, "-o", "json").stdout)
    assert as_json["runs"][0]["series"]["loss"] == [
        {"step": s, "value": v} for s, v in read_lines(log.read_text().split("\n"), "x", "y").series()["loss"]]


def test_command_errors(tmp_path):
    log = RECORDED[0]
    unknown = cw(log, "--metric", "nope")
    assert unknown.returncode == 2 and "nope" in unknown.stderr and "loss" in unknown.stderr
    assert cw(log, "-o", "yaml").returncode == 2
    assert cw(log, "--follow").returncode == 2
    (tmp_path / "empty").mkdir()
    assert cw(tmp_path / "empty").returncode == 4
    # --png without matplotlib: a clear error naming the extra, before any log is read.
    fake = tmp_path / "site" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    missing = cw(log, "--png", tmp_path / "x.png", env={"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}"})
    assert missing.returncode == 2 and "pip install 'cw-cli[plot]'" in missing.stderr and "Traceback" not in missing.stderr
    assert not (tmp_path / "x.png").exists()


def test_help_imports_no_plotting_or_metrics_code():
    probe = (
        "import sys; sys.argv = ['cw', *sys.argv[1:]]\n"
        "from cw_cli.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(sys.modules), file=sys.stderr)\n"
    )

    def imported_by(*args: str) -> tuple[set[str], str]:
        # sys.modules, not -X importtime: that misses modules loaded through importlib.import_module
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 0, done.stderr
        return set(ast.literal_eval(done.stderr.strip().splitlines()[-1])), done.stdout

    imported, shown = imported_by("--help")
    assert "metrics" in shown and "cw_cli.cli.metrics" not in imported  # listed, not imported
    imported, shown = imported_by("metrics", "--help")
    assert "--png" in shown and "cw_cli.cli.metrics" in imported  # the command is built...
    assert not {m for m in imported if m.split(".")[0] in ("matplotlib", "plotext")}
    assert not {m for m in imported if m.startswith("cw_cli.metrics")}  # ...its code loads only when run


# --------------------------------------------------------------------------- fast path = literal_eval

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_keys = st.one_of(st.sampled_from(["loss", "epoch", "reward", "rewards/a/mean", "eval_loss"]), st.text(max_size=8))
_values = st.one_of(st.floats(), st.integers(), st.booleans(), st.none(), st.text(max_size=8),
                    st.floats().map(lambda v: f"{v:.4g}"), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=6))
def test_any_printed_dict_is_read_back_exactly(record):
    """Whatever dict a trainer prints (its repr), the record read back holds its numbers, whichever
    path (regex or literal_eval) reads it."""
    from cw_cli.metrics.parse import MARKER_KEYS, to_number

    text = repr(record)
    expected = {k: to_number(v) for k, v in record.items() if to_number(v) is not None}
    if not any(k in MARKER_KEYS for k in record) or not expected:
        expected = None
    got = parse_record(text)
    if expected is None or got is None:
        assert got == expected, text
    else:
        assert got.keys() == expected.keys(), text
        for k in got:
            assert got[k] == expected[k] or (math.isnan(got[k]) and math.isnan(expected[k])), text


def test_follow_redraws_table_and_chart_from_the_streamed_log(monkeypatch):
    """--follow without a cluster: the pod's log stream is replaced by the recorded lines."""
    from rich.console import Console

    import cw_cli.cli.metrics as command
    from cw_cli import api

    calls = []

    def fake_lines(self, *, rank=None, follow=False, notice=None, **_):
        calls.append((self.session.context, self.name, rank, follow))
        yield from RECORDED[0].read_bytes().decode().split("\n")

    screen = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    monkeypatch.setattr(api.Run, "logs", fake_lines)
    monkeypatch.setattr(command, "out", lambda: screen)
    monkeypatch.setattr(command, "_REDRAW_S", 0.0)
    run = command._follow("my-run", 2, None, "ctx", [], show=True)
    assert calls == [("ctx", "my-run", 2, True)]
    expected = read_lines(RECORDED[0].read_bytes().decode().split("\n"), "x", "y")
    assert run.series() == expected.series() and run.source.endswith("rank 2")
    drawn = screen.file.getvalue()
    last_loss = expected.latest()["loss"][1]
    assert drawn.count(f"{last_loss:.4g}") >= 1 and drawn.count("┤") >= 10
