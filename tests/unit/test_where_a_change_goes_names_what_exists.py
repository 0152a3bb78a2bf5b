"""docs/architecture.md's "Where a change goes" table stays true: every file, folder and test it
names exists, and it has the rows a new workload kind and a new after-training command need.

A path in the table is written relative to ``cw_cli/`` (``render/plan.py``) or to the repository
(``tests/unit/...``, ``docs/...``); a placeholder such as ``<kind>`` stands for a new file and is
checked by its folder.
"""

from __future__ import annotations

import re

from unit_helpers import REPO

DOC = REPO / "docs" / "architecture.md"
_CODE = re.compile(r"`([^`]+)`")
_PATHISH = re.compile(r"^[\w./<>-]+$")


def table_rows() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Where a change goes", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")][1:]


def named_paths(row: str) -> list[str]:
    """The backticked words of a row that name a file or a folder."""
    found = []
    for word in _CODE.findall(row):
        if _PATHISH.match(word) and "/" in word:  # a bare name is relative to a folder the row names
            found.append(word)
    return found


def exists(path: str) -> bool:
    if "<" in path:  # a file to be added: its folder must exist
        path = path.split("<", 1)[0].rsplit("/", 1)[0]
    return any((base / path).exists() for base in (REPO / "cw_cli", REPO))


def test_every_path_the_table_names_exists():
    rows = table_rows()
    assert len(rows) >= 10
    missing = [(row.split("|")[1].strip(), path) for row in rows for path in named_paths(row) if not exists(path)]
    assert missing == []


def test_the_table_says_where_a_workload_kind_and_an_after_training_command_go():
    kinds = {row.split("|")[1].strip() for row in table_rows()}
    assert {"a workload kind", "an after-training command"} <= kinds


def test_the_check_sees_a_path_that_is_gone():
    row = "| x | `render/no_such_module.py` and `render/workloads/<kind>.py` | `tests/unit/nothing_here.py` |"
    assert [path for path in named_paths(row) if not exists(path)] == ["render/no_such_module.py", "tests/unit/nothing_here.py"]
