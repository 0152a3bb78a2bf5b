"""A corrupt record in the test cluster's state folder never breaks `cw cluster status/down`.

The pid records (pids/*.json) and cluster.json are files anyone can edit or truncate; a record
of the wrong shape used to be a TypeError or OverflowError traceback. Now such a record is
skipped: no traceback, no signal sent to the pid it names, and `down` still removes the folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cw_cli.testcluster import cluster, procs

pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

GOOD = {"name": "etcd", "pid": 2**22 - 1, "start_time": 1, "exe": "/bin/etcd", "log": "/tmp/etcd.log"}
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)  # fmt: skip
# A record with one field replaced by any JSON value, or any JSON document at all.
RECORDS = st.one_of(st.builds(lambda key, value: {**GOOD, key: value}, st.sampled_from(sorted(GOOD)), JSON), JSON)
PIDS = [-1, 0, 2**22 + 1, 10**20, 1e30, "1", [1], None, True]


def _state(tmp_path: Path, record: bytes, info: bytes | None = None) -> Path:
    state = tmp_path / "state"
    (state / "pids").mkdir(parents=True, exist_ok=True)
    (state / cluster.MARKER).write_text("")
    (state / "pids" / "etcd.json").write_bytes(record)
    if info is not None:
        (state / cluster.STATE_FILE).write_bytes(info)
    return state


@pytest.mark.parametrize("pid", PIDS)
def test_a_record_with_a_pid_no_process_has_is_skipped_and_nothing_is_signalled(tmp_path, monkeypatch, pid):
    signalled: list[int] = []
    monkeypatch.setattr(os, "kill", lambda target, sig: signalled.append(target))
    state = _state(tmp_path, json.dumps({**GOOD, "pid": pid}).encode())
    assert procs.load_records(state / "pids") == []
    assert cluster.status(state).processes == []
    assert cluster.down(state).removed_state
    assert signalled == []


@settings(max_examples=150, deadline=None, database=None)
@given(record=RECORDS, info=st.one_of(st.none(), JSON, st.builds(lambda v: {"state_dir": v, "server": v}, JSON)))
def test_any_record_and_cluster_file_give_a_status_and_a_down(tmp_path_factory, record, info):
    tmp_path = tmp_path_factory.mktemp("corrupt")
    state = _state(tmp_path, json.dumps(record).encode(), None if info is None else json.dumps(info).encode())
    for found in procs.load_records(state / "pids"):
        assert isinstance(found.pid, int) and 0 < found.pid <= 2**22
    cluster.status(state)  # no exception (the pid named is no process here)
    assert cluster.down(state).removed_state


@pytest.mark.parametrize("content", [b"\xff\xfe", b"", b"{", b"[1]", b'{"name": 5}'])
def test_cw_cluster_status_and_down_end_cleanly_on_a_corrupt_record(tmp_path, content):
    from cw_cli.cli.cluster import cluster_group

    state = _state(tmp_path, content, content)
    runner = CliRunner()
    status = runner.invoke(cluster_group, ["status", "--state-dir", str(state)])
    assert status.exit_code == 1 and isinstance(status.exception, SystemExit), status.output
    assert "no test cluster at" in status.output
    down = runner.invoke(cluster_group, ["down", "--state-dir", str(state)])
    assert down.exit_code == 0 and f"removed {state}" in down.output, down.output


def test_a_record_that_is_a_fifo_is_not_waited_for(tmp_path):
    state = _state(tmp_path, b"")
    (state / "pids" / "etcd.json").unlink()
    os.mkfifo(state / "pids" / "etcd.json")
    os.mkfifo(state / cluster.STATE_FILE)
    assert procs.load_records(state / "pids") == []
    assert cluster.status(state).exists is False
