"""An import inside a function is for a listed heavy module, nothing else.

Importing inside a function keeps start-up fast (`cw --help`, a dry run, `cw status`), but an
import hidden in a function for no reason hides a dependency and costs a lookup on every call.
The rule: a function may import

- a module of :data:`HEAVY` (measured cold on 2 cores with ``python -X importtime -c "import M"``),
- a cw module that imports one of them at its top level, directly or through other cw modules,
- a cw module of :data:`LAZY_CW`, each with the reason measured, or
- a cw module that imports the importing one (the import would be a cycle at the top).

Everything else is imported at the top of the module. The second half is the start-up check
itself: the commands that must start fast load none of the heavy modules they do not use.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from unit_helpers import REPO

PACKAGE = REPO / "cw_cli"
#: Top-level names of the modules worth importing lazily, with their cold import time (ms).
HEAVY = {
    # third-party
    "kubernetes": 156, "jinja2": 33, "pydantic": 28, "click": 20, "msgspec": 20, "yaml": 13, "rich": 8,
    "torch": 1000, "transformers": 1000, "peft": 500, "datasets": 500, "huggingface_hub": 100, "pyarrow": 100,
    "matplotlib": 300, "safetensors": 10, "accelerate": 300, "trl": 1000, "numpy": 60, "cryptography": 20,
    "tokenizers": 138,  # the test cluster's tiny model, built with the image's own packages
    "apprise": 330,  # `notify:` URLs checked at launch only (features/notify/config.py)
    "urllib3": 120, "tomli": 5, "tomli_w": 2, "websocket": 30,  # websocket-client: exec and port-forward streams only  # tomli(_w): only for verifiers' TOML, rarely used
    # standard library, 5 ms or more (or pulling a C extension in)
    "tomllib": 10, "ssl": 11, "http": 20, "concurrent": 10, "subprocess": 8, "tarfile": 8, "tempfile": 8,
    "shutil": 6, "socket": 6, "difflib": 5, "csv": 5, "traceback": 7, "urllib": 25, "json": 6, "base64": 5,
    "hashlib": 5, "gzip": 1, "zlib": 1, "signal": 3, "threading": 2, "importlib": 1, "asyncio": 30,
    "email": 10, "zipfile": 8, "secrets": 5, "random": 4, "unicodedata": 1, "warnings": 0,
    "pathlib": 3,  # with urllib.parse, ipaddress and ntpath: `cw status --help` needs none of them
}  # fmt: skip
#: cw modules that are light by :data:`HEAVY` but measured worth deferring.
LAZY_CW = {
    "cw_cli.config.quantity": "compiles its unit regexes: 1.8 M instructions of every `cw status` (callgrind)",
    "cw_cli.cli.local_run": "the local runner's process handling, only for --local",
    "cw_cli.metrics.chart": "the terminal chart, only for `cw metrics` without -o",
    "cw_cli.render.export": "pulls runtime/cw_export (argparse, socket, selectors): 35 M instructions of a dry run "
    "without eval: (callgrind, 968 M -> 933 M), only for evaluation and export Jobs",
    "cw_cli.render.naming": "keeps `import cw_cli.api` (cw status, list, logs) free of the render layer "
    "(tests/unit/test_cli_goes_through_the_api.py)",
}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _scan(package: Path) -> tuple[dict[str, Path], dict[str, set[str]], dict[str, list[tuple[int, str]]]]:
    """(module -> path, module -> its top-level imports, module -> its (line, import) in functions)."""
    pod_side = {"runtime", "pod"}  # cw_cli/runtime/ and a feature's pod/: scripts run in the images, by their own rules
    paths = {_module_name(p, package.parent): p for p in package.rglob("*.py") if not pod_side & set(p.relative_to(package).parts)}
    top: dict[str, set[str]] = {}
    local: dict[str, list[tuple[int, str]]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exempt = {id(c) for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
                  for c in ast.walk(n)}  # fmt: skip
        in_function = {id(c) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for c in ast.walk(f) if c is not f}  # fmt: skip
        top[name], local[name] = set(), []
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in exempt:
                continue
            targets = _targets(node, name, path.name == "__init__.py", paths)
            if id(node) in in_function:
                local[name] += [(node.lineno, t) for t in targets]
            else:
                top[name].update(targets)
    return paths, top, local


def _targets(node: ast.Import | ast.ImportFrom, here: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = here.split(".") if is_package else here.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def misplaced_imports(package: Path) -> list[str]:
    """Function-local imports the rule does not allow, as ``path:line: module``."""
    paths, top, local = _scan(package)

    def closure(module: str, seen: set[str]) -> set[str]:
        if module not in seen:
            seen.add(module)
            parts = module.split(".")
            for i in range(1, len(parts)):  # importing a.b.c runs a and a.b first
                closure(".".join(parts[:i]), seen)
            for target in top.get(module, ()):
                closure(target, seen)
        return seen

    found = []
    for name, imports in local.items():
        for line, target in imports:
            if target.split(".")[0] in HEAVY or target in LAZY_CW:
                continue
            if target.split(".")[0] == "cw_cli":
                reached = closure(target, set())
                if any(m.split(".")[0] in HEAVY or m in LAZY_CW for m in reached) or name in reached:
                    continue
            found.append(f"{paths[name].relative_to(package.parent)}:{line}: {target}")
    return sorted(set(found))


def test_functions_import_only_heavy_modules():
    assert misplaced_imports(PACKAGE) == []


def test_the_check_finds_a_light_import_in_a_function(tmp_path):
    package = tmp_path / "cw_cli"
    (package / "k8s").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text("class CwError(Exception): ...\n")
    (package / "k8s" / "__init__.py").write_text("")
    (package / "k8s" / "slow.py").write_text("import yaml\n")
    (package / "k8s" / "mod.py").write_text(
        "def f():\n    import os\n    import json\n    from cw_cli.errors import CwError\n"
        "    from cw_cli.k8s.slow import x\n"
    )
    assert misplaced_imports(package) == ["cw_cli/k8s/mod.py:2: os", "cw_cli/k8s/mod.py:4: cw_cli.errors"]


#: What each fast command must not load (it does not use them).
NOT_AT_START = {
    ("--help",): {"kubernetes", "pydantic", "jinja2", "yaml", "rich", "ssl", "http"},
    ("status", "--help"): {"kubernetes", "pydantic", "jinja2", "yaml", "rich", "ssl"},
    ("trl", "sft", "configs/trl-sft.yaml", "--dry-run"): {"kubernetes", "rich", "ssl", "http", "torch", "transformers"},
}


@pytest.mark.parametrize("args", list(NOT_AT_START), ids=lambda a: " ".join(a[:2]))
def test_fast_commands_load_none_of_the_heavy_modules_they_do_not_use(args, tmp_path):
    probe = (
        "import sys; sys.argv = ['cw', *sys.argv[1:]]\n"
        "from cw_cli.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}), file=sys.stderr)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO), "KUBECONFIG": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-c", probe, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    loaded = set(ast.literal_eval(done.stderr.strip().splitlines()[-1]))
    assert loaded & NOT_AT_START[args] == set()
