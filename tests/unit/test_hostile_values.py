"""User strings can never change a manifest's structure: each stays one value at its place."""

from __future__ import annotations

import json

import pytest
import yaml
from unit_helpers import container, env_map, kinds_and_names, mounted_config, obj, plan_for, pod_spec, reparse, write_config

from cw_cli.config.models import image_problem
from cw_cli.errors import ConfigError

RUN = "golden-run"
HOSTILE = [
    "two\nlines\n",
    "quotes \" and ' and \\ backslash",
    "{{ names.config }}",
    "{% if true %}jinja{% endif %}",
    "{#- comment -#}",
    "---\nkind: Secret\nmetadata:\n  name: pwned\n",
    "...\n---\napiVersion: v1\nkind: Secret",
    "key: value",
    "# not a comment",
    "- item",
    "&anchor *alias !!python/object/apply:os.system ['id']",
    "ünïcødé ✓ 日本語 😀 \u00a0nbsp",
    "true",
    "null",
    "1e5",
    "  padded  ",
    "tab\there\r\nwindows",
    "",
]
IDS = [f"h{i}" for i in range(len(HOSTILE))]
BASE = {"model_name_or_path": "m", "dataset_name": "d", "services": {"server": {"gpu": 1}}}


def _write(tmp_path, data):
    """JSON is YAML: every string stays quoted, so "true" or "1e5" stay strings in the file."""
    return write_config(tmp_path, json.dumps({"checkpoint_volume": "ckpts", **data}, ensure_ascii=False, indent=1))


def _shape(manifests):
    """Kinds, names, and the keys of every level that cw (not the user) decides."""
    shape = []
    for m in manifests:
        body = m.get("spec") or m.get("data") or m.get("rules") or m.get("subjects") or {}
        entry = [m["kind"], m["metadata"]["name"], sorted(m), sorted(m["metadata"]), sorted(map(str, body))]
        if "template" in m.get("spec", {}):
            spec = pod_spec(m)
            entry += [sorted(spec), [sorted(c) for c in spec["containers"]], [c["name"] for c in spec["containers"]]]
        shape.append(entry)
    return shape


@pytest.fixture
def baseline(tmp_path):
    path = write_config(tmp_path, BASE, "baseline.yaml")
    return plan_for("trl", "grpo", path)


def _check_structure(plan, baseline):
    parsed = reparse(plan)
    assert parsed == plan.manifests
    assert len(parsed) == len(baseline.manifests)
    assert kinds_and_names(parsed) == kinds_and_names(baseline)
    assert "Secret" not in [m["kind"] for m in parsed]


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_hostile_env_value_is_one_verbatim_env_value(tmp_path, baseline, value):
    plan = plan_for("trl", "grpo", _write(tmp_path, {**BASE, "env": {"HOSTILE": value}}))
    _check_structure(plan, baseline)
    assert _shape(plan.manifests) == _shape(baseline.manifests)
    parsed = reparse(plan)
    assert env_map(container(parsed[0], "trainer"))["HOSTILE"] == value
    assert env_map(container(obj(parsed, "Deployment", f"{RUN}-server"), "server"))["HOSTILE"] == value


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_hostile_native_values_arrive_verbatim_in_mounted_config(tmp_path, baseline, value):
    # Real TRL keys (cw refuses keys `trl` does not read): a string field and a free-form mapping.
    data = {**BASE, "run_name": value, "model_init_kwargs": {"deep": [value, {"k": value}], f"key {value}": "as key"}}
    plan = plan_for("trl", "grpo", _write(tmp_path, data))
    _check_structure(plan, baseline)
    assert _shape(plan.manifests) == _shape(baseline.manifests)
    mounted = yaml.safe_load(obj(reparse(plan), "ConfigMap", f"{RUN}-config")["data"]["config.yaml"])
    assert mounted["run_name"] == value
    assert mounted["model_init_kwargs"] == {"deep": [value, {"k": value}], f"key {value}": "as key"}


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_hostile_node_selector_toleration_and_image_stay_in_place(tmp_path, baseline, value):
    data = {
        **BASE,
        "node_selector": {"pool": value},
        "tolerations": [{"key": "k", "operator": "Equal", "value": value, "effect": "NoSchedule"}],
        "secrets": {"TOKEN": {"name": "hf-token", "key": value or "x"}},
    }
    image = value if value and not image_problem(value) else "img"  # --image refuses whitespace (below)
    plan = plan_for("trl", "grpo", _write(tmp_path, data), image=image)
    _check_structure(plan, baseline)
    parsed = reparse(plan)
    for manifest in (parsed[0], obj(parsed, "Deployment", f"{RUN}-server")):
        spec = pod_spec(manifest)
        assert spec["nodeSelector"] == {"pool": value}
        assert spec["tolerations"] == [{"key": "k", "operator": "Equal", "value": value, "effect": "NoSchedule"}]
    trainer = container(parsed[0], "trainer")
    assert trainer["image"] == image
    assert env_map(trainer)["TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": value or "x"}}


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_hostile_service_args_stay_one_argument(tmp_path, baseline, value):
    data = {**BASE, "services": {"server": {"gpu": 1, "args": [value, "--last"]}}}
    plan = plan_for("trl", "grpo", _write(tmp_path, data))
    _check_structure(plan, baseline)
    command = container(obj(reparse(plan), "Deployment", f"{RUN}-server"), "server")["command"]
    assert command[-2:] == [value, "--last"]


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_hostile_set_value_is_yaml_typed_then_verbatim_in_mounted_config(tmp_path, baseline, value):
    from cw_cli.config.yaml_source import parse_scalar

    plan = plan_for("trl", "grpo", write_config(tmp_path, BASE), [f"run_name={value}", f"model_init_kwargs.deep={value}"])
    _check_structure(plan, baseline)
    mounted = yaml.safe_load(obj(reparse(plan), "ConfigMap", f"{RUN}-config")["data"]["config.yaml"])
    assert mounted["run_name"] == parse_scalar(value)
    assert mounted["model_init_kwargs"] == {"deep": parse_scalar(value)}


