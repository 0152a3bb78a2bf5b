"""Every config problem is reported with the file (and line where known), the field and a fix."""

from __future__ import annotations

import pytest
from unit_helpers import builtin_registry, load, plan_for, write_config

from cw_cli.errors import ConfigError, ExitCode, FrameworkError

GOOD = "model_name_or_path: m\ndataset_name: d\n"


def _issues(path, framework="trl", type_name="sft", sets=None, **flags) -> str:
    with pytest.raises(ConfigError) as info:
        load(framework, type_name, path, sets, **flags)
    assert info.value.exit_code == ExitCode.USAGE
    return "\n".join(info.value.issues)


def test_missing_required_keys_name_the_file_and_the_keys(tmp_path):
    path = write_config(tmp_path, "model_name_or_path: m\n")
    text = _issues(path)
    assert str(path) in text and "`dataset_name` or `datasets`" in text and "trl sft" in text


def test_missing_required_keys_of_every_framework(tmp_path):
    path = write_config(tmp_path, "learning_rate: 1.0e-5\n")
    assert "`base_model`" in _issues(path, "axolotl", "sft") and "`datasets`" in _issues(path, "axolotl", "sft")
    assert "`model`" in _issues(path, "verifiers", "grpo") and "`environment`" in _issues(path, "verifiers", "grpo")


def test_an_old_trl_key_is_passed_under_its_current_name_with_a_note(tmp_path):
    from unit_helpers import load, mounted_config, plan_for

    path = write_config(tmp_path, GOOD + "max_seq_length: 1024\ntorch_dtype: bfloat16\noverwrite_output_dir: true\ncheckpoint_volume: c\n")
    config = load("trl", "sft", path)
    notes = "\n".join(config.notices)
    assert "`max_seq_length: 1024` is spelled `max_length`" in notes and "`overwrite_output_dir`" in notes
    mounted = mounted_config(plan_for("trl", "sft", path))
    assert mounted["max_length"] == 1024 and mounted["dtype"] == "bfloat16"
    assert not {"max_seq_length", "torch_dtype", "overwrite_output_dir"} & set(mounted)


def test_an_old_and_a_new_name_for_one_trl_setting_is_an_error_naming_its_line(tmp_path):
    path = write_config(tmp_path, GOOD + "max_seq_length: 1024\nmax_length: 512\n")
    text = _issues(path)
    assert f"{path}:3:" in text and "`max_seq_length` and `max_length` are the same setting" in text


def test_a_key_trl_does_not_read_is_refused_with_the_nearest_option(tmp_path):
    path = write_config(tmp_path, GOOD + "learning_rat: 1.0e-5\nreward_fn_weights: [1]\n")
    text = _issues(path)
    assert f"{path}:3: `learning_rat` is not an option of `trl sft`" in text and "did you mean `learning_rate`?" in text
    assert "`reward_fn_weights` is not an option of `trl sft`" in text and "accelerate launch" in text
    assert "another project's script" in text


def test_cluster_ish_typo_suggests_the_field_with_file_and_line(tmp_path):
    path = write_config(tmp_path, GOOD + "learning_rate: 1.0e-5\ngpus: 8\n")
    text = _issues(path)
    assert f"{path}:4: `gpus`: unknown field; did you mean `gpu`?" in text


def test_typo_inside_services_suggests_with_line(tmp_path):
    path = write_config(tmp_path, GOOD + "services:\n  server:\n    gpus: 2\n")
    text = _issues(path, "trl", "grpo")
    assert f"{path}:5: `services.server.gpus`: unknown field; did you mean `gpu`?" in text


def test_typo_given_by_set_names_the_set(tmp_path):
    text = _issues(write_config(tmp_path, GOOD), sets=["gpus=2"])
    assert "--set gpus=2: `gpus`: unknown field; did you mean `gpu`?" in text


def test_wrong_type_names_file_line_and_field(tmp_path):
    path = write_config(tmp_path, GOOD + "memory: 256Gi\ngpu: eight\n")
    text = _issues(path)
    assert f"{path}:4: `gpu`:" in text


def test_nested_wrong_value_names_its_line(tmp_path):
    path = write_config(tmp_path, GOOD + "tolerations:\n  - key: a\n    effect: Sometimes\n")
    assert f"{path}:5: `tolerations.0.effect`:" in _issues(path)


