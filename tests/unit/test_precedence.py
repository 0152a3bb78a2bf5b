"""Precedence, lowest first: framework defaults < config file < --set < flags."""

from __future__ import annotations

import pytest
from unit_helpers import container, env_map, load, mounted_config, plan_for, pod_spec, write_config

BASE = {"model_name_or_path": "m", "dataset_name": "d"}


@pytest.fixture
def cfg(tmp_path):
    def make(**extra):
        return write_config(tmp_path, {**BASE, **extra})

    return make


def test_flag_beats_set_beats_file_for_gpu(cfg):
    path = cfg(gpu=8)
    assert load("trl", "sft", path).cluster.gpu == 8
    assert load("trl", "sft", path, ["gpu=2"]).cluster.gpu == 2
    assert load("trl", "sft", path, ["gpu=2"], gpu=4).cluster.gpu == 4


def test_framework_defaults_apply_only_when_nothing_else_sets_them(cfg):
    from cw_cli.frameworks.trl import TRLFramework

    defaults = TRLFramework.resources
    unset = load("trl", "sft", cfg()).cluster
    assert (unset.gpu, unset.cpu, unset.memory) == (defaults.gpu, defaults.cpu, defaults.memory)
    from_file = load("trl", "sft", cfg(gpu=1, cpu="2", memory="3Gi")).cluster
    assert (from_file.gpu, from_file.cpu, from_file.memory) == (1, "2", "3Gi")


def test_zero_gpu_in_file_is_not_replaced_by_the_default(cfg):
    plan = plan_for("trl", "sft", cfg(gpu=0))
    resources = container(plan.manifests[0], "trainer")["resources"]
    assert "nvidia.com/gpu" not in resources["requests"] and "nvidia.com/gpu" not in resources["limits"]


def test_set_learning_rate_exponent_is_a_float_in_the_mounted_config(cfg):
    plan = plan_for("trl", "sft", cfg(learning_rate=2e-5), ["learning_rate=1e-5"])
    value = mounted_config(plan)["learning_rate"]
    assert isinstance(value, float) and value == 1e-5


def test_file_learning_rate_without_dot_is_a_float(tmp_path):
    path = write_config(tmp_path, "model_name_or_path: m\ndataset_name: d\nlearning_rate: 1e-5\n")
    assert load("trl", "sft", path).native["learning_rate"] == 1e-5


def test_set_with_dots_nests_into_existing_mapping(tmp_path):
    path = write_config(tmp_path, {**BASE, "model_init_kwargs": {"beta": 0.5, "keep": "me"}})
    native = load("trl", "sft", path, ["model_init_kwargs.beta=0.1", "dataset_kwargs.deep.key=x"]).native
    assert native["model_init_kwargs"] == {"beta": 0.1, "keep": "me"}
    assert native["dataset_kwargs"] == {"deep": {"key": "x"}}


def test_set_cannot_nest_into_a_scalar(cfg):
    from cw_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="not a mapping"):
        load("trl", "sft", cfg(beta=0.1), ["beta.x=1"])


def test_negative_numbers_survive_set_and_file(cfg):
    native = load("trl", "sft", cfg(warmup_steps=-3), ["max_steps=-1", "weight_decay=-1.5e-3"]).native
    assert native["warmup_steps"] == -3
    assert native["max_steps"] == -1 and isinstance(native["max_steps"], int)
    assert native["weight_decay"] == -1.5e-3


def test_set_keeps_strings_and_booleans_typed_like_yaml(cfg):
    native = load("trl", "sft", cfg(), ["bf16=true", "run_name=abc", "hub_model_id=", "hub_token=a=b"]).native
    assert native["bf16"] is True and native["run_name"] == "abc"
    assert native["hub_model_id"] is None  # "key=" is YAML null, as in a file
    assert native["hub_token"] == "a=b"  # only the first '=' splits


def test_later_set_wins_over_earlier_set(cfg):
    assert load("trl", "sft", cfg(), ["seed=1", "seed=2"]).native["seed"] == 2


def test_set_without_equals_is_refused(cfg):
    from cw_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="expected key=value"):
        load("trl", "sft", cfg(), ["learning_rate"])


def test_set_of_cluster_field_goes_to_cluster_not_configmap(cfg):
    plan = plan_for("trl", "sft", cfg(), ["gpu=2", "services.server.gpu=3", "env.FOO=bar"])
    mounted = mounted_config(plan)
    assert "gpu" not in mounted and "services" not in mounted and "env" not in mounted
    trainer = container(plan.manifests[0], "trainer")
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert env_map(trainer)["FOO"] == "bar"


def test_pull_flag_sets_policy_and_never_reaches_configmap(cfg):
    plan = plan_for("trl", "sft", cfg(), pull=True)
    assert container(plan.manifests[0], "trainer")["imagePullPolicy"] == "Always"
    assert "pull" not in mounted_config(plan)
    assert "pull" not in plan.manifests[1]["data"]["config.yaml"]


def test_services_only_never_reaches_configmap_and_configmap_owns(tmp_path):
    path = write_config(tmp_path, {**BASE, "services": {"server": {"gpu": 1}}})
    plan = plan_for("trl", "grpo", path, services_only=True)
    assert plan.owner_name is None
    assert [m["kind"] for m in plan.manifests] == [
        "ConfigMap", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "Deployment", "Service"
    ]  # fmt: skip
    assert "services" not in mounted_config(plan) and "services_only" not in mounted_config(plan)


def test_services_only_for_a_type_without_services_is_refused(cfg):
    from cw_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="no services"):
        plan_for("trl", "sft", cfg(), services_only=True)


def test_image_flag_beats_file_for_trainer_and_default_services(tmp_path):
    path = write_config(tmp_path, {**BASE, "image": "file/image:1", "use_vllm": True, "vllm_mode": "server"})
    plan = plan_for("trl", "grpo", path, image="flag/image:2")
    job = plan.manifests[0]
    assert container(job, "trainer")["image"] == "flag/image:2"
    assert all(c["image"] == "flag/image:2" for c in pod_spec(job)["initContainers"])


def test_user_output_dir_on_the_volume_or_relative_is_kept(cfg):
    for written in ("/checkpoints/shared/out", "data/Qwen-SFT", "./outputs/out"):
        assert mounted_config(plan_for("trl", "sft", cfg(output_dir=written)))["output_dir"] == written


def test_native_defaults_lose_to_the_file_and_to_set(tmp_path):
    base = {"base_model": "m", "datasets": [{"path": "p", "type": "alpaca"}]}
    assert load("axolotl", "sft", write_config(tmp_path, base)).native["auto_resume_from_checkpoints"] is True
    path = write_config(tmp_path, {**base, "auto_resume_from_checkpoints": False})
    assert load("axolotl", "sft", path).native["auto_resume_from_checkpoints"] is False
    assert load("axolotl", "sft", path, ["auto_resume_from_checkpoints=true"]).native["auto_resume_from_checkpoints"] is True


def test_quoted_set_value_is_a_string_and_unquoted_text_stays_raw():
    from cw_cli.config.yaml_source import parse_scalar

    assert parse_scalar("'0123'") == "0123"
    assert parse_scalar('"a: b"') == "a: b"
    assert parse_scalar("a # not a comment") == "a # not a comment"
    assert parse_scalar("1e-5") == 1e-5
