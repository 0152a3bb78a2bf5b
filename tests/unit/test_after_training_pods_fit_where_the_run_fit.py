"""The after-training pods fit where the run itself fitted, and the model server works without a GPU:
an export, evaluation or server asks for cw's default size capped at what the run's trainer asked
for (a size the user names is kept); where the cluster's GPUs are simulated, or with ``--gpu 0``,
`cw try` / `cw serve` start transformers' own server in the run's image, a LoRA adapter merged into
its base first (the merge step really merges, here on CPU); a ``run:NAME`` reference to a LoRA
adapter starts from its merged export, or is refused with the command that makes one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cw_cli.after_training.run_refs import _merged_model
from cw_cli.after_training.serving import engine_for
from cw_cli.config.evaluation import EvalSpec
from cw_cli.errors import ConfigError
from cw_cli.render.evaluation import eval_size
from cw_cli.render.helper_pods import (
    ENGINE_LABEL,
    MERGE_ADAPTER_SCRIPT,
    READER_USER,
    TRANSFORMERS_ENGINE,
    VLLM_ENGINE,
    VLLM_IMAGE,
    ServedModel,
    ServeSpec,
    server_manifests,
)
from cw_cli.render.helper_sizing import fit_to_trainer, requests_of
from cw_cli.render.run_refs import parse_ref


@pytest.mark.parametrize("trainer,expected", [
    ({"cpu": "1500m", "memory": "6Gi"}, ("1500m", "6Gi")),      # the test cluster's example: capped
    ({"cpu": "96", "memory": "1Ti"}, ("8", "64Gi")),             # a GPU node's trainer: cw's default
    ({}, ("8", "64Gi")),                                          # a trainer without requests
    ({"cpu": "lots", "memory": "-1Gi"}, ("8", "64Gi")),          # odd values in someone's manifest
])  # fmt: skip
def test_a_helper_pods_default_size_is_capped_at_the_trainers(trainer, expected):
    assert fit_to_trainer("8", "64Gi", trainer) == expected


def test_a_containers_request_falls_back_to_its_limit_as_kubernetes_does():
    container = {"resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1"}}}
    assert requests_of(container) == {"cpu": "1", "memory": "4Gi"}


def test_the_eval_blocks_own_size_is_kept_and_the_default_is_capped():
    named = EvalSpec.model_validate({"tasks": ["hellaswag"], "metric": "hellaswag/acc", "cpu": "3", "memory": "40Gi"})
    assert eval_size(named, "1", "2Gi") == {"cpu": "3", "memory": "40Gi"}
    default = EvalSpec.model_validate({"tasks": ["hellaswag"], "metric": "hellaswag/acc"})
    assert eval_size(default, "1500m", "6Gi") == {"cpu": "1500m", "memory": "6Gi"}
    assert eval_size(default, None, None) == {"cpu": "4", "memory": "32Gi"}


class _Kube:
    def __init__(self, simulated: bool) -> None:
        self.simulated_gpus = simulated


@pytest.mark.parametrize("simulated,asked,gpu,expected", [
    (False, None, 1, VLLM_ENGINE),
    (True, None, 1, TRANSFORMERS_ENGINE),       # the test cluster: GPUs advertised, no devices
    (False, None, 0, TRANSFORMERS_ENGINE),      # no GPU asked for: vLLM could not run
    (True, "vllm", 1, VLLM_ENGINE),             # the user's choice wins
])  # fmt: skip
def test_the_server_is_vllm_only_where_there_is_a_gpu_to_use(simulated, asked, gpu, expected):
    assert engine_for(_Kube(simulated), asked, gpu) == expected  # type: ignore[arg-type]


def test_an_unknown_engine_is_refused():
    with pytest.raises(ConfigError, match="expected vllm or transformers"):
        engine_for(_Kube(False), "sglang", 1)  # type: ignore[arg-type]


def _spec(model: ServedModel, engine: str) -> ServeSpec:
    return ServeSpec(run_name="my-sft", run_labels={}, claim="checkpoints", model=model, lifetime_s=600, gpus=1,
                     engine=engine, image="cw.local/cw-runtime:py311-x", trainer_requests={"cpu": "1500m", "memory": "6Gi"})  # fmt: skip


def test_the_cpu_server_runs_transformers_in_the_runs_image_as_nobody_with_folders_as_arguments():
    evil = "/checkpoints/x\"; rm -rf / #$(touch /tmp/pwned)"
    pod, service = server_manifests(_spec(ServedModel(path=evil, adapter=True, base="/opt/base"), TRANSFORMERS_ENGINE))
    container = pod["spec"]["containers"][0]
    assert container["image"] == "cw.local/cw-runtime:py311-x"
    assert pod["spec"]["securityContext"]["runAsUser"] == READER_USER
    assert pod["metadata"]["labels"][ENGINE_LABEL] == TRANSFORMERS_ENGINE
    shell, flag, script, *arguments = container["command"]
    assert (shell, flag) == ("sh", "-c") and evil not in script and arguments[-1] == evil  # a value, never the script
    assert arguments[0] == MERGE_ADAPTER_SCRIPT and "transformers serve" in script
    assert container["resources"]["requests"]["cpu"] == "1500m" and container["resources"]["limits"]["memory"] == "6Gi"
    assert {"name": "HOME", "value": "/tmp"} in container["env"]
    assert service["spec"]["selector"] == {"app.kubernetes.io/component": "serve", "cw-cli.dev/run": "my-sft"}


def test_a_full_model_is_served_as_it_is_and_vllm_keeps_its_own_image():
    cpu, _ = server_manifests(_spec(ServedModel(path="/checkpoints/my-sft"), TRANSFORMERS_ENGINE))
    assert cpu["spec"]["containers"][0]["command"][-2:] == ["serve", "/checkpoints/my-sft"]  # no merge step
    gpu, _ = server_manifests(_spec(ServedModel(path="/checkpoints/my-sft"), VLLM_ENGINE))
    assert gpu["spec"]["containers"][0]["image"] == VLLM_IMAGE and gpu["spec"]["containers"][0]["command"][0] == "vllm"


def test_the_merge_step_gives_a_model_that_answers_as_base_and_adapter_did(tmp_path):
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    from cw_cli.testcluster.realnode.tiny_model import build_policy

    build_policy(tmp_path / "base")
    torch.manual_seed(1)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(tmp_path / "base"),
                          LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))  # fmt: skip
    lora.save_pretrained(tmp_path / "adapter")  # no tokenizer beside it: the merge takes the base's
    done = subprocess.run([sys.executable, "-c", MERGE_ADAPTER_SCRIPT, str(tmp_path / "adapter"), str(tmp_path / "merged")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "merged" / "config.json").is_file() and (tmp_path / "merged" / "tokenizer_config.json").is_file()
    ids = torch.tensor([[5, 9, 12, 7]])
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")(ids).logits
        on_base = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tmp_path / "base"), tmp_path / "adapter")(ids).logits
        base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")(ids).logits
    assert torch.allclose(merged, on_base, atol=1e-5) and not torch.allclose(merged, base, atol=1e-3)


LISTING = {"artifacts": [
    {"kind": "checkpoint", "step": 20, "complete": True, "path": "my-sft/checkpoint-20", "adapter": True},
    {"kind": "final", "step": 20, "complete": True, "path": "my-sft", "adapter": True},
]}  # fmt: skip


def test_a_reference_to_an_adapter_takes_its_merged_export():
    ref = parse_ref(Path("dpo.yaml"), "model_name_or_path", "run:my-sft")
    merged = {"artifacts": [*LISTING["artifacts"], {"kind": "export", "complete": True, "path": "my-sft/exported/final-merged"}]}
    assert _merged_model(Path("dpo.yaml"), ref, merged, "final") == "/checkpoints/my-sft/exported/final-merged"


def test_a_reference_to_an_adapter_without_a_merged_export_names_the_command_that_makes_it():
    ref = parse_ref(Path("dpo.yaml"), "model_name_or_path", "run:my-sft@20")
    with pytest.raises(ConfigError) as raised:
        _merged_model(Path("dpo.yaml"), ref, LISTING, "checkpoint-20")
    assert "dpo.yaml: model_name_or_path: run:my-sft@20" in raised.value.issues[0] and "LoRA adapter" in raised.value.issues[0]
    assert raised.value.hint and "cw export my-sft --checkpoint 20 --merge --wait" in raised.value.hint
