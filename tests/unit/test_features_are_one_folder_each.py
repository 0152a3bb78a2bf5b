"""Each optional feature is one folder (cw_cli/features/<name>/) that plugs in through the hooks it
declares: no module outside the folder imports it or is named after it, its hooks and pod files
exist, its block is a field of cw's config model, and the core passes a run's block to its hooks
only when the config has one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from unit_helpers import REPO, builtin_registry

from cw_cli import features
from cw_cli.config.models import CLUSTER_FIELDS, ClusterSpec
from cw_cli.features.contract import load_hook

PACKAGE = REPO / "cw_cli"
FEATURES = features.features()


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def misplaced(package: Path, names: list[str]) -> list[str]:
    """Modules outside a feature's folder that import it or are named after it."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        for name in names:
            home = Path("features") / name
            if home in relative.parents:
                continue
            if name in relative.stem:
                problems.append(f"{relative}: named after feature {name}; it belongs in cw_cli/{home}/")
            for line, module in _imports(path):
                if module.startswith(f"cw_cli.features.{name}."):
                    problems.append(f"{relative}:{line}: imports {module}; the core asks cw_cli.features for the hooks")
    return problems


def test_no_module_outside_a_features_folder_imports_it_or_is_named_after_it():
    assert FEATURES, "no feature is registered"
    assert misplaced(PACKAGE, [feature.name for feature in FEATURES]) == []


def test_the_check_finds_a_feature_outside_its_folder(tmp_path):
    (tmp_path / "render").mkdir()
    (tmp_path / "render" / "notify.py").write_text("x = 1\n")
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "session.py").write_text("from cw_cli.features.notify.config import check_urls\n")
    assert misplaced(tmp_path, ["notify"]) == [
        "api/session.py:1: imports cw_cli.features.notify.config.check_urls; the core asks cw_cli.features for the hooks",
        "render/notify.py: named after feature notify; it belongs in cw_cli/features/notify/",
    ]


@pytest.mark.parametrize("feature", FEATURES, ids=[feature.name for feature in FEATURES])
def test_a_features_declaration_resolves(feature):
    assert (PACKAGE / "features" / feature.name / "__init__.py").is_file()
    assert feature.block in CLUSTER_FIELDS and feature.block in ClusterSpec.model_fields
    assert ClusterSpec.model_fields[feature.block].description == feature.description
    for hook in (feature.spec, feature.trainer_env, feature.before_launch):
        if hook:
            assert callable(load_hook(hook)), hook
    for key, path in feature.pod_files.items():
        assert path.is_file() and path.parent.name == "pod" and PACKAGE / "features" / feature.name in path.parents
        assert key == path.name  # imported by that name beside the entrypoint


def _plan(tmp_path: Path, extra: dict) -> list[dict]:
    from cw_cli.api.planning import plan, read_config

    config = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara", "gpu": 1,
              "checkpoint_volume": "none", **extra}  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return plan(read_config(path), "trl", "sft", None, registry=builtin_registry(), name="feat").plan.manifests


def test_the_core_calls_a_features_hooks_only_for_a_config_with_its_block(tmp_path):
    without = _plan(tmp_path, {})
    told = _plan(tmp_path, {"notify": {"urls": ["json://hooks.example.com/{TOKEN}"], "secret": "cw-notify"}})

    def pieces(manifests: list[dict]) -> tuple[set[str], set[str]]:
        data = next(m for m in manifests if m["kind"] == "ConfigMap")["data"]
        trainer = next(m for m in manifests if m["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]
        return set(data), {entry["name"] for entry in trainer.get("env", [])}

    files, env = pieces(without)
    told_files, told_env = pieces(told)
    assert told_files - files == {"cw_notify.py"} and told_env - env == {"CW_NOTIFY", "CW_NOTIFY_SECRET_0"}
