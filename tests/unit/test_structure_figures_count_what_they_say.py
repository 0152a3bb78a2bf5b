"""benchmarks/structure.py (the figures issue 42 steers by) counts what it says, on a planted package."""

from __future__ import annotations

import sys

from unit_helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import structure  # noqa: E402


def test_each_figure_counts_its_planted_case_and_nothing_else(tmp_path):
    package = tmp_path / "cw_cli"
    (package / "render" / "workloads").mkdir(parents=True)
    (package / "features" / "notify" / "pod").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (package / "render" / "long.py").write_text(f"def long():\n{body}\n\ndef short():\n    return 1\n")
    (package / "render" / "lazy.py").write_text(
        "import json\n\ndef f():\n    import yaml\n    from cw_cli.errors import CwError\n    from . import long\n    return yaml\n")
    (package / "render" / "kinds.py").write_text(
        "def f(kind, request, cluster):\n    if kind == 'Deployment' or request.services_only:\n        return 1\n"
        "    return cluster.nodes > 1\n")
    (package / "render" / "workloads" / "job.py").write_text("def f(kind):\n    return kind == 'Job'\n")  # the strategy's own
    (package / "render" / "notify.py").write_text("x = 1\n")
    (package / "features" / "notify" / "pod" / "cw_notify.py").write_text("x = 1\n")
    (package / "big.py").write_text("x = 1\n" * 401)
    figures, places = structure.measure(package)
    assert places["functions_over_60"] == ["render/long.py:1 long (61 lines)"]
    assert places["modules_over_400"] == ["big.py (401 lines)"]
    assert figures["local_imports"] == 3 and figures["local_cw_imports"] == 2
    assert places["kind_branches_outside_strategy"] == [
        "render/kinds.py:2: kind == 'Deployment' or request.services_only", "render/kinds.py:4: cluster.nodes > 1"]
    assert figures["feature_packages"]["notify"] == ["features/notify", "render"]
