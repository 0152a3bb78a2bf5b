"""`cw metrics` under hostile input ends with one clear line and a documented exit code.

A device, a FIFO, a trainer_state.json nested 100,000 deep, a 400-digit loss, a --png into a
missing folder, a path that does not exist: exit 2 (or 4 for the missing path), never a
traceback, never a hang. Two properties fuzz the parsers themselves: any log lines, and any
trainer_state.json, give records that every output (table, chart, JSON, CSV) can show.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from unit_helpers import builtin_registry

from cw_cli.errors import ConfigError, NotFound
from cw_cli.metrics.chart import chart_text
from cw_cli.metrics.export import to_csv, to_json
from cw_cli.metrics.parse import RunMetrics, to_number
from cw_cli.metrics.sources import load_path, read_lines

pytest.importorskip("hypothesis")  # the `test` extra; skipped, not failed, without it
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

HUGE = int("9" * 400)


@pytest.fixture(scope="module")
def cw():
    """``cw ARGS...`` in-process; returns click's Result."""
    from cw_cli.cli.app import build_app

    app = build_app(builtin_registry())
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(arg) for arg in args])


def _ended(result, code: int, *fragments: str) -> None:
    """Assert exit ``code`` with an ``error:`` line holding each fragment, and no traceback."""
    assert result.exit_code == code, (result.exit_code, result.exception, result.output)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and "error:" in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in:\n{result.stderr}"


def _shown(result) -> dict:
    """The ``-o json`` document of a run that succeeded."""
    assert result.exit_code == 0, (result.exception, result.output)
    return json.loads(result.stdout)


# --- files that are not files -------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_refused_without_being_read(cw):
    _ended(cw("metrics", "/dev/zero"), 2, "/dev/zero: cannot read it: not a regular file")


def test_a_fifo_is_refused_without_being_opened(cw, tmp_path):
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)

    def unblock() -> None:  # should a regression open the FIFO, a writer comes so the test ends (and fails)
        time.sleep(5)
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return  # nobody is reading: the FIFO was not opened
        os.write(fd, b"{'loss': 1.0, 'epoch': 1}\n")
        os.close(fd)

    threading.Thread(target=unblock, daemon=True).start()
    _ended(cw("metrics", fifo), 2, f"{fifo}: cannot read it: not a regular file (a device, FIFO or socket)", "hint:")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_fifo_named_trainer_state_json_is_refused_too(cw, tmp_path):
    fifo = tmp_path / "trainer_state.json"
    os.mkfifo(fifo)
    _ended(cw("metrics", fifo), 2, f"{fifo}: cannot read it: not a regular file")