@pytest.mark.parametrize("flag,value", [("memory", "lots"), ("cpu", "-3"), ("memory", "0"), ("cpu", "12 cores")])
def test_bad_quantity_flag_names_the_flag_and_field(tmp_path, flag, value):
    text = _issues(write_config(tmp_path, GOOD), **{flag: value})
    assert f"--{flag}: `{flag}`:" in text and "quantity" in text or "greater than zero" in text


def test_negative_gpu_flag_names_the_flag(tmp_path):
    text = _issues(write_config(tmp_path, GOOD), gpu=-1)
    assert "--gpu: `gpu`:" in text and "greater than or equal to 0" in text


def test_every_problem_is_reported_at_once(tmp_path):
    path = write_config(tmp_path, "gpus: 8\nmemory: lots\n")
    with pytest.raises(ConfigError) as info:
        load("trl", "sft", path)
    issues = info.value.issues
    assert len(issues) >= 3 and info.value.message == f"{len(issues)} problems in the config"
    assert info.value.hint and "cw schema" in info.value.hint


def test_invalid_yaml_names_file_and_line(tmp_path):
    path = write_config(tmp_path, GOOD + "learning_rate: 1.0e-5\nlist: [unclosed\nnext: 1\n")
    text = _issues(path)
    assert "not valid YAML" in text
    line = int(text.split(f"{path}:")[1].split(":")[0])
    assert line in (4, 5, 6)


def test_tab_indentation_names_file_and_line(tmp_path):
    path = write_config(tmp_path, GOOD + "trl:\n\tbeta: 1\n")
    assert f"{path}:4: not valid YAML" in _issues(path)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_non_mapping_file_is_refused(tmp_path, text):
    path = write_config(tmp_path, text)
    assert f"{path}:1: the config must be a mapping" in _issues(path)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "a: 1\n---\nb: 2\n"])
def test_empty_or_multi_document_file_is_refused(tmp_path, text):
    path = write_config(tmp_path, text)
    assert f"{path}: expected exactly one YAML document" in _issues(path)


def test_missing_file_is_named(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load("trl", "sft", path)
    assert info.value.issues == [f"{path}: no such file"] and info.value.hint


def test_unreadable_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="cannot read it"):
        load("trl", "sft", tmp_path)  # a directory


def test_python_tags_are_refused_not_executed(tmp_path):
    path = write_config(tmp_path, GOOD + "x: !!python/object/apply:os.system ['echo pwned']\n")
    assert "not valid YAML" in _issues(path)


def test_missing_user_file_names_config_and_field(tmp_path):
    path = write_config(tmp_path, GOOD + "checkpoint_volume: ckpts\nfiles:\n  - nope.py\n")
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "grpo", path)
    assert str(path) in info.value.message and "`files`" in info.value.message and "nope.py" in info.value.message


def test_axolotl_grpo_needs_reward_funcs(tmp_path):
    path = write_config(tmp_path, "base_model: m\ndatasets: [{path: p}]\nrl: dpo\n")
    text = _issues(path, "axolotl", "grpo")
    assert "`rl: dpo`" in text and "trl.reward_funcs" in text


def test_unknown_framework_and_type_suggest_alternatives():
    registry = builtin_registry()
    with pytest.raises(FrameworkError) as info:
        registry.resolve_type("trll", "sft")
    assert info.value.hint == "did you mean `trl`?"
    with pytest.raises(FrameworkError) as info:
        registry.resolve_type("trl", "ppo")
    assert "sft" in info.value.hint and "grpo" in info.value.hint


def test_rlhf_alias_resolves_to_grpo():
    from cw_cli.frameworks.base import TrainingType

    assert builtin_registry().resolve_type("trl", "rlhf")[1] is TrainingType.GRPO


def test_a_user_file_may_not_replace_a_file_cw_mounts(tmp_path):
    from cw_cli.errors import ConfigError

    (tmp_path / "cw_entrypoint.py").write_text("print('mine')\n")
    config = write_config(tmp_path, {"model_name_or_path": "m", "dataset_name": "d", "files": ["cw_entrypoint.py"]})
    with pytest.raises(ConfigError, match="cw_entrypoint.py would replace a file cw mounts"):
        plan_for("trl", "sft", config)
