"""The `cw` command as a user runs it: a subprocess of `python -m cw_cli`."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from unit_helpers import CONFIGS, REPO

FAKE_KUBERNETES = "raise ImportError('the kubernetes package must not be imported here')\n"


@pytest.fixture
def env(tmp_path):
    """An environment with no usable kubeconfig and a `kubernetes` package that fails on import."""
    fake = tmp_path / "fake-site" / "kubernetes"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_KUBERNETES)
    kubeconfig_dir = tmp_path / "kubeconfig-is-a-directory"
    kubeconfig_dir.mkdir()
    environ = dict(os.environ)
    environ.update(
        KUBECONFIG=str(kubeconfig_dir),
        HOME=str(tmp_path / "home"),
        CW_DISABLE_PLUGINS="1",
        PYTHONPATH=os.pathsep.join([str(tmp_path / "fake-site"), str(REPO)]),
        NO_COLOR="1",
        COLUMNS="200",
    )
    environ.pop("CW_DEBUG", None)
    return environ


def cw(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "cw_cli", *map(str, args)], env=env, capture_output=True, text=True, timeout=60, cwd=REPO
    )


def test_dry_run_prints_multi_document_yaml_without_touching_kubeconfig_or_kubernetes(env):
    result = cw(env, "trl", "grpo", CONFIGS / "trl-grpo.yaml", "--dry-run", "--name", "cli-run", "--gpu", "4")
    assert result.returncode == 0, result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("Job", "cli-run-trainer"),
        ("ConfigMap", "cli-run-config"),
        ("ServiceAccount", "cli-run-keeper"),
        ("Role", "cli-run-keeper"),
        ("RoleBinding", "cli-run-keeper"),
        ("NetworkPolicy", "cli-run-network"),
        ("Deployment", "cli-run-server"),
        ("Service", "cli-run-server"),
        ("Deployment", "cli-run-reward"),
        ("Service", "cli-run-reward"),
    ]
    trainer = documents[0]["spec"]["template"]["spec"]["containers"][0]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert result.stdout.count("\n---\n") == len(documents) - 1 == 9
    assert result.stdout.startswith("# cw --dry-run: the run's objects. `kubectl apply -f` of this output starts the run")


def test_dry_run_generates_a_fresh_name_each_time(env):
    names = set()
    for _ in range(2):
        result = cw(env, "trl", "sft", CONFIGS / "trl-sft.yaml", "--dry-run")
        assert result.returncode == 0, result.stderr
        names.add(next(yaml.safe_load_all(result.stdout))["metadata"]["labels"]["cw-cli.dev/run"])
    assert len(names) == 2 and all(name.startswith("trl-sft-") for name in names)


def test_real_run_without_kubeconfig_fails_cleanly(env):
    env = dict(env, PYTHONPATH=str(REPO))  # the real kubernetes package this time
    result = cw(env, "trl", "sft", CONFIGS / "trl-sft.yaml", "--name", "x-run")
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr and "error:" in result.stderr


@pytest.mark.parametrize(
    "config_text,args,expected",
    [
        ("model_name_or_path: m\ndataset_name: d\ngpus: 8\n", [], ":3: `gpus`: unknown field; did you mean `gpu`?"),
        ("model_name_or_path: m\n", [], "missing `dataset_name` or `datasets`"),
        ("a: [1\n", [], "not valid YAML"),
        ("model_name_or_path: m\ndataset_name: d\n", ["--memory", "lots"], "--memory: `memory`"),
        ("model_name_or_path: m\ndataset_name: d\n", ["--name", "Bad_Name"], "try --name bad-name"),
        ("model_name_or_path: m\ndataset_name: d\n", ["--set", "nokey"], "expected key=value"),
    ],
    ids=["typo", "missing", "yaml", "memory", "name", "set"],
)
def test_config_errors_exit_2_with_a_message_and_no_traceback(env, tmp_path, config_text, args, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(config_text)
    result = cw(env, "trl", "sft", path, "--dry-run", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert expected in result.stderr.replace("\n", " ") or expected in result.stderr
    assert "error:" in result.stderr
    assert result.stdout == ""


def test_missing_config_file_exits_2_naming_it(env, tmp_path):
    result = cw(env, "trl", "sft", tmp_path / "nope.yaml", "--dry-run")
    assert result.returncode == 2 and "nope.yaml" in result.stderr and "Traceback" not in result.stderr


def test_unknown_type_is_a_usage_error(env):
    result = cw(env, "trl", "ppo", CONFIGS / "trl-sft.yaml", "--dry-run")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_schema_prints_json_schema(env):
    result = cw(env, "schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["title"] == "cw run config" and schema["additionalProperties"] is True
    for field in ("gpu", "cpu", "memory", "nodes", "env", "secrets", "services", "node_selector"):
        assert field in schema["properties"]


@pytest.mark.parametrize("args", [["--help"], ["trl", "--help"], ["trl", "sft", "--help"], ["--version"]])
def test_help_works_without_kubernetes(env, args):
    result = cw(env, *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


PROBE = """
import sys
sys.argv = ["cw", *sys.argv[1:]]
from cw_cli.cli.app import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("EXIT", code, "KUBERNETES", "kubernetes" in sys.modules, "PYDANTIC", "pydantic" in sys.modules, file=sys.stderr)
"""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["trl", "sft", str(CONFIGS / "trl-sft.yaml"), "--dry-run", "--name", "probe-run"], ["schema"], ["frameworks"]],
    ids=["help", "dry-run", "schema", "frameworks"],
)
def test_kubernetes_is_not_imported(env, args):
    env = dict(env, PYTHONPATH=str(REPO))  # the real package: importing it would show in sys.modules
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert "EXIT 0 KUBERNETES False" in result.stderr, result.stderr
    if args == ["--help"]:
        assert "PYDANTIC False" in result.stderr, "`cw --help` should stay light (base.py imports pydantic lazily)"


def test_debug_shows_a_traceback_for_config_errors(env, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model_name_or_path: m\n")
    result = cw(env, "--debug", "trl", "sft", path, "--dry-run")
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_the_root_help_lines_are_the_commands_own():
    """`cw --help` lists commands without importing them; its lines must not drift from theirs."""
    from cw_cli.cli.app import COMMANDS, load_command

    for name, (target, short) in COMMANDS.items():
        command = load_command(target)
        assert command.name == name
        assert (command.help or "").split("\n\n")[0].replace("\n", " ").strip() == short, name


def test_the_root_help_lists_the_builtins_as_their_classes_describe_them():
    """`cw --help` lists the built-ins from a table instead of importing them (about twenty
    modules each); the table must say what each framework class says."""
    from cw_cli.frameworks.registry import BUILTIN_DESCRIPTIONS, BUILTINS, FrameworkRegistry

    registry = FrameworkRegistry().load_all(include_plugins=False)
    assert {loaded.name: loaded.plugin.description for loaded in registry.all()} == BUILTIN_DESCRIPTIONS
    assert set(BUILTIN_DESCRIPTIONS) == set(BUILTINS)


def test_the_root_help_imports_no_builtin_framework(env):
    probe = (
        "import sys; sys.argv = ['cw', '--help']\n"
        "from cw_cli.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('cw_cli.frameworks.trl', 'cw_cli.frameworks.axolotl', "
        "'cw_cli.frameworks.verifiers'))), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert "Hugging Face TRL" in done.stdout and "axolotl" in done.stdout and "verifiers" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_only_the_invoked_command_is_imported(env):
    """`cw status` must not pay for the launch options, nor `cw --help` for any command."""
    probe = (
        "import sys; sys.argv = ['cw', *sys.argv[1:]]\n"
        "from cw_cli.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('cw_cli.cli.')), file=sys.stderr)\n"
    )
    env = dict(env, PYTHONPATH=str(REPO))
    loaded = {}
    for args in (["--help"], ["status", "--help"], ["trl", "sft", "--help"]):
        done = subprocess.run([sys.executable, "-c", probe, *args], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
        loaded[args[0]] = set(ast.literal_eval(done.stderr.strip().splitlines()[-1]))
    assert loaded["--help"] == {"cw_cli.cli.app"}
    assert "cw_cli.cli.runs" in loaded["status"] and "cw_cli.cli.run" not in loaded["status"]
    assert "cw_cli.cli.run" in loaded["trl"] and "cw_cli.cli.runs" not in loaded["trl"]


def test_a_built_in_framework_command_loads_no_plugin_machinery(env):
    """`cw trl ...` loads only TRL: no plugin folder or entry-point scan, no other framework."""
    from cw_cli.frameworks.registry import BUILTINS, FrameworkRegistry

    for name in BUILTINS:  # the table's names are the plugins' own
        assert FrameworkRegistry().load_builtin(name).names() == [name]
    probe = (
        "import sys; sys.argv = ['cw', *sys.argv[1:]]\n"
        "from cw_cli.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('cw_cli.frameworks.', 'cw_user_plugins'))), file=sys.stderr)\n"
    )
    args = ["trl", "sft", str(CONFIGS / "trl-sft.yaml"), "--dry-run", "--name", "probe-run"]
    plugins = Path(env["HOME"]) / "plugins"
    (plugins / "loud").mkdir(parents=True, exist_ok=True)  # a plugin folder that would be imported by a scan
    (plugins / "loud" / "__init__.py").write_text("def get_plugin():\n    raise RuntimeError('scanned')\n")
    done = subprocess.run([sys.executable, "-c", probe, *args], env=dict(env, PYTHONPATH=str(REPO), CW_PLUGINS_DIR=str(plugins)),
                          capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
    loaded = set(ast.literal_eval(done.stderr.strip().splitlines()[-1]))
    assert "cw_cli.frameworks.trl" in loaded and not any(m.startswith("cw_user_plugins") for m in loaded)
    assert not loaded & {"cw_cli.frameworks.axolotl", "cw_cli.frameworks.verifiers"}
