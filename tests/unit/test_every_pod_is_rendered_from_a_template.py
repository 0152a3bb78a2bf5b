"""Every pod cw creates (a run's, the after-training reader, server and export) is rendered from a
template in kubeconfigs/ through cw_cli/render, where every value goes through tojson.

Checked in the source: no module outside cw_cli/render writes a pod or a workload as a Python dict
(a mapping with a `containers` key, or a Pod/Job/... `kind` beside a `spec`), and the after-training
commands take no security settings from render: the templates and their renderers own them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from unit_helpers import REPO

PACKAGE = REPO / "cw_cli"
#: Kinds whose spec holds pods.
POD_KINDS = {"Pod", "Job", "JobSet", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "CronJob"}
#: Where manifests are built: the renderers, and the pod-side scripts (they build none, but run in pods).
RENDERERS = ("render/", "runtime/")


def _key(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def pod_dicts(package: Path) -> list[str]:
    """``file:line`` of each dict literal outside the renderers that is a pod or a workload."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        if where.startswith(RENDERERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Dict):
                continue
            keys = {_key(key): value for key, value in zip(node.keys, node.values)}
            if "containers" in keys or (_key(keys.get("kind")) in POD_KINDS and "spec" in keys):
                found.append(f"{where}:{node.lineno}")
    return found


def security_imports(package: Path) -> list[str]:
    """``file:line`` of each import of a ``*_SECURITY`` constant by the after-training commands."""
    found = []
    for path in sorted((package / "after_training").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and any(alias.name.endswith("SECURITY") for alias in node.names):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_pod_is_written_as_a_dict_outside_the_renderers():
    assert pod_dicts(PACKAGE) == []


def test_the_after_training_commands_take_no_security_settings_from_render():
    assert security_imports(PACKAGE) == []


def test_the_check_finds_a_pod_dict_and_a_security_import(tmp_path):
    (tmp_path / "after_training").mkdir()
    (tmp_path / "after_training" / "reader.py").write_text(
        "from cw_cli.render.plan import CONTAINER_SECURITY\n"
        "POD = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {}, 'spec': {'containers': []}}\n"
        "OWNER = {'apiVersion': 'v1', 'kind': 'Pod', 'name': 'x', 'uid': 'u'}\n"  # an ownerReference: no pod
    )
    assert pod_dicts(tmp_path) == ["after_training/reader.py:2", "after_training/reader.py:2"]
    assert security_imports(tmp_path) == ["reader.py:1"]
