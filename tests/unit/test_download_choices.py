"""What `cw download` takes from a run's listing, and the folders it will write into."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from cw_cli.after_training.download import MARKER, _Marker, check_room
from cw_cli.errors import ConfigError, Conflict, CwError
from cw_cli.render.artifact_choice import choose_source

LISTING = {"artifacts": [
    {"kind": "checkpoint", "step": 10, "complete": True, "path": "/checkpoints/r/checkpoint-10"},
    {"kind": "checkpoint", "step": 20, "complete": False, "path": "/checkpoints/r/checkpoint-20"},
    {"kind": "final", "step": 10, "complete": True, "path": "/checkpoints/r"},
    {"kind": "export", "step": None, "complete": True, "path": "/checkpoints/r/exported/final-merged"},
]}  # fmt: skip


@pytest.mark.parametrize(
    "which,folder",
    [("final", "r"), ("latest", "r/checkpoint-10"), ("10", "r/checkpoint-10"), ("export:final-merged", "r/exported/final-merged")],
)
def test_each_choice_names_its_folder(which, folder):
    assert choose_source(LISTING, which).folder == folder


@pytest.mark.parametrize(
    "which,message",
    [("20", "is being written"), ("30", "has no 30 to download; there: checkpoint 10, final, export:final-merged"),
     ("export:nope", "has no export:nope"), ("../x", "expected final, latest, best, a step number or export:NAME"),
     ("\u00b2", "expected final, latest, best, a step number or export:NAME")],
)  # fmt: skip
def test_what_is_not_there_or_not_whole_is_refused(which, message):
    with pytest.raises(ConfigError) as caught:
        choose_source(LISTING, which)
    assert message in caught.value.issues[0]


def test_only_an_earlier_download_of_the_same_source_is_written_into(tmp_path):
    origin = {"run": "r", "namespace": "n", "source": "r"}
    _Marker(tmp_path / "new", origin).claim()
    assert json.loads((tmp_path / "new" / MARKER).read_text()) == {**origin, "files": {}}
    again = _Marker(tmp_path / "new", origin)
    again.claim()  # the same download again: goes on
    item = {"path": "model.safetensors", "size": 3, "mtime": 5.0}
    (tmp_path / "new" / "model.safetensors").write_bytes(b"abc")
    again.record(item, hashlib.sha256(b"abc").hexdigest(), tmp_path / "new" / "model.safetensors")
    third = _Marker(tmp_path / "new", origin)
    third.claim()
    assert third.finished(item, tmp_path / "new")  # recorded: not sent again
    assert not third.finished({**item, "mtime": 6.0}, tmp_path / "new")  # changed in the pod since: sent again
    (tmp_path / "new" / "model.safetensors").write_bytes(b"abc")
    assert third.finished(item, tmp_path / "new")  # touched here since, but the same bytes: its hash says so
    (tmp_path / "new" / "model.safetensors").write_bytes(b"abd")
    assert not third.finished(item, tmp_path / "new")  # changed here since: sent again
    with pytest.raises(Conflict, match="holds a download of r"):
        _Marker(tmp_path / "new", {**origin, "source": "r/checkpoint-10"}).claim()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("x")
    with pytest.raises(Conflict, match="holds other files"):
        _Marker(tmp_path / "other", origin).claim()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / MARKER).write_text("[1]")
    with pytest.raises(Conflict, match="holds other files"):
        _Marker(tmp_path / "broken", origin).claim()


def test_a_download_larger_than_the_free_disk_is_refused_before_copying(tmp_path):
    """The real free space of the disk under tmp_path: one byte over it is refused, naming both sizes."""
    import shutil

    free = shutil.disk_usage(tmp_path).free
    check_room(tmp_path, 0)
    check_room(tmp_path, free // 2)
    with pytest.raises(CwError) as caught:
        check_room(tmp_path, free + 2**30)
    # the free space moves while other processes write: the message's figures, not exact ones
    assert re.search(r"has \d+\.\d GiB free, and \d+\.\d GiB are left to copy", caught.value.message)
    assert list(tmp_path.iterdir()) == []  # nothing was written
