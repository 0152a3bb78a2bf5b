"""Control and bidirectional-formatting characters in cw's short strings, and NUL in process text, are refused.

A NUL cannot be in a process's environment or arguments (it ends a C string); a right-to-left
override in ``gpu_type`` or a label makes the text display in another order than the one read.
Each refusal names the file's line, the field, the code point and the fix.
"""

from __future__ import annotations

import json

import pytest
from unit_helpers import container, env_map, load, plan_for, reparse, write_config

from cw_cli.config.models import hidden_character
from cw_cli.errors import ConfigError

BASE = {"checkpoint_volume": "ckpts", "model_name_or_path": "m", "dataset_name": "d"}
BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c"]


def _refusal(tmp_path, data: dict, framework: str = "trl", type_name: str = "sft") -> str:
    # JSON is YAML, and keeps every character as an escape.
    path = write_config(tmp_path, json.dumps({**BASE, **data}, indent=1))
    with pytest.raises(ConfigError) as caught:
        load(framework, type_name, path)
    return "\n".join(caught.value.issues)


@pytest.mark.parametrize("char", [*BIDI, "\x00", "\x01", "\x1b", "\x7f", "\x9b", "\n", "\t"], ids=lambda c: f"U+{ord(c):04X}")
def test_gpu_type_with_a_hidden_character_is_refused_naming_the_code_point(tmp_path, char):
    issues = _refusal(tmp_path, {"gpu_type": f"H100{char}-80GB"})
    assert "`gpu_type`:" in issues and f"U+{ord(char):04X}" in issues and "remove it" in issues
    assert issues.startswith(f"{tmp_path / 'config.yaml'}:")
    assert char not in issues  # the message shows the escape, never the character itself


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x08", "\x0b", "\x1b", "\x1f"], ids=lambda c: f"U+{ord(c):04X}")
def test_env_value_with_nul_or_a_c0_control_is_refused(tmp_path, char):
    issues = _refusal(tmp_path, {"env": {"X": f"a{char}b"}})
    assert "`env.X`:" in issues and f"U+{ord(char):04X}" in issues and "cannot hold" in issues


@pytest.mark.parametrize("value", ["tab\there", "two\nlines", "crlf\r\n", "a\x7fb\x9bc", "a\x85b", "rtl \u202e ok"])
def test_env_value_keeps_what_a_process_can_hold(tmp_path, value):
    plan = plan_for("trl", "sft", write_config(tmp_path, json.dumps({**BASE, "env": {"X": value}})))
    assert env_map(container(reparse(plan)[0], "trainer"))["X"] == value


@pytest.mark.parametrize("data,dotted", [
    ({"node_selector": {"pool": "a\u202eb"}}, "node_selector.pool"),
    ({"node_selector": {"pool": "a\x00b"}}, "node_selector.pool"),
    ({"node_selector": {"po\u2066ol": "x"}}, "node_selector"),
    ({"annotations": {"a\x00": "x"}}, "annotations"),
    ({"annotations": {"a": "x\x00y"}}, "annotations.a"),
    ({"tolerations": [{"key": "k\u200f", "operator": "Exists"}]}, "tolerations.0.key"),
    ({"tolerations": [{"key": "k", "operator": "Equal", "value": "v\x00"}]}, "tolerations.0.value"),
    ({"secrets": {"HF_TOKEN": {"name": "hf", "key": "k\u202d"}}}, "secrets.HF_TOKEN"),
    ({"code": "./my\u202eproject"}, "code.path"),
])  # fmt: skip
def test_other_cw_strings_with_a_hidden_character_are_refused_naming_the_field(tmp_path, data, dotted):
    issues = _refusal(tmp_path, data)
    assert f"`{dotted}" in issues and "U+" in issues


@pytest.mark.parametrize("data,dotted", [
    ({"services": {"server": {"gpu": 1, "model": "Qwen\u202e"}}}, "services.server.model"),
    ({"services": {"server": {"gpu": 1, "args": ["--x", "a\x00"]}}}, "services.server.args.1"),
])  # fmt: skip
def test_service_model_and_args_with_a_hidden_character_are_refused(tmp_path, data, dotted):
    issues = _refusal(tmp_path, data, "trl", "grpo")
    assert f"`{dotted}`:" in issues and "U+" in issues


def test_a_set_value_with_a_hidden_character_is_refused_naming_the_set(tmp_path):
    path = write_config(tmp_path, BASE)
    with pytest.raises(ConfigError) as caught:
        load("trl", "sft", path, ["gpu_type=H100\u202e"])
    assert caught.value.issues[0].startswith("--set gpu_type=") and "U+202E (RIGHT-TO-LEFT OVERRIDE)" in caught.value.issues[0]


def test_hidden_character_names_the_first_one_and_its_place():
    assert hidden_character("ok") is None
    assert hidden_character("ab\u202ec\x00") == "U+202E (RIGHT-TO-LEFT OVERRIDE) at character 3"
    assert hidden_character("a\x00") == "U+0000 (NUL) at character 2"
    assert hidden_character("ünïcødé 日本語 😀 \u00a0") is None