def test_a_path_that_does_not_exist_is_not_found_without_asking_a_cluster(cw, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # would be exit 3 if asked
    missing = tmp_path / "out" / "trainer_state.json"
    _ended(cw("metrics", missing), 4, f"{missing}: no such file or folder (nor a run name)")


def test_an_oversized_trainer_state_is_refused_from_its_size(cw, tmp_path):
    path = tmp_path / "trainer_state.json"
    with open(path, "wb") as handle:
        handle.truncate(65 * 2**20)  # sparse: its size says 65 MiB, nothing is written
    _ended(cw("metrics", path), 2, f"{path}: is 65.0 MiB, more than the 64 MiB cw metrics reads", "tail -c")


# --- content --------------------------------------------------------------------------------------


def test_a_trainer_state_nested_100000_deep_is_refused(cw, tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _ended(cw("metrics", path), 2, f"{path}: nested too deep to be a trainer_state.json")


def test_a_400_digit_loss_in_a_trainer_state_is_infinite(cw, tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": [{"step": 1, "loss": ' + str(HUGE) + '}, {"step": 2, "loss": 0.5}]}')
    series = _shown(cw("metrics", path, "-o", "json"))["runs"][0]["series"]
    assert series["loss"] == [{"step": 1, "value": "inf"}, {"step": 2, "value": 0.5}]


@pytest.mark.parametrize(
    "line",
    [
        '{"loss": ' + str(HUGE) + ', "epoch": 1}',  # double quotes: read by literal_eval
        "{'loss': -" + str(HUGE) + ", 'epoch': 1, 'lr': [1]}",  # a nested value: read by literal_eval
        "{'loss': " + str(HUGE) + ", 'epoch': 1}",  # the fast pattern
    ],
    ids=["json", "literal", "simple"],
)
def test_a_400_digit_loss_in_a_log_line_is_infinite(cw, tmp_path, line):
    path = tmp_path / "train.log"
    path.write_text(line + "\n{'loss': 0.5, 'epoch': 2}\n")
    series = _shown(cw("metrics", path, "-o", "json"))["runs"][0]["series"]
    assert series["loss"][0]["value"] in ("inf", "-inf") and series["loss"][1] == {"step": 2, "value": 0.5}
    result = cw("metrics", path)  # the table and the chart too
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


def test_integers_past_a_float_read_as_infinities():
    assert to_number(HUGE) == float("inf") and to_number(-HUGE) == float("-inf") and to_number(10**300) == 1e300


def test_a_chart_spanning_every_float_is_drawn():
    text = chart_text("loss", [("a", [(1, -1.7e308), (2, 1.7e308), (3, 5e-324)])], width=20, height=4)
    assert "1.7e+308" in text.plain and "-1.7e+308" in text.plain


def test_a_line_of_megabytes_without_a_newline_keeps_its_records(tmp_path):
    path = tmp_path / "train.log"
    bar = "\r 12%|#         | 1/8 [00:01<00:07]" * 60_000  # a progress bar redrawn all day: 2 MiB, one line
    path.write_text(bar + "\r{'loss': 2.0, 'epoch': 1}" + bar + "\r{'loss': 1.0, 'epoch': 2}\n")
    assert load_path(path).series()["loss"] == [(1, 2.0), (2, 1.0)]


# --- --png ----------------------------------------------------------------------------------------


def test_png_into_a_missing_folder_is_refused_before_reading(cw, tmp_path):
    pytest.importorskip("matplotlib")
    log = tmp_path / "train.log"
    log.write_text("{'loss': 1.0, 'epoch': 1}\n")
    target = tmp_path / "nope" / "plot.png"
    _ended(cw("metrics", log, "--png", target), 2, f"--png {target}: the folder {tmp_path / 'nope'} does not exist",
           f"mkdir -p {tmp_path / 'nope'}")  # fmt: skip
    assert not target.parent.exists()


# --- properties -----------------------------------------------------------------------------------

KEYS = ["loss", "eval_loss", "reward", "epoch", "step", "global_step", "learning_rate", "train_runtime", "x", ""]
numbers = (
    st.integers(min_value=-(10**500), max_value=10**500)
    | st.sampled_from([HUGE, -HUGE, 10**308, 2**1024, 0, -1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1.7976931348623157e308, -1.7976931348623157e308, 5e-324])
)
values = st.recursive(
    numbers | st.text(max_size=8) | st.booleans() | st.none(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(KEYS), children, max_size=3),
    max_leaves=8,
)
entries = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), values, max_size=6)


def _python_literal(entry: dict) -> str:
    return "{" + ", ".join(f"{key!r}: {value!r}" for key, value in entry.items()) + "}"


def _json_text(entry: dict) -> str:
    return json.dumps(entry, default=str)  # NaN and Infinity as Python's json writes them


log_lines = st.lists(
    st.one_of(
        entries.map(_python_literal),
        entries.map(_json_text),
        st.tuples(st.sampled_from(["", "\x1b[2K", "INFO: ", " 50%|###  |\r"]), entries.map(_python_literal)).map("".join),
        st.text(max_size=40),
        st.sampled_from(["{'loss': " + "[" * 300 + "}", "{'loss': 1e999, 'epoch': 1}", "{'loss': " + "9" * 5000 + "}"]),
    ),
    max_size=8,
)


def _show_everything(run: RunMetrics) -> None:
    """Every output cw metrics makes of a run: JSON, CSV, the latest table's values and the charts."""
    json.loads(to_json([run]))
    to_csv([run])
    run.latest()
    for name, points in run.series().items():
        chart_text(name, [(run.name, points)], width=30, height=5)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(log_lines)
def test_any_log_lines_give_records_every_output_can_show(lines):
    run = read_lines(lines, "run", "test")
    assert all(isinstance(v, float) for record in run.records for v in record.values.values())
    _show_everything(run)


state_documents = st.one_of(
    st.fixed_dictionaries({"log_history": st.lists(entries | values, max_size=6)}),
    values,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(state_documents, st.sampled_from([0, 0, 1, 5_000, 100_000]))
def test_any_trainer_state_json_is_read_or_refused_with_a_cw_error(document, depth):
    text = "[" * depth + json.dumps(document, default=str) + "]" * depth
    if depth == 0 and isinstance(document, dict) and document.get("log_history"):
        text = text.replace('"step": 1', '"step": ' + "9" * 5000, 1)  # past Python's 4,300-digit limit
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trainer_state.json"
        path.write_text(text, encoding="utf-8")
        try:
            run = load_path(path)
        except (ConfigError, NotFound) as error:
            assert str(path) in error.message
            return
    _show_everything(run)
