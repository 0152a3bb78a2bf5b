"""The import graph follows docs/architecture.md: each step imports only the steps before it.

Every ``import`` of a cw module counts, inside functions too; only ``if TYPE_CHECKING:`` blocks
are exempt (annotations, not dependencies). The pod-side runtime files import nothing of cw:
they run in images where cw is not installed.

The optional features (``cw_cli/features/<name>/``) sit above every step, as plugins do: a
feature may import any step, and no step imports a feature (it asks ``cw_cli.features``, the
registry, which with ``features/contract.py`` is step 0). A feature's ``pod/`` folder is pod-side.
"""

from __future__ import annotations

import ast
from pathlib import Path

from unit_helpers import REPO

PACKAGE = REPO / "cw_cli"
#: Step of each top-level module or subpackage; a module may import its own step and lower ones.
STEPS = {
    "__init__": 0, "types": 0, "errors": 0, "labels": 0, "cache": 0, "plain_files": 0,
    "runtime": 0,  # the pod-side files import nothing of cw: any step may use their pure functions
    "config": 1,
    "frameworks": 2, "estimate": 2,
    "render": 3,
    "client": 1, "diagnosis": 3,
    "k8s": 4, "after_training": 4, "localrun": 4, "testcluster": 4,
    "metrics": 5, "sweep": 5,
    "api": 6,
    "cli": 7, "__main__": 8,
}  # fmt: skip
POD_SIDE = "runtime"
#: The features' registry and contract (step 0), and a feature's own modules (above every step).
FEATURES, A_FEATURE = "features", "a feature"
STEPS[FEATURES], STEPS[A_FEATURE] = 0, 99


def _step_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == FEATURES and parts[2] != "contract":
        return A_FEATURE
    return parts[1] if len(parts) > 1 else "__init__"


def _step_here(relative: Path) -> str:
    """The step of a module of the package, by its path (``features/notify/env.py``: a feature)."""
    parts = relative.with_suffix("").parts
    if parts[0] == FEATURES and len(parts) > 2:
        return POD_SIDE if "pod" in parts[2:] else A_FEATURE
    return parts[0]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside.update(id(child) for child in ast.walk(node))
    return inside


def cw_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every cw import in a file, TYPE_CHECKING blocks left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exempt = _type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "cw_cli":
            if node.module == "cw_cli":
                found += [(node.lineno, f"cw_cli.{alias.name}" if alias.name in STEPS else "cw_cli") for alias in node.names]
            else:
                found.append((node.lineno, str(node.module)))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "cw_cli"]
    return found


def layering_violations(package: Path) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        here = _step_here(path.relative_to(package))
        for line, module in cw_imports(path):
            there = _step_of(module)
            if here == POD_SIDE:
                problems.append(f"{path.relative_to(package)}:{line}: pod-side code imports {module}")
            elif there != here and STEPS.get(there, 99) > STEPS.get(here, -1):
                problems.append(f"{path.relative_to(package)}:{line}: {here} (step {STEPS.get(here)}) imports {module}")
    return problems


def test_every_package_has_a_step():
    tops = {path.relative_to(PACKAGE).with_suffix("").parts[0] for path in PACKAGE.rglob("*.py")}
    assert tops - set(STEPS) - {POD_SIDE} == set()


def test_no_step_imports_a_later_one():
    assert layering_violations(PACKAGE) == []


def test_the_check_finds_a_backward_import(tmp_path):
    """The check itself: a config module importing the renderer is reported, with its line."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cw_cli.cli.app import main\n"
        "def f():\n    from cw_cli.render.plan import build_plan\n"
    )
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "pod.py").write_text("import cw_cli.errors\n")
    (tmp_path / "features" / "notify" / "pod").mkdir(parents=True)
    (tmp_path / "features" / "notify" / "pod" / "cw_notify.py").write_text("import cw_cli.errors\n")
    (tmp_path / "features" / "notify" / "env.py").write_text("from cw_cli.api import Session\n")  # a feature may
    (tmp_path / "render" / "x.py").parent.mkdir()
    (tmp_path / "render" / "x.py").write_text("from cw_cli.features.notify.env import notify_env\nfrom cw_cli import features\n")
    assert layering_violations(tmp_path) == [
        "config/bad.py:5: config (step 1) imports cw_cli.render.plan",
        "features/notify/pod/cw_notify.py:1: pod-side code imports cw_cli.errors",
        "render/x.py:1: render (step 3) imports cw_cli.features.notify.env",
        "runtime/pod.py:1: pod-side code imports cw_cli.errors",
    ]
