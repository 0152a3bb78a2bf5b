"""Role and resource names are spelled in one module (cw_cli/labels.py), the templates included.

A second spelling of `nvidia.com/gpu` or of a pod role is how a renderer and a reader drift
apart (one renames, the other still selects the old word). Strings that only coincide with a
role (a kubeconfig's `server` field, verifiers' `[trainer]` table, TRL's `vllm_mode: server`, the
`reward` metric, command names) are listed here with why they are not roles.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from unit_helpers import REPO

from cw_cli import labels

PACKAGE = REPO / "cw_cli"
ROLE_WORDS = {labels.TRAINER, labels.SERVER, labels.REWARD, labels.EXPORT, labels.READER, labels.KEEPER}
#: Where a role's word is written, counted as a role: the layers that name pods, objects and logs.
ROLE_LAYERS = ("k8s", "render", "api/", "cli", "localrun")
#: (file, word): the same word, not a role.
NOT_ROLES = {
    ("client/kubeconfig.py", "server"): "the kubeconfig cluster's `server` field",
    ("client/kubeconfig_entries.py", "server"): "the kubeconfig cluster's `server` field",
    ("render/artifact_choice.py", "export"): "the artifact kind `cw_artifacts.py` lists",
    ("cli/app.py", "export"): "the command's name",
    ("cli/export.py", "export"): "the command's name",
    ("cli/artifacts.py", "reward"): "the `reward` metric a checkpoint logged",
    ("render/run_pods.py", "trainer"): "the template variable holding the trainer pod's values",
    ("render/run_pods.py", "keeper"): "the template variable holding the keeper's RBAC values",
}


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """(line, value) of every string constant of a module, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and ast.get_docstring(node, clean=False) is not None
    }
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]  # fmt: skip


def role_spellings(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        if not where.startswith(ROLE_LAYERS):
            continue
        for line, value in _string_constants(path):
            if value in ROLE_WORDS and (where, value) not in NOT_ROLES:
                found.append(f"{where}:{line}: {value!r}")
    return found


def test_the_gpu_resource_is_spelled_once():
    spelled = [f"{path.relative_to(PACKAGE)}:{line}"
               for path in sorted(PACKAGE.rglob("*.py")) if path.name != "labels.py"
               for line, value in _string_constants(path) if value == labels.GPU_RESOURCE]  # fmt: skip
    assert spelled == []


def test_roles_are_named_through_labels_in_the_layers_that_use_them():
    assert role_spellings(PACKAGE) == []


def test_the_templates_take_roles_as_values():
    """A template writes `roles.trainer`, never the word itself, in names, labels and containers."""
    pattern = re.compile(r"""(with_component\(["'](?:%s)["']\)|name: (?:%s)\s*$|containerName: (?:%s)\s*$)"""
                         % (("|".join(ROLE_WORDS),) * 3), re.MULTILINE)  # fmt: skip
    found = [f"{p.relative_to(REPO)}: {m.group(0).strip()}"
             for p in sorted((REPO / "kubeconfigs").rglob("*.j2")) for m in pattern.finditer(p.read_text())]  # fmt: skip
    assert found == []


def test_the_check_finds_a_role_spelled_out(tmp_path):
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "bad.py").write_text('"""Doc: trainer."""\nROLE = "trainer"\n')
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "fine.py").write_text('SECTION = "trainer"\n')  # not a layer that names pods
    assert role_spellings(tmp_path) == ["k8s/bad.py:2: 'trainer'"]


def test_a_plugin_that_says_launcher_resumes_still_resumes():
    """`entrypoint_resumes` was called `launcher_resumes`: a plugin written then keeps working."""
    from cw_cli.frameworks.base import BaseTrainingFramework

    class Old(BaseTrainingFramework):
        launcher_resumes = True

    class New(BaseTrainingFramework):
        entrypoint_resumes = True

    class Neither(BaseTrainingFramework):
        pass

    assert (Old.entrypoint_resumes, New.entrypoint_resumes, Neither.entrypoint_resumes) == (True, True, False)
