"""A cw field written as a YAML-1.1-only number (0x10, 010, 0b1, 1:30, 1_000) is refused, naming the fix.

PyYAML reads ``gpu: 0x10`` as 16 and ``gpu: 010`` as 8; YAML 1.2, JSON and TOML readers do not.
cw refuses those forms in its own fields (file and ``--set``), with the file's line and the plain
decimal to write, before anything is created. The framework's own keys are passed on as before.
"""

from __future__ import annotations

import pytest
from unit_helpers import load, mounted_config, plan_for, write_config

from cw_cli.config.yaml_source import load_yaml_config, yaml11_number
from cw_cli.errors import ConfigError

BASE = "checkpoint_volume: ckpts\nmodel_name_or_path: m\ndataset_name: d\n"

#: (written, value PyYAML reads, the word the message uses)
FORMS = [
    ("0x10", 16, "hexadecimal"),
    ("010", 8, "octal"),
    ("0b11", 3, "binary"),
    ("1:30", 90, "base-60"),
    ("1_0", 10, "underscored"),
    ("+0x2", 2, "hexadecimal"),
]


def _refusal(tmp_path, text: str, sets: list[str] | None = None, **flags) -> str:
    path = write_config(tmp_path, BASE + text)
    with pytest.raises(ConfigError) as caught:
        load("trl", "sft", path, sets, **flags)
    return "\n".join(caught.value.issues)


@pytest.mark.parametrize("written,value,kind", FORMS, ids=[form[0] for form in FORMS])
@pytest.mark.parametrize("field", ["gpu", "nodes", "ttl_hours", "backoff_limit", "max_restarts"])
def test_a_yaml11_number_in_a_cw_field_is_refused_with_the_decimal_to_write(tmp_path, field, written, value, kind):
    issues = _refusal(tmp_path, f"{field}: {written}\n")
    path = tmp_path / "config.yaml"
    assert issues.count("\n") == 0, issues  # one line: not also "less than or equal to 64"
    assert issues.startswith(f"{path}:4: `{field}`: {written} is a") and kind in issues
    assert f"`{field}: {value}`" in issues


@pytest.mark.parametrize("text,dotted", [
    ("services:\n  server:\n    gpu: 0x1\n", "services.server.gpu"),
    ("services:\n  server:\n    port: 0x2000\n", "services.server.port"),
    ("env:\n  PORT: 0x1F\n", "env.PORT"),
    ("ttl_hours: 1_0.5\n", "ttl_hours"),
    ("tolerations:\n  - {key: k, operator: Exists, tolerationSeconds: 0x10}\n", "tolerations.0.tolerationSeconds"),
])  # fmt: skip
def test_nested_cw_fields_are_refused_at_their_line(tmp_path, text, dotted):
    issues = _refusal(tmp_path, text)
    assert f"`{dotted}`:" in issues and "only in YAML 1.1" in issues and "plain decimal number" in issues
    assert f"{tmp_path / 'config.yaml'}:" in issues


def test_a_number_merged_from_an_anchor_is_refused_unless_the_file_overrides_it(tmp_path):
    assert "`gpu`: 0x10 is a hexadecimal number (16)" in _refusal(tmp_path, "x: &b {gpu: 0x10}\n<<: *b\n")
    path = write_config(tmp_path, BASE + "_base: &b {gpu: 0x10}\n<<: *b\ngpu: 2\n", "overridden.yaml")
    source = load_yaml_config(path)
    assert source.data["gpu"] == 2 and ("gpu",) not in source.yaml11_numbers


def test_a_set_value_in_a_yaml11_form_is_refused_naming_the_set(tmp_path):
    issues = _refusal(tmp_path, "gpu: 2\n", ["gpu=0x10"])
    assert issues.startswith("--set gpu=0x10: `gpu`: 0x10 is a hexadecimal number (16)")
    assert "--set gpu=16" in issues


def test_a_set_or_flag_replaces_what_the_file_wrote(tmp_path):
    path = write_config(tmp_path, BASE + "gpu: 0x10\nservices:\n  server:\n    gpu: 0x1\n")
    assert load("trl", "grpo", path, ["gpu=4", "services={}"]).cluster.gpu == 4
    assert load("trl", "grpo", path, ["services.server.gpu=1"], gpu=2).cluster.gpu == 2


@pytest.mark.parametrize("written", ['"0x10"', '"1_0"', '" 1_0 "', "0o10", '"1:30"'])
def test_a_number_field_given_as_text_must_be_plain_decimal(tmp_path, written):
    # pydantic would read the string "1_0" as 10.
    issues = _refusal(tmp_path, f"gpu: {written}\n")
    assert "`gpu`:" in issues and "is not a plain decimal number" in issues


@pytest.mark.parametrize("text", ["gpu: 8\n", "gpu: +8\n", 'gpu: "8"\n', "ttl_hours: 1.5\n", "ttl_hours: 1e1\n", "nodes: 1\n"])
def test_plain_decimal_numbers_still_load(tmp_path, text):
    assert load("trl", "sft", write_config(tmp_path, BASE + text)).cluster is not None


def test_the_frameworks_own_keys_are_passed_on_as_pyyaml_reads_them(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, BASE + "save_steps: 0x10\nlogging_steps: 1_0\n"))
    config = mounted_config(plan)
    assert config["save_steps"] == 16 and config["logging_steps"] == 10


@pytest.mark.parametrize("text,expected", [
    ("0x10", True), ("010", True), ("0b1", True), ("1:30", True), ("1_000", True), ("1_0.5", True),
    ("10", False), ("0", False), ("-3", False), ("1.5", False), ("1e-5", False), (".inf", False),
    ("'0x10'", False), ('"010"', False), ("0o10", False), ("abc", False), ("", False), ("[", False),
])  # fmt: skip
def test_yaml11_number_tells_the_forms_apart(text, expected):
    assert yaml11_number(text) is expected


def test_the_refusal_comes_before_the_cluster_is_contacted(tmp_path, monkeypatch):
    """A launch (no --dry-run) with no usable kubeconfig: 2 for the config, never 3 for the cluster."""
    from click.testing import CliRunner
    from unit_helpers import builtin_registry

    from cw_cli.cli.app import build_app

    monkeypatch.setenv("KUBECONFIG", str(tmp_path))  # a folder: any cluster contact would fail with 3
    path = write_config(tmp_path, BASE + "gpu: 0x10\n")
    result = CliRunner().invoke(build_app(builtin_registry()), ["trl", "sft", str(path), "--name", "x-run"])
    assert result.exit_code == 2, result.output
    assert "`gpu`: 0x10 is a hexadecimal number" in result.output and "kubeconfig" not in result.output
