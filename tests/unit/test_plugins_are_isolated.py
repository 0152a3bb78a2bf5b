"""A plugin cannot hang, end or corrupt cw (issue 32 item 6), tested with real plugin folders.

A plugin whose import loops forever hung `cw frameworks` and `cw estimate trl sft`; one raising
SystemExit(0) made commands exit 0 with no output; one printing 10 MB at import corrupted the
output. Now a plugin loads in a thread of its own with a time limit (CW_PLUGIN_TIMEOUT) and its
output captured; SystemExit is a failure of that plugin with a one-line warning naming it; and a
built-in framework's commands (`cw trl ...`, `cw estimate trl ...`) import no plugin at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from unit_helpers import REPO, write_config

from cw_cli.frameworks.registry import FrameworkRegistry

FRAMEWORK = '''
from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType
from cw_cli.frameworks.plugin import FrameworkPlugin


class Framework(BaseTrainingFramework):
    name = "{name}"
    description = "a plugin framework"
    training_types = (TrainingType.SFT,)

    def required_keys(self, training_type):
        return []

    def default_image(self, training_type):
        return "example.com/{name}:1.0"

    def trainer_command(self, config, context):
        return ["{name}-train"]


class Plugin(FrameworkPlugin):
    @property
    def name(self):
        return "{name}"

    def get_framework_class(self):
        return Framework


def get_plugin():
    return Plugin()
'''

PLUGINS = {
    "exits": "raise SystemExit(0)\n",
    "exitcode": "import sys\nsys.exit(3)\n",
    "sleeps": "import time\nwhile True:\n    time.sleep(0.05)\n",
    "spins": "while True:\n    pass\n",
    "prints": "import sys\nprint('x' * 10_000_000)\nsys.stderr.write('E' * 1000)\n" + FRAMEWORK.format(name="printfw"),
    "initexits": FRAMEWORK.format(name="initfw").replace(
        "    def get_framework_class(self):", "    def initialize(self, context):\n        raise SystemExit(0)\n\n    def get_framework_class(self):"
    ),
    "good": FRAMEWORK.format(name="goodfw"),
}


def _plugins(root: Path, *names: str) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(PLUGINS[name])
    return root


@pytest.fixture
def plugin_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CW_PLUGINS_DIR", str(tmp_path / "plugins"))
    monkeypatch.delenv("CW_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("CW_PLUGIN_TIMEOUT", "1")
    return tmp_path / "plugins"


def _failure(registry: FrameworkRegistry, folder: str) -> str:
    found = [f.error for f in registry.failures if f.source.endswith(f"/{folder}")]
    assert len(found) == 1, registry.failures
    return found[0]


def test_system_exit_at_import_or_in_initialize_is_that_plugins_failure(plugin_env):
    _plugins(plugin_env, "exits", "exitcode", "initexits", "good")
    registry = FrameworkRegistry().load_all()
    assert _failure(registry, "exits") == "SystemExit(0) while loading: a plugin may not end cw"
    assert _failure(registry, "exitcode") == "SystemExit(3) while loading: a plugin may not end cw"
    assert "SystemExit(0)" in _failure(registry, "initexits")
    assert {"trl", "axolotl", "verifiers", "goodfw"} <= set(registry.names())
    assert "initfw" not in registry.names()


def test_a_plugin_that_never_finishes_loading_is_left_behind_after_the_time_limit(plugin_env):
    _plugins(plugin_env, "sleeps", "good")
    started = time.monotonic()
    registry = FrameworkRegistry().load_all()
    assert time.monotonic() - started < 5
    assert "did not finish loading in 1 s" in _failure(registry, "sleeps")
    assert "CW_PLUGIN_TIMEOUT" in _failure(registry, "sleeps")
    assert "goodfw" in registry.names()  # the plugins after it still load


def test_what_a_plugin_prints_at_import_is_captured_not_shown(plugin_env, capfd):
    _plugins(plugin_env, "prints")
    registry = FrameworkRegistry().load_all()
    assert "printfw" in registry.names() and registry.failures == []
    assert registry.notes == [f"{plugin_env / 'prints'} printed 10,001,001 characters while loading (not shown)"]
    out, err = capfd.readouterr()
    assert "xxxx" not in out and "EEEE" not in err


def _cw(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cw_cli", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


@pytest.fixture
def cw_env(tmp_path):
    env = {**os.environ, "CW_PLUGINS_DIR": str(tmp_path / "plugins"), "HOME": str(tmp_path / "home"),
           "KUBECONFIG": str(tmp_path / "no-kubeconfig"), "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}  # fmt: skip
    env.pop("CW_DISABLE_PLUGINS", None)
    env.pop("CW_PLUGIN_TIMEOUT", None)
    return env


def test_cw_frameworks_with_a_plugin_that_spins_forever_answers_and_names_it(tmp_path, cw_env):
    _plugins(tmp_path / "plugins", "spins", "good")
    result = _cw("frameworks", env={**cw_env, "CW_PLUGIN_TIMEOUT": "2"}, timeout=40)
    assert result.returncode == 0, result.stderr
    assert "goodfw" in result.stdout and "trl" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if "spins" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: the plugin ") and "did not finish loading in 2 s" in warnings[0]
    assert "Traceback" not in result.stderr


def test_a_plugin_raising_system_exit_no_longer_ends_cw(tmp_path, cw_env):
    _plugins(tmp_path / "plugins", "exits")
    result = _cw("frameworks", env=cw_env)
    assert result.returncode == 0 and "trl" in result.stdout, result.stderr
    assert [line for line in result.stderr.splitlines() if "exits" in line] == [
        f"warning: the plugin {tmp_path / 'plugins' / 'exits'} failed to load and is left out: "
        "SystemExit(0) while loading: a plugin may not end cw"
    ]
    help_text = _cw("--help", env=cw_env)
    assert help_text.returncode == 0 and "Frameworks" in help_text.stdout


def test_a_plugin_printing_10_mb_leaves_the_output_clean(tmp_path, cw_env):
    _plugins(tmp_path / "plugins", "prints")
    config = write_config(tmp_path, {"model": "m"})
    result = _cw("printfw", "sft", str(config), "--dry-run", "--name", "clean-run", env=cw_env)
    assert result.returncode == 0, result.stderr[-2000:]
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout) if d]
    assert "Job" in kinds and "xxxx" not in result.stdout and "EEEE" not in result.stderr
    listed = _cw("frameworks", env=cw_env)
    assert "printed 10,001,001 characters while loading (not shown)" in listed.stderr


@pytest.mark.parametrize("args", [("estimate", "trl", "sft"), ("trl", "sft")], ids=["estimate", "dry-run"])
def test_a_builtin_frameworks_commands_import_no_plugin(tmp_path, cw_env, args):
    _plugins(tmp_path / "plugins", "spins", "exits")  # each would stall or end cw if imported
    config = write_config(tmp_path, {"model_name_or_path": "m", "dataset_name": "trl-lib/Capybara"})
    extra = ["--gpu-memory", "80GB", "-o", "json"] if args[0] == "estimate" else ["--dry-run"]
    started = time.monotonic()
    result = _cw(*args, str(config), *extra, env=cw_env, timeout=60)  # no time limit set: 15 s each
    assert time.monotonic() - started < 12
    assert "spins" not in result.stderr and "exits" not in result.stderr, result.stderr[-2000:]
    assert result.returncode in (0, 2), result.stderr[-2000:]  # (an estimate without the model's config: 2)
    assert "Traceback" not in result.stderr
