"""Axolotl GRPO with `trl.use_vllm: true` and no `vllm_mode` is server mode, as Axolotl's own
validator makes it (issue 32 item 8; tests/training/test_axolotl_vllm_mode_follows_axolotl.py
checks the rule against Axolotl itself): the run gets the `axolotl vllm-serve` server its trainer
waits for, and the memory estimate counts that server."""

from __future__ import annotations

import pytest
import yaml
from unit_helpers import plan_for, write_config

BASE = {
    "gpu": 4,
    "base_model": "Qwen/Qwen2.5-1.5B-Instruct",
    "rl": "grpo",
    "datasets": [{"path": "openai/gsm8k", "name": "main", "type": "rewards.transform"}],
    "micro_batch_size": 2,
    "gradient_accumulation_steps": 32,
    "vllm": {"tensor_parallel_size": 1},
}


def _trainer_config(plan) -> dict:
    configmap = next(m for m in plan.manifests if m["kind"] == "ConfigMap")
    return yaml.safe_load(configmap["data"]["config.yaml"])


def _servers(plan) -> list[str]:
    return [m["metadata"]["name"] for m in plan.manifests if m["kind"] == "Deployment"]


@pytest.mark.parametrize("use_vllm", [True, "true", "yes", 1])
def test_use_vllm_without_a_mode_gets_the_server(tmp_path, use_vllm):
    trl = {"num_generations": 8, "reward_funcs": ["rewards.reward"], "use_vllm": use_vllm}
    plan = plan_for("axolotl", "grpo", write_config(tmp_path, {**BASE, "trl": trl}), run_name="axo-run")
    assert _servers(plan) == ["axo-run-server"]
    mounted = _trainer_config(plan)["trl"]
    assert mounted["vllm_mode"] == "server" and mounted["vllm_server_host"] == "axo-run-server"


@pytest.mark.parametrize(("use_vllm", "mode"), [(True, "colocate"), (False, None), ("false", None), (None, None)])
def test_colocate_or_no_vllm_gets_no_server(tmp_path, use_vllm, mode):
    trl = {"num_generations": 8, "reward_funcs": ["rewards.reward"], "use_vllm": use_vllm, "vllm_mode": mode}
    trl = {k: v for k, v in trl.items() if v is not None}
    plan = plan_for("axolotl", "grpo", write_config(tmp_path, {**BASE, "trl": trl}), run_name="axo-run")
    assert _servers(plan) == []


@pytest.mark.parametrize(("trl", "mode"), [({"use_vllm": True}, "server"), ({"use_vllm": True, "vllm_mode": "colocate"}, "colocate")])
def test_the_estimate_follows_the_same_rule(trl, mode):
    from cw_cli.config.models import ClusterSpec
    from cw_cli.frameworks.axolotl.setup import read_setup

    native = {k: v for k, v in BASE.items() if k != "gpu"}
    native["trl"] = {"num_generations": 8, "reward_funcs": ["rewards.reward"], **trl}
    setup = read_setup("grpo", native, ClusterSpec(gpu=4), None, None)
    assert setup.vllm is not None and setup.vllm.mode == mode
