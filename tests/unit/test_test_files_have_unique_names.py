"""Pytest's default (rootdir-relative "prepend") import mode needs every test module's basename
to be unique across tests/: two files of one name stop collection of the whole suite."""

from __future__ import annotations

from collections import defaultdict

from unit_helpers import REPO


def test_no_two_test_files_share_a_basename() -> None:
    paths_by_name: dict[str, list[str]] = defaultdict(list)
    for path in (REPO / "tests").rglob("test_*.py"):
        paths_by_name[path.name].append(str(path.relative_to(REPO)))
    repeated = {name: paths for name, paths in paths_by_name.items() if len(paths) > 1}
    assert not repeated, f"rename one of each: {repeated}"
