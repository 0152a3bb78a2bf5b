"""Plugins from $CW_PLUGINS_DIR: a good one works end to end, broken ones are recorded, never fatal."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from click.testing import CliRunner

from cw_cli.frameworks.registry import FrameworkRegistry

GOOD_PLUGIN = '''
from pathlib import Path

from cw_cli.frameworks.base import BaseTrainingFramework, ResourceDefaults, TrainingType
from cw_cli.frameworks.plugin import FrameworkPlugin


class GoodFramework(BaseTrainingFramework):
    name = "goodfw"
    description = "A test framework from a plugin folder"
    training_types = (TrainingType.SFT,)
    resources = ResourceDefaults(gpu=2, cpu="4", memory="8Gi")

    def template_dirs(self):
        return [Path(__file__).parent / "templates"]

    def templates(self, training_type):
        return {**super().templates(training_type), "configmap": "goodfw/configmap.yaml.j2"}

    def required_keys(self, training_type):
        return [("model",)]

    def default_image(self, training_type):
        return "example.com/goodfw:1.0"

    def trainer_command(self, config, context):
        return ["goodfw-train", "--model", str(config["model"]), "--gpus", str(context.gpus)]


class GoodPlugin(FrameworkPlugin):
    @property
    def name(self):
        return "goodfw"

    @property
    def version(self):
        return "1.2.3"

    def get_framework_class(self):
        return GoodFramework


def get_plugin():
    return GoodPlugin()
'''

GOOD_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ names.config }}
  labels: {{ labels | with_component("config") }}
  annotations:
    goodfw.example.com/rendered-by: "goodfw's own template"
data: {{ files }}
"""


def make_plugins(root):
    """Write a good plugin, one that raises on import, one returning a wrong object, and more."""
    good = root / "goodfw"
    (good / "templates" / "goodfw").mkdir(parents=True)
    (good / "__init__.py").write_text(GOOD_PLUGIN)
    (good / "templates" / "goodfw" / "configmap.yaml.j2").write_text(GOOD_TEMPLATE)
    for name, body in {
        "broken": "raise RuntimeError('boom at import')\n",
        "wrongobj": "def get_plugin():\n    return object()\n",
        "noentry": "X = 1\n",
        "dupname": textwrap.dedent(
            """
            from cw_cli.frameworks.plugin import SimplePlugin
            from cw_cli.frameworks.trl import TRLFramework

            def get_plugin():
                return SimplePlugin(TRLFramework, "9.9.9")
            """
        ),
        "notaclass": textwrap.dedent(
            """
            from cw_cli.frameworks.plugin import FrameworkPlugin

            class P(FrameworkPlugin):
                name = "notaclass"
                def get_framework_class(self):
                    return dict

            def get_plugin():
                return P()
            """
        ),
    }.items():
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(body)
    (root / "not-a-package").mkdir()  # no __init__.py: ignored
    return root


@pytest.fixture
def plugins_dir(tmp_path, monkeypatch):
    root = make_plugins(tmp_path / "plugins")
    root.mkdir(exist_ok=True)
    monkeypatch.setenv("CW_PLUGINS_DIR", str(root))
    monkeypatch.delenv("CW_DISABLE_PLUGINS", raising=False)
    return root


@pytest.fixture
def registry(plugins_dir):
    from cw_cli.frameworks.registry import FrameworkRegistry

    return FrameworkRegistry().load_all()


def _failure(registry, folder):
    found = [f for f in registry.failures if f.source.endswith(f"/{folder}")]
    assert len(found) == 1, registry.failures
    return found[0].error


def test_good_plugin_loads_next_to_the_builtins(registry):
    assert {"trl", "axolotl", "verifiers", "goodfw"} <= set(registry.names())
    loaded = registry.get("goodfw")
    assert loaded.plugin.version == "1.2.3"
    assert loaded.plugin.description == "A test framework from a plugin folder"
    assert list(loaded.types) == ["sft"]
    assert loaded.source.endswith("/goodfw")


def test_broken_plugins_are_recorded_with_reasons(registry):
    assert _failure(registry, "broken") == "RuntimeError: boom at import"
    assert "returned object, not a FrameworkPlugin" in _failure(registry, "wrongobj")
    assert "defines no get_plugin()" in _failure(registry, "noentry")
    assert "already provided by built-in" in _failure(registry, "dupname")
    assert "must return a BaseTrainingFramework subclass" in _failure(registry, "notaclass")
    assert len(registry.failures) == 5
    assert not [f for f in registry.failures if "not-a-package" in f.source]