@pytest.mark.parametrize("value", ["quotes \" and '", "{{ x }}", "{% raw %}", "ünïcødé 😀", "a#b", "x: y: z"])
def test_set_strings_that_are_not_yaml_syntax_arrive_verbatim(tmp_path, value):
    plan = plan_for("trl", "sft", write_config(tmp_path, BASE), [f"run_name={value}"])
    assert mounted_config(plan)["run_name"] == value


@pytest.mark.parametrize("value", ["two\nlines", "a # b"], ids=["newline", "comment"])
def test_set_string_value_arrives_verbatim(tmp_path, value):
    plan = plan_for("trl", "sft", write_config(tmp_path, BASE), [f"run_name={value}"])
    assert mounted_config(plan)["run_name"] == value


@pytest.mark.parametrize("value", ["bad name", "UPPER", "a/b", "x\nkind: Secret", "{{ names.config }}", "-lead"])
def test_hostile_secret_and_volume_names_are_refused_naming_the_field(tmp_path, value):
    from cw_cli.errors import ConfigError

    path = write_config(tmp_path, {**BASE, "secrets": {"HF_TOKEN": value}, "checkpoint_volume": value})
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", path)
    text = "\n".join(info.value.issues)
    assert "secrets.HF_TOKEN" in text and "checkpoint_volume" in text
    assert str(path) in text


def test_hostile_env_variable_name_is_refused(tmp_path):
    from cw_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="not a valid environment variable name"):
        plan_for("trl", "sft", write_config(tmp_path, {**BASE, "env": {"A\nB": "x"}}))


@pytest.mark.parametrize("value", ["a\x85b", "a \u2028 b", "a \u2029 b"], ids=["NEL", "LS", "PS"])
def test_unicode_line_break_characters_survive_in_env_value(tmp_path, value):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**BASE, "env": {"X": value}}))
    assert env_map(container(reparse(plan)[0], "trainer"))["X"] == value


def test_control_character_in_env_value_renders(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**BASE, "env": {"X": "a\x7fb\x9bc"}}))
    assert env_map(container(reparse(plan)[0], "trainer"))["X"] == "a\x7fb\x9bc"


# A template writer's mistakes are caught by render_manifest, not applied.


def _render(tmp_path, text, kind="ConfigMap", name="x", context=None):
    from cw_cli.render.templates import render_manifest

    (tmp_path / "t.yaml.j2").write_text(text)
    return render_manifest("t.yaml.j2", context or {}, [tmp_path], kind, name)


def test_template_rendering_two_documents_is_refused(tmp_path):
    from cw_cli.render.templates import TemplateError

    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: y\n"
    with pytest.raises(TemplateError, match="exactly one object, got 2"):
        _render(tmp_path, text)


@pytest.mark.parametrize(
    "text,match",
    [
        ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\n", "rendered Secret"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n", "expected ConfigMap 'x'"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ missing }}\n", "undefined"),
        ("kind: ConfigMap\nmetadata: [unclosed\n", "invalid YAML"),
        ("- just\n- a list\n", "exactly one object"),
        ("", "exactly one object, got 0"),
        ("{% if %}", "t.yaml.j2"),
    ],
    ids=["wrong-kind", "wrong-name", "undefined", "bad-yaml", "not-mapping", "empty", "jinja-syntax"],
)
def test_template_mistakes_raise_template_error(tmp_path, text, match):
    from cw_cli.render.templates import TemplateError

    with pytest.raises(TemplateError, match=match):
        _render(tmp_path, text)


def test_missing_template_raises_template_error(tmp_path):
    from cw_cli.render.templates import TemplateError, render_manifest

    with pytest.raises(TemplateError, match="not found"):
        render_manifest("nope.yaml.j2", {}, [tmp_path], "ConfigMap", "x")


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_template_expression_in_key_position_cannot_inject(tmp_path, value):
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {a: {{ value }}}\ndata:\n  k: {{ value }}\n"
    manifest = _render(tmp_path, text, context={"value": value})
    assert manifest["data"] == {"k": value} and manifest["metadata"]["labels"] == {"a": value}


@pytest.mark.parametrize("value", ["trainer:1.0\n  privileged: true", "img 1", "img\t", ""])
def test_image_flag_with_whitespace_is_refused_naming_the_flag(tmp_path, value):
    with pytest.raises(ConfigError) as caught:
        plan_for("trl", "sft", _write(tmp_path, BASE), image=value)
    assert any(issue.startswith("--image: ") and "not an image reference" in issue for issue in caught.value.issues)
