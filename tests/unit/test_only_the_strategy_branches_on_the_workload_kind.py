"""Only the workload strategy branches on the workload kind (Job, JobSet, servers only).

What a run's owner is, how it is rendered, created, released, waited for, read back and
explained is answered once per kind: by the rendering half (``cw_cli/render/workloads/``, and
``render/workload.py``, which chooses the kind) and the cluster half (``cw_cli/k8s/workloads.py``).
Adding a kind then touches those places only. Every other module asks the strategy; this test
reads the source of ``cw_cli`` and fails on a module that compares something with ``"Job"`` /
``"JobSet"`` (or ``JOB`` / ``JOBSET``), tests ``owner_kind ==``, reads ``.gang``, or spells an
owner's ``Job/`` / ``JobSet/`` object key.
"""

from __future__ import annotations

import ast
from pathlib import Path

from unit_helpers import REPO

PACKAGE = REPO / "cw_cli"
#: The strategy's own modules (relative to cw_cli), and the test cluster (it installs JobSet).
STRATEGY = ("render/workload.py", "render/workloads/", "k8s/workloads.py", "testcluster/")
KINDS = {"Job", "JobSet"}
KIND_NAMES = {"JOB", "JOBSET"}
KEY_PREFIXES = ("Job/", "JobSet/")


def _names_a_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in KINDS or node.value.startswith(KEY_PREFIXES)
    if isinstance(node, ast.Name):
        return node.id in KIND_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in KIND_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(element) for element in node.elts)
    if isinstance(node, ast.JoinedStr):
        return bool(node.values) and _names_a_kind(node.values[0])
    return False


def _is_owner_kind(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "owner_kind") or (
        isinstance(node, ast.Attribute) and node.attr == "owner_kind"
    )


def kind_branches(source: str) -> list[tuple[int, str]]:
    """(line, code) of each place a module's source branches on the workload kind."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            by_value = not all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)  # `is None` is no branch
            if any(_names_a_kind(o) or (by_value and _is_owner_kind(o)) for o in operands):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr == "gang" and isinstance(node.ctx, ast.Load):
            found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and any(_names_a_kind(arg) for arg in node.args)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def violations(package: Path) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.startswith(STRATEGY):
            continue
        for line, code in kind_branches(path.read_text(encoding="utf-8")):
            problems.append(f"{relative}:{line}: {code}")
    return problems


def test_no_module_outside_the_strategy_branches_on_the_workload_kind():
    assert violations(PACKAGE) == []


def test_the_check_finds_each_form_of_branch():
    """The check itself: each way the old code branched is found, a Deployment test is not."""
    source = "\n".join([
        "if kind == 'JobSet': pass",
        "if manifest['kind'] in ('Job', 'JobSet'): pass",
        "if workload.gang: pass",
        "if kind == JOBSET: pass",
        "if plan.owner_kind == 'ConfigMap': pass",
        "gang = f'JobSet/{run}' in view.objects",
        "any(o.startswith(('Job/', 'JobSet/')) for o in objects)",
        "if kind == 'Deployment': pass",
    ])  # fmt: skip
    assert [line for line, _ in kind_branches(source)] == [1, 2, 3, 4, 5, 6, 7]