def test_builtin_trl_wins_over_a_plugin_claiming_its_name(registry):
    assert registry.get("trl").source.startswith("built-in")


def test_disable_plugins_loads_only_builtins(plugins_dir, monkeypatch):
    from cw_cli.frameworks.registry import FrameworkRegistry

    monkeypatch.setenv("CW_DISABLE_PLUGINS", "1")
    registry = FrameworkRegistry().load_all()
    assert set(registry.names()) == {"trl", "axolotl", "verifiers"} and registry.failures == []


def test_plugin_renders_its_own_template_and_the_builtin_ones(registry, tmp_path):
    from cw_cli.config.loader import load_run_config
    from cw_cli.config.options import LaunchOptions
    from cw_cli.render.plan import RunRequest, build_plan

    path = tmp_path / "cfg.yaml"
    path.write_text("checkpoint_volume: ckpts\nmodel: tiny\nepochs: 3\n")
    loaded, training_type = registry.resolve_type("goodfw", "sft")
    config = load_run_config(path, loaded.framework, training_type, [], LaunchOptions())
    plan = build_plan(RunRequest(loaded, training_type, config, "plug-run"))
    job, configmap, policy = plan.manifests
    assert policy["kind"] == "NetworkPolicy"  # from the built-in template: the plugin has none
    assert configmap["metadata"]["annotations"] == {  # the plugin's own, and the kinds cw records beside it
        "goodfw.example.com/rendered-by": "goodfw's own template",
        "cw-cli.dev/kinds": "ConfigMap,Job,NetworkPolicy",
    }
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == {"model": "tiny", "epochs": 3}
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    assert trainer["image"] == "example.com/goodfw:1.0"
    # cw's launcher claims the run's folder; a plugin's own trainer resumes by itself.
    assert trainer["command"] == [
        "python3", "/etc/cw/cw_entrypoint.py", "--no-resume", "--", "goodfw-train", "--model", "tiny", "--gpus", "2"
    ]  # fmt: skip
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": "2", "cpu": "4", "memory": "8Gi"}


def test_plugin_required_keys_are_enforced(registry, tmp_path):
    from cw_cli.config.loader import load_run_config
    from cw_cli.config.options import LaunchOptions
    from cw_cli.errors import ConfigError

    path = tmp_path / "cfg.yaml"
    path.write_text("epochs: 3\n")
    loaded, training_type = registry.resolve_type("goodfw", "sft")
    with pytest.raises(ConfigError, match="missing `model` \\(required by `goodfw sft`\\)"):
        load_run_config(path, loaded.framework, training_type, [], LaunchOptions())


# The CLI, through click's CliRunner: a fresh app built from a registry that sees the plugins.


@pytest.fixture
def cli(plugins_dir):
    from cw_cli.cli.app import build_app

    app = build_app(FrameworkRegistry().load_all())
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, list(args), catch_exceptions=False)

    return invoke


def test_cli_help_works_with_broken_plugins_present(cli):
    result = cli("--help")
    assert result.exit_code == 0, result.output
    for name in ("trl", "axolotl", "verifiers", "goodfw", "frameworks", "schema"):
        assert name in result.stdout


def test_cli_plugin_dry_run_prints_its_manifests(cli, tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("checkpoint_volume: ckpts\nmodel: tiny\n")
    result = cli("goodfw", "sft", str(path), "--dry-run", "--name", "plug-run", "--gpu", "1")
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(result.stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("Job", "plug-run-trainer"),
        ("ConfigMap", "plug-run-config"),
        ("NetworkPolicy", "plug-run-network"),
    ]
    assert documents[1]["metadata"]["annotations"]["goodfw.example.com/rendered-by"] == "goodfw's own template"


def test_cli_frameworks_lists_plugins_and_failures(cli):
    result = cli("frameworks")
    assert result.exit_code == 0, result.output
    assert "goodfw" in result.stdout and "1.2.3" in result.stdout
    assert "failed to load" in result.stderr and "boom at import" in result.stderr
    assert "wrongobj" in result.stderr and "not a FrameworkPlugin" in result.stderr
