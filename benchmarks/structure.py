"""The figures of cw's structure that the issue "A feature is one folder" steers by, read from the source.

Usage:
    python benchmarks/structure.py [--json] [--list NAME]

Each figure is counted with Python's ``ast`` over ``cw_cli/`` (the pod-side scripts in
``runtime/`` included: they are cw's code too):

- ``functions_over_60``: functions (and methods) spanning more than 60 lines, decorators excluded.
- ``modules_over_400``: modules of more than 400 lines.
- ``local_cw_imports``: ``import``/``from`` statements of cw's own modules inside a function body
  (``local_imports`` counts every module); these hide the dependency graph from readers and tools.
- ``kind_branches_outside_strategy``: places outside the workload strategy (``render/workload.py``,
  ``render/workloads/``, ``k8s/workloads.py``, ``testcluster/``) that compare with a workload kind
  (``"Job"``, ``"JobSet"``, ``"Deployment"``, ``JOB``, ``JOBSET``), test ``services_only``, read
  ``.gang``, or compare ``nodes`` with a number.
- ``feature_packages``: for each optional feature, the top-level subpackages of ``cw_cli`` (a
  feature's own folder, ``features/<name>``, counting as one) holding a module whose file name
  names it (evaluation: ``eval``, ``scores``, ``gate``; pipelines; export; notify). A name-based
  count: a feature's code in a module named otherwise is not seen.

``--list NAME`` prints the places behind one figure. Duplicate pairs come from the ``duplicates``
tool, and start-up instructions from ``benchmarks/instructions.py``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cw_cli"
STRATEGY = ("render/workload.py", "render/workloads/", "k8s/workloads.py", "testcluster/")
KINDS = {"Job", "JobSet", "Deployment"}
KIND_NAMES = {"JOB", "JOBSET", "DEPLOYMENT"}
FEATURES = {
    "evaluation": ("eval", "scores", "gate"),
    "pipelines": ("pipeline",),
    "export": ("export",),
    "notify": ("notify",),
}
LONG_FUNCTION, LONG_MODULE = 60, 400


def _modules(package: Path) -> Iterator[tuple[str, ast.Module, int]]:
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        yield path.relative_to(package).as_posix(), ast.parse(text), len(text.splitlines())


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _is_cw_import(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "cw_cli"
    return any(alias.name.split(".")[0] == "cw_cli" for alias in node.names)


def _local_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    seen: set[int] = set()
    for function in _functions(tree):
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in seen:
                seen.add(id(node))  # a nested function's import is counted once
                yield node


def _names_a_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in KINDS or node.value.startswith(("Job/", "JobSet/"))
    if isinstance(node, ast.Name):
        return node.id in KIND_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in KIND_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(element) for element in node.elts)
    return False


def _is_named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def kind_branches(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, code) of each line that branches on the workload kind (see the module's docstring)."""
    found = []
    tests = [n.test for n in ast.walk(tree) if isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Assert))]
    tests += [value for n in ast.walk(tree) if isinstance(n, ast.BoolOp) for value in n.values]
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_a_kind(o) for o in operands) or (
                any(_is_named(o, "nodes") for o in operands)
                and any(isinstance(o, ast.Constant) and isinstance(o.value, int) for o in operands)
            ):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr == "gang" and isinstance(node.ctx, ast.Load):
            found.append((node.lineno, ast.unparse(node)))
    for test in tests:
        for node in ast.walk(test):
            if _is_named(node, "services_only") and not isinstance(node, ast.Compare):
                found.append((node.lineno, ast.unparse(test)))
                break
    by_line: dict[int, str] = {}
    for line, code in sorted(found, key=lambda item: (item[0], -len(item[1]))):
        by_line.setdefault(line, code)  # one place per line: the widest expression there
    return sorted(by_line.items())


def measure(package: Path = PACKAGE) -> tuple[dict[str, object], dict[str, list[str]]]:
    """The figures, and the places behind each countable one."""
    places: dict[str, list[str]] = {"functions_over_60": [], "modules_over_400": [], "local_cw_imports": [],
                                     "local_imports": [], "kind_branches_outside_strategy": []}  # fmt: skip
    features: dict[str, set[str]] = {name: set() for name in FEATURES}
    for relative, tree, lines in _modules(package):
        if lines > LONG_MODULE:
            places["modules_over_400"].append(f"{relative} ({lines} lines)")
        for function in _functions(tree):
            span = (function.end_lineno or function.lineno) - function.lineno + 1
            if span > LONG_FUNCTION:
                places["functions_over_60"].append(f"{relative}:{function.lineno} {function.name} ({span} lines)")
        for node in _local_imports(tree):
            where = f"{relative}:{node.lineno} {ast.unparse(node)}"
            places["local_imports"].append(where)
            if _is_cw_import(node):
                places["local_cw_imports"].append(where)
        if not relative.startswith(STRATEGY):
            places["kind_branches_outside_strategy"] += [f"{relative}:{line}: {code}" for line, code in kind_branches(tree)]
        parts = Path(relative).parts
        stem, folder = Path(relative).stem, "/".join(parts[:2]) if parts[0] == "features" else parts[0]
        for name, words in FEATURES.items():
            if any(word in stem for word in words):
                features[name].add(folder)
    figures: dict[str, object] = {key: len(found) for key, found in places.items()}
    figures["feature_packages"] = {name: sorted(folders) for name, folders in features.items()}
    return figures, places


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--list", metavar="NAME", help="print the places behind one figure")
    args = parser.parse_args(argv)
    figures, places = measure()
    if args.list:
        if args.list not in places:
            print(f"no figure {args.list!r}; figures with places: {', '.join(places)}", file=sys.stderr)
            return 2
        print("\n".join(places[args.list]))
        return 0
    if args.json:
        print(json.dumps(figures, indent=2, sort_keys=True))
        return 0
    for key, value in figures.items():
        if isinstance(value, dict):
            for name, folders in value.items():
                print(f"{key}.{name}: {len(folders)} ({', '.join(folders)})")
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
