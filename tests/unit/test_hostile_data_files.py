"""Hostile data files and folders before a launch (issue 32 item 3): the data check and the folder
walks that ship files and pack code end in a columns check, a one-line refusal naming the file
and a fix, or a notice for data not readable here; never a traceback, a hang or a launch of data
that cannot be read.

JSON nested 200,000 deep, a CSV with a 128 KiB header field or an unterminated quote, a folder
nested 1,200 deep were tracebacks; an empty file, binary garbage, an empty CSV, a FIFO, a link
loop and a corrupt Parquet file were "columns not checked" notices and the run launched. The
last tests fuzz the reader with arbitrary bytes under every data suffix.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from unit_helpers import plan_for, write_config

from cw_cli.errors import ConfigError
from cw_cli.frameworks.trl import TRLFramework
from cw_cli.render import dataset_check
from cw_cli.render.folder_walk import MAX_DEPTH, FolderTooDeep, walk_files
from cw_cli.types import TrainingType

pytest.importorskip("hypothesis")  # the `test` extra; skipped, not failed, without it
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MODEL = {"model_name_or_path": "m"}
NOT_CHECKED = "its columns were not checked"
FIX = "fix or replace the file"


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))


def _refusal(tmp_path: Path, dataset: str, type_name: str = "sft") -> str:
    with pytest.raises(ConfigError) as info:
        plan_for("trl", type_name, write_config(tmp_path, {**MODEL, "dataset_name": dataset}))
    text = "\n".join(info.value.issues)
    assert "Traceback" not in text
    return text


_DEEP: list[Path] = []


@pytest.fixture(autouse=True)
def remove_deep_folders():
    """Remove the deep folders a test made, bottom up without recursing: pytest's own clean-up of
    old temporary folders recurses once per level and would fail on them for every later run."""
    yield
    while _DEEP:
        top = _DEEP.pop()
        order, stack = [], [top]
        while stack:
            folder = stack.pop()
            order.append(folder)
            with os.scandir(folder) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    else:
                        os.unlink(entry.path)
        for folder in reversed(order):
            os.rmdir(folder)


def _nested(folder: Path, levels: int) -> Path:
    """``levels`` folders inside each other, built with chdir so no path is too long to make."""
    _DEEP.append(folder)
    here = os.getcwd()
    os.chdir(folder)
    try:
        for _ in range(levels):
            os.mkdir("d")
            os.chdir("d")
        Path("train.jsonl").write_text('{"text": "x"}\n')
    finally:
        os.chdir(here)
    return folder


UNREADABLE: dict[str, bytes] = {
    "empty.jsonl": b"",
    "blank.jsonl": b"\n\n  \n",
    "empty.csv": b"",
    "garbage.jsonl": bytes(range(256)) * 8,
    "latin1.csv": "prompt,compl\xe9tion\n".encode("latin-1"),
    "not-json.jsonl": b"this is not json\n",
    "list.jsonl": b"[1, 2, 3]\n",
    "nested.jsonl": b"[" * 200_000 + b"]" * 200_000 + b"\n",
    "deep-record.json": b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n",
    "quote.csv": b'"prompt,completion\n1,2\n',
    "garbage.parquet": b"not parquet at all",
    "corrupt.parquet": b"PAR1" + bytes(range(100)) + (20).to_bytes(4, "little") + b"PAR1",
    "empty.parquet": b"",
}


@pytest.mark.parametrize("name", list(UNREADABLE))
def test_a_data_file_no_reader_can_read_is_refused_naming_it_and_the_fix(tmp_path, name):
    (tmp_path / name).write_bytes(UNREADABLE[name])
    if name == "corrupt.parquet":
        pytest.importorskip("pyarrow")  # without it the file's schema is not read: a notice
    text = _refusal(tmp_path, name)
    assert text.startswith(f"{tmp_path / 'config.yaml'}: `dataset_name`: {name}: ")
    assert FIX in text and len(text.splitlines()) == 1


def test_a_header_field_of_128_kib_is_read_and_shown_short(tmp_path):
    (tmp_path / "wide.csv").write_text("a" * (128 * 1024) + ",b\n1,2\n")
    text = _refusal(tmp_path, "wide.csv")
    assert "columns found: aaaa" in text and "(131,072 characters), b" in text
    assert max(len(line) for line in text.splitlines()) < 400


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_is_refused_without_being_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")  # opening it for reading would block forever
    assert "is not a regular file or folder" in _refusal(tmp_path, "pipe.jsonl")
    (tmp_path / "data").mkdir()
    os.mkfifo(tmp_path / "data" / "train.jsonl")  # in a folder, as the picked data file
    assert "is not a regular file" in _refusal(tmp_path, "data")


def test_a_link_loop_and_a_dangling_link_are_refused(tmp_path):
    (tmp_path / "loop.jsonl").symlink_to("loop.jsonl")
    assert "cannot be read (Too many levels of symbolic links)" in _refusal(tmp_path, "loop.jsonl")
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    assert "which does not exist" in _refusal(tmp_path, "gone.jsonl")


def test_a_link_to_a_kernel_file_is_refused(tmp_path):
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc here")
    (tmp_path / "kmsg.jsonl").symlink_to("/proc/self/status")
    assert "is a file of the operating system" in _refusal(tmp_path, "kmsg.jsonl")  # shipping refuses it
    needs = TRLFramework().dataset_needs({**MODEL, "dataset_name": "kmsg.jsonl"}, TrainingType.SFT)
    with pytest.raises(ValueError, match="is not a regular file"):  # and so does the check (a --local run)
        dataset_check.check_datasets(needs, tmp_path)


def test_a_data_folder_nested_1200_deep_is_refused_in_one_line(tmp_path):
    (tmp_path / "deep").mkdir()
    _nested(tmp_path / "deep", 1200)
    text = _refusal(tmp_path, "deep")
    assert "`dataset_name`: " in text and f"deep has folders more than {MAX_DEPTH} levels deep" in text
    assert "flatten it" in text and len(text) < 400


def test_a_local_run_of_a_deep_folder_is_refused_by_the_data_check(tmp_path):
    (tmp_path / "deep").mkdir()
    _nested(tmp_path / "deep", 1200)
    needs = TRLFramework().dataset_needs({**MODEL, "dataset_name": "deep"}, TrainingType.SFT)
    with pytest.raises(ValueError, match=f"more than {MAX_DEPTH} levels deep"):
        dataset_check.check_datasets(needs, tmp_path)


def test_a_code_folder_nested_1200_deep_is_refused(tmp_path):
    from cw_cli.render.user_code import pack_folder

    (tmp_path / "code").mkdir()
    _nested(tmp_path / "code", 1200)
    with pytest.raises(ValueError, match=f"`code`: .* more than {MAX_DEPTH} levels deep"):
        pack_folder(tmp_path / "code")


def test_the_walk_enters_no_link_to_a_folder_and_lists_what_it_does_not_open(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.jsonl").write_text("{}\n")
    (root / "sub" / "up").symlink_to(root)  # a loop through a link: listed, never entered
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "pipe")
    listed = [relative for relative, _, _ in walk_files(root)]
    assert listed == ["pipe", "sub/a.jsonl", "sub/up"] if hasattr(os, "mkfifo") else ["sub/a.jsonl", "sub/up"]


def test_the_walk_is_bounded_in_depth(tmp_path):
    (tmp_path / "deep").mkdir()
    _nested(tmp_path / "deep", MAX_DEPTH + 1)
    with pytest.raises(FolderTooDeep):
        list(walk_files(tmp_path / "deep"))
    (tmp_path / "ok").mkdir()
    _nested(tmp_path / "ok", MAX_DEPTH)
    assert [r for r, _, _ in walk_files(tmp_path / "ok")] == ["d/" * MAX_DEPTH + "train.jsonl"]


def test_data_in_a_form_not_readable_here_is_still_a_notice(tmp_path, monkeypatch):
    (tmp_path / "d.parquet").write_bytes(b"PAR1" + b"\0" * 16 + (4).to_bytes(4, "little") + b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    plan = plan_for("trl", "sft", write_config(tmp_path, {**MODEL, "dataset_name": "d.parquet"}))
    assert any("pyarrow" in note and NOT_CHECKED in note for note in plan.notices)


# The fuzz: any bytes under any data suffix end in columns, a notice, or a refusal (ValueError
# with one line naming the file), never another exception.

SUFFIXES = sorted(dataset_check.FORMATS) + [".gz", ""]
_ASCII_JSONISH = st.text(alphabet='{}[]",:0123456789abc \n\t\\', max_size=300).map(str.encode)
CONTENT = st.one_of(
    st.binary(max_size=600),
    _ASCII_JSONISH,
    st.builds(lambda n, tail: b"[" * n + tail, st.integers(0, 50_000), st.binary(max_size=20)),
    st.builds(lambda n: b'{"a": ' + b"{" * n, st.integers(0, 50_000)),
    st.builds(lambda q, n: (b'"' * q) + b"x" * n + b",y\n", st.integers(0, 3), st.integers(0, 200_000)),
    st.just(b"PAR1" + b"\xff" * 20 + b"PAR1"),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=CONTENT, suffix=st.sampled_from(SUFFIXES))
def test_fuzz_any_data_file_ends_in_columns_a_notice_or_a_one_line_refusal(tmp_path, content, suffix):
    path = tmp_path / f"data{suffix}"
    path.write_bytes(content)
    needs = TRLFramework().dataset_needs({**MODEL, "dataset_name": path.name}, TrainingType.SFT)
    try:
        dataset_check.check_datasets(needs, tmp_path)
    except ValueError as exc:
        message = str(exc)
        assert message.startswith("`dataset_name`: "), message[:300]
        assert path.name in message.splitlines()[0]
        assert len(message.splitlines()[0]) < 600


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    layout=st.lists(
        st.tuples(st.sampled_from(["file", "dir", "link", "loop", "fifo"]), st.lists(st.sampled_from("ab"), min_size=1, max_size=4)),
        max_size=12,
    )
)
def test_fuzz_any_folder_layout_ends_in_columns_a_notice_or_a_refusal(tmp_path, layout):
    root = tmp_path / f"ds-{os.urandom(4).hex()}"
    root.mkdir()
    for kind, parts in layout:
        path = root.joinpath(*parts[:-1], f"{parts[-1]}.jsonl" if kind != "dir" else parts[-1])
        if os.path.lexists(path):
            continue  # written already (writing into a FIFO made earlier would block the test)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "file":
                path.write_text(json.dumps({"text": "t"}) + "\n")
            elif kind == "dir":
                path.mkdir(exist_ok=True)
            elif kind == "link":
                path.symlink_to(root)
            elif kind == "loop":
                path.symlink_to(path.name)
            elif hasattr(os, "mkfifo"):
                os.mkfifo(path)
        except OSError:
            continue  # the layout clashes with itself (a file where a folder is): skip that entry
    native: dict[str, Any] = {**MODEL, "dataset_name": root.name}
    needs = TRLFramework().dataset_needs(native, TrainingType.SFT)
    try:
        dataset_check.check_datasets(needs, tmp_path)
    except ValueError as exc:
        assert str(exc).startswith("`dataset_name`: "), str(exc)[:300]


@pytest.mark.parametrize("target", ["/proc/self/status", "/dev/zero", "fifo"])
def test_a_script_that_is_not_a_plain_file_is_refused_without_being_read(tmp_path, target):
    if target == "fifo":
        os.mkfifo(tmp_path / "pipe")
        target = str(tmp_path / "pipe")
    elif not os.path.exists(target):
        pytest.skip(f"no {target} here")
    (tmp_path / "train.py").symlink_to(target)
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", write_config(tmp_path, {**MODEL, "dataset_name": "trl-lib/Capybara", "script": "train.py"}))
    text = "\n".join(info.value.issues)
    assert "`script`: " in text and ("not a regular file" in text or "file of the operating system" in text), text
