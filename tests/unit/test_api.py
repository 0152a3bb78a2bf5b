"""cw_cli.api plans runs from Python exactly as the CLI does (the CLI is a layer over it)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from unit_helpers import CONFIGS, mounted_config

from cw_cli import api
from cw_cli.errors import ConfigError

SFT = {"model_name_or_path": "m", "dataset_name": "d", "checkpoint_volume": "ckpt", "gpu": 2}


def test_a_mapping_plans_like_the_same_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(SFT, sort_keys=False))  # same key order, same config hash
    from_file = api.plan(path, "trl", "sft", name="same")
    from_mapping = api.plan(SFT, "trl", "sft", name="same", base_dir=tmp_path)
    assert from_file.to_yaml() == from_mapping.to_yaml()
    assert from_file.name == "same" and from_file.manifests[0]["kind"] == "Job"


def test_overrides_keep_their_types_and_nest(tmp_path):
    planned = api.plan(
        SFT, "trl", "sft", name="typed", base_dir=tmp_path,
        set={"learning_rate": 2e-5, "gradient_checkpointing": True, "model_init_kwargs.torch_dtype": "bfloat16"},
    )  # fmt: skip
    mounted = mounted_config(planned.plan, "typed")
    assert mounted["learning_rate"] == 2e-5 and mounted["gradient_checkpointing"] is True
    assert mounted["model_init_kwargs"] == {"torch_dtype": "bfloat16"}


def test_flags_apply_like_the_cli(tmp_path):
    planned = api.plan(SFT, "trl", "sft", name="flags", base_dir=tmp_path, gpu=4, memory="64Gi")
    resources = planned.manifests[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert resources["nvidia.com/gpu"] == "4" and resources["memory"] == "64Gi"


def test_config_errors_are_typed_and_name_the_mapping(tmp_path):
    with pytest.raises(ConfigError) as caught:
        api.plan({**SFT, "gpu": "many"}, "trl", "sft", base_dir=tmp_path)
    assert api.DICT_CONFIG_NAME in caught.value.issues[0] and "gpu" in caught.value.issues[0]
    assert caught.value.exit_code == 2


def test_a_generated_name_is_fresh_each_time(tmp_path):
    names = {api.plan(SFT, "trl", "sft", base_dir=tmp_path).name for _ in range(3)}
    assert len(names) == 3


def test_the_cli_dry_run_prints_what_the_api_plans(tmp_path):
    config = tmp_path / "trl-sft.yaml"
    config.write_text((CONFIGS / "trl-sft.yaml").read_text())
    printed = subprocess.run(
        [sys.executable, "-m", "cw_cli", "trl", "sft", str(config), "--dry-run", "--name", "cli-run", "--gpu", "2"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    planned = api.plan(config, "trl", "sft", name="cli-run", gpu=2)
    body = "".join(line + "\n" for line in printed.splitlines() if not line.startswith("#"))
    assert list(yaml.safe_load_all(body)) == list(yaml.safe_load_all(planned.to_yaml()))


def test_the_api_module_loads_no_cluster_client():
    code = "import sys, cw_cli.api; print('kubernetes' in sys.modules, 'pydantic' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == ["False", "False"]


@pytest.mark.parametrize("key", ["a=b", "", 3])
def test_override_keys_that_are_no_config_key_are_refused(tmp_path, key):
    with pytest.raises(ConfigError):
        api.plan(SFT, "trl", "sft", base_dir=tmp_path, set={key: 1})
