"""The scripts cw runs in the reader pod (cw_artifacts.py lists a run, cw_fetch.py lists and sends
files) meet whatever is on the volume: a malformed trainer_state.json in one checkpoint, a link
loop, a FIFO, a deep folder. One bad thing never makes the whole run unreadable, and nothing
hangs. Run as the pod runs them: `python3 -c "$(cat script)" ARGS`, from the volume's root."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cw_cli.frameworks.runtime_files import ARTIFACTS_FILE, FETCH_FILE, runtime_file


def _run(script_key: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", runtime_file(script_key), *args], cwd=cwd, capture_output=True, timeout=60)


@pytest.mark.parametrize(
    "state",
    ["[1, 2]", "{\"log_history\": 5, \"global_step\": \"ten\"}", "[" * 100_000 + "]" * 100_000, "\xff\xfe", "",
     "{\"log_history\": [1, \"x\", {\"step\": 10, \"loss\": 1.5}], \"global_step\": 10}"],
    ids=["a-list", "wrong-types", "nested-100k-deep", "not-utf8", "empty", "odd-history"],
)
def test_one_malformed_trainer_state_leaves_the_other_checkpoints_listed(tmp_path, state):
    run = tmp_path / "run"
    good, bad = run / "checkpoint-10", run / "checkpoint-20"
    good.mkdir(parents=True)
    bad.mkdir()
    (good / "trainer_state.json").write_text(json.dumps({"global_step": 10, "log_history": [{"step": 10, "loss": 1.5}]}))
    (bad / "trainer_state.json").write_bytes(state.encode("utf-8", "surrogateescape") if state != "\xff\xfe" else b"\xff\xfe")
    (run / "model.safetensors").write_bytes(b"\0" * 10)
    done = _run(ARTIFACTS_FILE, "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    listed = {(a["kind"], a["step"]): a for a in json.loads(done.stdout)["artifacts"]}
    assert listed[("checkpoint", 10)]["complete"] and listed[("checkpoint", 10)]["metrics"] == {"loss": 1.5}
    complete_bad = listed[("checkpoint", 20)]["complete"]
    assert complete_bad == (state.startswith("{") and "log_history" in state)  # only a mapping is a trainer state
    assert ("final", 10) in listed or ("final", 20) in listed or any(kind == "final" for kind, _ in listed)


def test_the_file_list_skips_links_fifos_and_hidden_files_and_never_follows_a_loop(tmp_path):
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "shard.bin").write_bytes(b"x" * 100)
    (model / ".hidden").write_text("no")
    os.mkfifo(model / "pipe")
    os.symlink(model, model / "sub" / "loop")
    os.symlink(model / "config.json", model / "link.json")
    deep = model
    for _ in range(60):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "too-deep.bin").write_bytes(b"z")
    done = _run(FETCH_FILE, "list", "model", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert [f["path"] for f in json.loads(done.stdout)["files"]] == ["config.json", "sub/shard.bin"]
    top = _run(FETCH_FILE, "list", "model", "top", cwd=tmp_path)
    assert [f["path"] for f in json.loads(top.stdout)["files"]] == ["config.json"]


def test_a_read_from_an_offset_sends_the_rest_and_hashes_the_whole_file(tmp_path):
    data = os.urandom(3 * 2**20 + 5)
    (tmp_path / "w.bin").write_bytes(data)
    done = _run(FETCH_FILE, "read", "w.bin", str(2**20 + 3), cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout == data[2**20 + 3 :]
    assert done.stderr.decode().split()[-3:] == ["cw-fetch-sha256", hashlib.sha256(data).hexdigest(), str(len(data))]


def test_a_fifo_is_refused_by_the_reader_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    fifo = _run(FETCH_FILE, "read", "pipe", "0", cwd=tmp_path)  # a plain open() would wait for a writer forever
    assert fifo.returncode != 0 and b"not a regular file" in fifo.stderr
    (tmp_path / "dev").symlink_to("/dev/zero")
    refused = _run(FETCH_FILE, "read", "dev", "0", cwd=tmp_path)
    assert refused.returncode != 0 and b"not a regular file" in refused.stderr
