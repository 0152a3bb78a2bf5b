"""The memory estimate wired to real runs: configs -> TrainingSetup, config.json lookup, GPU memory,
`cw estimate`, and the pre-launch refusal (its cluster half is tests/cluster/test_estimate_refusal.py).

The configs are public ones nobody here wrote (tests/corpus/configs, sources in tests/corpus/index.yaml);
each expected field below was read off the file itself (or off the framework's documented default
when the file leaves it out, named in a comment). No test touches the network: the hub download is
replaced, and the Hugging Face caches are folders made in tmp_path from tests/fixtures/model_configs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from unit_helpers import REPO, builtin_registry

from cw_cli.config.loader import deep_merge
from cw_cli.config.models import CLUSTER_FIELDS, ClusterSpec
from cw_cli.config.options import EstimateOptions
from cw_cli.config.yaml_source import load_config_file
from cw_cli.errors import ClusterUnreachable, Forbidden
from cw_cli.estimate.from_config import JSON_KEYS, REFUSAL_HEADROOM, ROLE_KEYS, SUGGESTION_KEYS, VERDICT_KEYS, estimate_run
from cw_cli.estimate.gpu_memory import resolve_gpu_memory
from cw_cli.estimate.model_config import find_model_config, hf_cache_dirs
from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType
from cw_cli.frameworks.trl import TRLFramework

TRL = TRLFramework()
CORPUS = REPO / "tests" / "corpus" / "configs"
MODELS = REPO / "tests" / "fixtures" / "model_configs"
GIB = 1024**3


@pytest.fixture(autouse=True)
def no_hub_no_home(monkeypatch, tmp_path):
    """No test reads the real machine's caches or reaches the hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def hf_cache(root: Path, *models: str, revision: str = "0123abcd") -> Path:
    """A Hugging Face hub cache holding config.json of fixture models (``org/name`` ids)."""
    for model in models:
        folder = root / ("models--" + model.replace("/", "--"))
        (folder / "snapshots" / revision).mkdir(parents=True)
        shutil.copy(MODELS / (model.replace("/", "__") + ".json"), folder / "snapshots" / revision / "config.json")
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(revision)
    return root


def corpus_run(name: str, framework: str, training_type: str) -> tuple[dict[str, Any], ClusterSpec, Path]:
    """A corpus config read as cw's loader reads it: cluster fields split off, the framework's defaults,
    renames (TRL's torch_dtype -> dtype, max_seq_length -> max_length) and sizes (num_processes ->
    gpu) applied. Not validated (open-r1's and the handbook's configs carry keys of their own scripts)."""
    path = CORPUS / name
    registry = builtin_registry()
    loaded, kind = registry.resolve_type(framework, training_type)
    fw = loaded.framework
    data = load_config_file(path).data
    claimed = fw.claims_native_keys(data)
    cluster = {k: v for k, v in data.items() if k in CLUSTER_FIELDS and k not in claimed}
    native = {k: v for k, v in data.items() if k not in CLUSTER_FIELDS or k in claimed}
    native, _ = fw.upgrade_config(deep_merge(fw.native_defaults(kind), native), kind)
    for field_path, (value, _) in fw.native_resources(native, kind, path.parent).items():
        node = cluster
        for key in field_path[:-1]:
            node = node.setdefault(key, {})
        node.setdefault(field_path[-1], value)
    cluster.setdefault("gpu", fw.resources.gpu)
    cluster.pop("env", None)  # TRL's own `env:` in one file is not cw's
    return native, ClusterSpec.model_validate(cluster), path.parent


def setup_of(name: str, framework: str, training_type: str):
    """The setup the framework itself reads from a corpus config (no config.json: PEFT's generic defaults)."""
    native, cluster, base = corpus_run(name, framework, training_type)
    fw, kind = builtin_registry().resolve_type(framework, training_type)
    read = fw.framework.training_setup(native, kind, cluster, base, None)
    assert read is not None
    return read


# --- TRL (its docs, scripts, open-r1, alignment-handbook) -------------------------------------------------


def test_trl_sft_lora_script_config():
    """trl/scripts/sft.py's documented LoRA run: use_peft, lora_r 32, packing, 2 x 8 micro batches."""
    read = setup_of("trl-sft-lora-capybara.yaml", "trl", "sft")
    s = read.setup
    assert (s.method, s.lora_rank, s.micro_batch, s.gradient_accumulation, s.packing) == ("lora", 32, 2, 8, True)
    assert s.lora_targets == ("q_proj", "v_proj")  # no lora_target_modules: PEFT's default for qwen2
    assert s.lora_dropout == 0.05  # TRL ModelConfig's default
    assert s.seq_len == 1024  # SFTConfig.max_length's default
    assert s.weight_dtype == "fp32" and s.mixed_precision == "bf16"  # no dtype; bf16 unless fp16
    assert s.gradient_checkpointing is True  # TRL 1.x's default
    assert s.zero_stage is None and not s.fsdp and s.gpus_per_node == 8 and read.vllm is None
    assert any("fp32" in note for note in read.notes)


def test_handbook_qlora_sft():
    """alignment-handbook zephyr-7b-beta sft/config_qlora: 4-bit base, r16 on seven projections, 2048 tokens."""
    s = setup_of("handbook-sft-zephyr-7b-qlora.yaml", "trl", "sft").setup
    assert (s.method, s.quantization, s.double_quant) == ("qlora", "nf4", False)  # no use_bnb_nested_quant
    assert s.lora_rank == 16 and s.lora_dropout == 0.05
    assert s.lora_targets == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert s.weight_dtype == "bf16"  # torch_dtype: bfloat16 (TRL's dtype)
    assert s.seq_len == 2048  # max_seq_length, TRL's max_length
    assert (s.micro_batch, s.gradient_accumulation, s.attention) == (4, 2, "flash_attention_2")


def test_handbook_full_dpo_keeps_a_reference_model():
    s = setup_of("handbook-dpo-zephyr-7b-full.yaml", "trl", "dpo").setup
    assert s.method == "full" and s.preference_pairs and s.reference_model
    assert (s.seq_len, s.micro_batch, s.gradient_accumulation, s.optimizer) == (1024, 8, 2, "adamw_torch")
    assert s.weight_dtype == "fp32"  # torch_dtype: null


def test_lora_dpo_needs_no_reference_copy_and_takes_its_gpus_from_num_processes():
    s = setup_of("trl-dpo-lora-mixture-num-processes.yaml", "trl", "dpo").setup
    assert s.method == "lora" and s.lora_rank == 32 and s.preference_pairs and not s.reference_model
    assert (s.micro_batch, s.gradient_accumulation, s.gpus_per_node) == (2, 8, 4)


def test_trl_grpo_server_mode_with_a_zero3_accelerate_file():
    """TRL docs' GRPO server mode; accelerate_configs/zero3.yaml (open-r1's, 4 processes) beside it."""
    read = setup_of("trl-grpo-vllm-server.yaml", "trl", "grpo")
    s, v = read.setup, read.vllm
    assert (s.zero_stage, s.offload_optimizer, s.offload_params, s.gpus_per_node) == (3, False, False, 4)
    assert (s.num_generations, s.max_completion_length, s.micro_batch, s.gradient_accumulation) == (16, 2048, 4, 8)
    assert s.generation_batch_size == 4 * 4 * 8  # per_device x processes x steps_per_generation (= accumulation)
    assert s.gradient_checkpointing and not s.reference_model  # beta defaults to 0
    assert v is not None and (v.mode, v.gpu_memory_utilization, v.tensor_parallel) == ("server", 0.9, 1)


def test_trl_grpo_colocate_with_tensor_parallel_and_sleep_mode():
    read = setup_of("trl-grpo-vllm-colocate-tp.yaml", "trl", "grpo")
    s, v = read.setup, read.vllm
    assert v is not None and v.mode == "colocate"
    assert (v.gpu_memory_utilization, v.tensor_parallel, v.enable_sleep_mode) == (0.3, 2, True)
    assert v.max_num_seqs == 8 * 2 * 1  # TRL: per_device_train_batch_size x TP x steps_per_generation
    assert s.method == "lora" and s.lora_targets == ("q_proj", "v_proj") and s.weight_dtype == "bf16"
    assert s.max_completion_length == 1024 and s.gpus_per_node == 4


def test_trl_grpo_colocate_utilization_and_use_vllm_defaults():
    v = setup_of("trl-grpo-custom-reward-module.yaml", "trl", "grpo").vllm
    assert v is not None and (v.mode, v.gpu_memory_utilization) == ("colocate", 0.5)
    read = setup_of("trl-grpo-use-vllm-default-mode.yaml", "trl", "grpo")  # use_vllm without a mode: colocate
    assert read.vllm is not None and read.vllm.mode == "colocate" and read.setup.num_generations == 8
    assert read.setup.max_completion_length == 1024 and read.setup.micro_batch == 8
    read = setup_of("trl-grpo-clis-reward-funcs.yaml", "trl", "grpo")  # no use_vllm: the trainer generates
    assert read.vllm is None and read.setup.max_completion_length == 512  # GRPOConfig's default


def test_deepspeed_zero2_from_an_accelerate_file_and_from_a_trl_profile():
    s = setup_of("trl-sft-clis-accelerate-config-file.yaml", "trl", "sft").setup
    assert (s.zero_stage, s.gpus_per_node) == (2, 8)  # accelerate_configs/deepspeed_zero2.yaml
    s = setup_of("trl-sft-clis-dataset-mixture.yaml", "trl", "sft").setup
    assert s.zero_stage == 2  # `accelerate_config: zero2`, TRL's packaged profile


def test_open_r1_long_context_sft():
    s = setup_of("openr1-sft-olympiccoder-7b.yaml", "trl", "sft").setup
    assert (s.seq_len, s.micro_batch, s.gradient_accumulation, s.packing) == (32768, 2, 8, False)
    assert (s.weight_dtype, s.attention, s.gradient_checkpointing, s.method) == ("bf16", "flash_attention_2", True, "full")


# --- Axolotl (its examples) -----------------------------------------------------------------------------


def test_axolotl_llama3_qlora():
    s = setup_of("axolotl-llama3-qlora.yml", "axolotl", "sft").setup
    assert (s.method, s.quantization, s.double_quant) == ("qlora", "nf4", True)
    assert (s.lora_rank, s.lora_targets, s.lora_dropout) == (32, "all-linear", 0.05)  # lora_target_linear
    assert (s.seq_len, s.packing, s.micro_batch, s.gradient_accumulation) == (4096, True, 2, 4)
    assert (s.optimizer, s.weight_dtype, s.mixed_precision) == ("paged_adamw_32bit", "bf16", "bf16")  # bf16: auto
    assert s.gradient_checkpointing and s.attention == "flash_attention_2"


def test_axolotl_full_fine_tune():
    s = setup_of("axolotl-llama3-fft-8b.yaml", "axolotl", "sft").setup
    assert (s.method, s.seq_len, s.packing, s.micro_batch, s.gradient_accumulation) == ("full", 8192, True, 1, 8)
    assert s.optimizer == "paged_adamw_8bit" and s.zero_stage is None


def test_axolotl_deepspeed_file_here_and_bundled_in_its_image():
    s = setup_of("axolotl-mixtral-qlora-deepspeed-local.yml", "axolotl", "sft").setup
    assert (s.zero_stage, s.offload_optimizer, s.offload_params) == (2, True, False)  # deepspeed_configs/zero2.json
    read = setup_of("axolotl-phi3-ft-deepspeed-zero1-missing.yml", "axolotl", "sft")
    assert (read.setup.zero_stage, read.setup.offload_optimizer) == (1, False)  # Axolotl's own zero1.json
    assert any("zero1.json is not here" in note for note in read.notes)
    assert (read.setup.lora_rank, read.setup.lora_targets, read.setup.seq_len) == (64, "all-linear", 4096)


def test_axolotl_preference_methods():
    s = setup_of("axolotl-dpo-llama3-instruct-lora.yml", "axolotl", "dpo").setup
    assert (s.method, s.quantization, s.preference_pairs, s.reference_model) == ("lora", "int8", True, False)
    assert s.seq_len == 4096
    s = setup_of("axolotl-kto-llama3-qlora-1b.yaml", "axolotl", "dpo").setup
    assert s.method == "qlora" and not s.preference_pairs  # KTO: single completions
    s = setup_of("axolotl-dpo-ipo-loss-type-qwen2.yaml", "axolotl", "dpo").setup
    assert s.method == "full" and s.preference_pairs and s.reference_model and s.optimizer == "adamw_bnb_8bit"


def test_axolotl_grpo_server():
    read = setup_of("axolotl-grpo-qwen2.5-vllm-server.yml", "axolotl", "grpo")
    s, v = read.setup, read.vllm
    assert (s.num_generations, s.max_completion_length, s.micro_batch, s.gradient_accumulation) == (8, 512, 2, 4)
    assert (s.method, s.lora_rank, s.lora_targets) == ("lora", 32, "all-linear")
    assert v is not None and (v.mode, v.gpu_memory_utilization, v.max_model_len, v.tensor_parallel) == (
        "server", 0.85, 2048, 2)  # vllm: block; TP through services.server.tensor_parallel_size


def test_axolotl_checkpointing_offload_counts_as_on():
    read = setup_of("axolotl-local-dataset-chat-template-jinja.yml", "axolotl", "sft")
    assert read.setup.gradient_checkpointing and read.setup.optimizer == "adamw_torch_4bit"
    assert any("offload" in note for note in read.notes)


# --- verifiers (its own vf-rl files) ----------------------------------------------------------------------


def test_verifiers_trainer_args():
    read = setup_of("verifiers-wordle.toml", "verifiers", "grpo")
    s = read.setup
    assert (s.method, s.lora_targets, s.micro_batch, s.seq_len) == ("lora", "all-linear", 4, 2048)
    assert s.lora_rank == 8 and s.zero_stage == 3  # RLConfig's rank; cw's default accelerate_config zero3
    assert (s.weight_dtype, s.gradient_checkpointing, s.gpus_per_node) == ("bf16", False, 1)
    assert read.vllm is not None and read.vllm.mode == "server"
    s = setup_of("verifiers-gsm8k.toml", "verifiers", "grpo").setup
    assert (s.micro_batch, s.seq_len) == (12, 2048)
    assert s.lora_targets == ("q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "down_proj", "up_proj")
    s = setup_of("verifiers-math-python.toml", "verifiers", "grpo").setup
    assert (s.gpus_per_node, s.micro_batch, s.seq_len) == (2, 8, 4096)  # trainer.gpus


class _NoSetupFramework(BaseTrainingFramework):
    """A plugin's framework that describes no training setup (the default)."""

    name = "myplugin"
    training_types = (TrainingType.SFT,)

    def default_image(self, training_type):
        return "example.com/myplugin:1"

    def trainer_command(self, config, context):
        return ["train"]


def test_a_plugin_framework_gets_a_clear_no_estimate():
    result = estimate_run(_NoSetupFramework(), "sft", {"model_name_or_path": "x"}, ClusterSpec(gpu=1))
    assert not result.to_dict()["estimated"]
    assert result.skipped is not None and "no estimate for framework 'myplugin'" in result.skipped
    assert set(result.to_dict()) == set(JSON_KEYS) and result.to_dict()["trainer"] is None


# --- config.json ----------------------------------------------------------------------------------------


def test_config_json_from_a_fake_hf_cache(tmp_path, monkeypatch):
    cache = hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-7B")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    found = find_model_config("Qwen/Qwen2.5-7B")
    assert found.config == json.loads((MODELS / "Qwen__Qwen2.5-7B.json").read_text())
    assert found.source == str(cache / "models--Qwen--Qwen2.5-7B" / "snapshots" / "0123abcd" / "config.json")


def test_hf_home_and_the_snapshot_refs_main_names(tmp_path, monkeypatch):
    cache = hf_cache(tmp_path / "home-hf" / "hub", "Qwen/Qwen2.5-3B", revision="new")
    old = cache / "models--Qwen--Qwen2.5-3B" / "snapshots" / "old"
    old.mkdir()
    (old / "config.json").write_text('{"model_type": "stale"}')
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home-hf"))
    assert hf_cache_dirs() == [cache]
    assert find_model_config("Qwen/Qwen2.5-3B").source.endswith("snapshots/new/config.json")
    assert find_model_config("Qwen/Qwen2.5-3B", revision="old").config == {"model_type": "stale"}


def test_a_local_model_folder_relative_to_the_config(tmp_path):
    (tmp_path / "models" / "mine").mkdir(parents=True)
    shutil.copy(MODELS / "meta-llama__Llama-3.2-3B.json", tmp_path / "models" / "mine" / "config.json")
    found = find_model_config("models/mine", tmp_path)
    assert found.config is not None and found.config["model_type"] == "llama"


def test_not_found_names_where_it_looked_and_never_asks_the_hub_unless_allowed(tmp_path, monkeypatch):
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    found = find_model_config("Qwen/Qwen2.5-7B", tmp_path)
    assert found.config is None and str(tmp_path / "empty") in found.note and str(tmp_path / "Qwen") in found.note
    found = find_model_config("Qwen/Qwen2.5-7B", tmp_path, hub=True)  # HF_HUB_OFFLINE=1 (fixture)
    assert found.config is None and "HF_HUB_OFFLINE" in found.note


def test_the_hub_when_allowed_and_online(tmp_path, monkeypatch):
    import huggingface_hub

    downloaded = tmp_path / "downloaded.json"
    shutil.copy(MODELS / "Qwen__Qwen3-8B.json", downloaded)
    calls = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda repo, name, revision=None: calls.append((repo, name)) or str(downloaded))
    # Online: neither switch set (a test run earlier in the session may have left TRANSFORMERS_OFFLINE).
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    found = find_model_config("Qwen/Qwen3-8B", hub=True)
    assert calls == [("Qwen/Qwen3-8B", "config.json")] and found.config["model_type"] == "qwen3"
    assert found.source.startswith("hub:Qwen/Qwen3-8B")


# --- GPU memory: flag > gpu_memory > gpu_type > nodes ------------------------------------------------------


def node(name: str, memory_mib: int | None = None, product: str | None = None, gpus: int = 8,
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    found = dict(labels or {})
    if memory_mib is not None:
        found["nvidia.com/gpu.memory"] = str(memory_mib)
    if product is not None:
        found["nvidia.com/gpu.product"] = product
    return {"metadata": {"name": name, "labels": found}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


H100 = node("h100", 81559, "NVIDIA-H100-80GB-HBM3")
H200 = node("h200", 143771, "NVIDIA-H200", labels={"pool": "big"})


def never() -> list[dict[str, Any]]:
    raise AssertionError("the nodes were asked although a size was given")


def test_gpu_memory_precedence():
    both = ClusterSpec(gpu=8, gpu_memory="141GB", gpu_type="H100")
    assert resolve_gpu_memory("40Gi", both, never).memory.bytes == 40 * GIB  # the flag first
    choice = resolve_gpu_memory(None, both, never)
    assert (choice.memory.bytes, choice.source) == (141 * 10**9, "gpu_memory")
    choice = resolve_gpu_memory(None, ClusterSpec(gpu=8, gpu_type="NVIDIA-A100-SXM4-40GB"), never)
    assert (choice.memory.bytes, choice.source) == (40960 * 2**20, "gpu_type")
    choice = resolve_gpu_memory(None, ClusterSpec(gpu=8), lambda: [H100])
    assert (choice.memory.bytes, choice.source) == (81559 * 2**20, "nodes")
    choice = resolve_gpu_memory(None, ClusterSpec(gpu=8), None)  # a dry run asks no node
    assert choice.memory is None and "--gpu-memory" in choice.notes[0]


def test_the_nodes_the_run_can_land_on():
    mixed = [H100, H200, node("cpu"), node("small", 23028, "NVIDIA-A10G", gpus=1)]
    choice = resolve_gpu_memory(None, ClusterSpec(gpu=8), lambda: mixed)
    assert choice.memory.bytes == 143771 * 2**20 and "differ" in choice.notes[0]  # the A10G node has 1 GPU
    choice = resolve_gpu_memory(None, ClusterSpec(gpu=8, node_selector={"pool": "big"}), lambda: mixed)
    assert choice.memory.bytes == 143771 * 2**20 and not choice.notes
    choice = resolve_gpu_memory(None, ClusterSpec(gpu=8, gpu_type="H100-80GB-HBM3"), lambda: mixed)
    assert choice.memory.bytes == 81559 * 2**20  # gpu_type in cw's table: no node asked
    choice = resolve_gpu_memory(None, ClusterSpec(gpu=8, gpu_type="GH100-custom"), lambda: [H100, H200])
    assert choice.memory is None and "not in cw's table" in choice.notes[0]


@pytest.mark.parametrize("error, said", [(Forbidden("no"), "forbidden"), (ClusterUnreachable("down"), "did not answer")])
def test_nodes_that_cannot_be_read_leave_the_memory_unknown(error, said):
    def fail():
        raise error

    choice = resolve_gpu_memory(None, ClusterSpec(gpu=8), fail)
    assert choice.memory is None and said in choice.notes[0]


def test_a_bad_gpu_memory_is_refused():
    with pytest.raises(ValueError):
        resolve_gpu_memory("lots", ClusterSpec(gpu=1))
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ClusterSpec(gpu_memory="80 potatoes")


# --- the estimate, the verdict and the refusal ---------------------------------------------------------


BIG = {"model_name_or_path": "Qwen/Qwen2.5-32B", "dataset_name": "d", "model_init_kwargs": {"dtype": "bfloat16"},
       "per_device_train_batch_size": 2, "max_length": 2048}  # fmt: skip


def test_a_32b_full_fine_tune_on_one_80gb_gpu_is_clearly_too_big(tmp_path):
    cache = hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-32B")
    result = estimate_run(TRL, "sft", BIG, ClusterSpec(gpu=1), tmp_path, EstimateOptions(gpu_memory="80GB"), cache_dirs=[cache])
    assert result.estimate is not None and result.fits is False and result.clearly_too_big
    # 16 bytes per parameter of model states alone: 32.8e9 x 16 = 524 GB
    assert result.estimate.trainer.per_gpu_bytes > 32 * 10**9 * 8
    keys = [s.key for s in result.suggestions]
    assert keys and "qlora" in keys
    changes = dict(zip(keys, result.changes))
    assert changes["qlora"] == ("use_peft: true", "load_in_4bit: true")
    assert all(s.per_gpu_bytes <= 80 * 10**9 for s in result.suggestions)


def test_open_r1s_distill_recipe_fits_the_eight_80gb_gpus_it_trained_on(tmp_path):
    """open-r1's OpenR1-Distill-7B recipe (32k tokens, 2 per device, ZeRO-3) trained on one node of 8
    devices (its global batch, 128 = 2 x 8 accumulation x 8) of 80 GB. Counting transformers' fp32
    loss buffers put it at ~150 GiB per GPU and refused it; TRL 1.16's fused LM head holds no logits."""
    native, _, base = corpus_run("openr1-sft-openr1-distill-7b.yaml", "trl", "sft")
    native = {**native, "model_name_or_path": "Qwen/Qwen2.5-7B", "accelerate_config": "zero3"}  # same shape as Qwen2.5-Math-7B
    cache = hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-7B")
    result = estimate_run(TRL, "sft", native, ClusterSpec(gpu=8), base, EstimateOptions(gpu_memory="80GB"), cache_dirs=[cache])
    trainer = result.estimate.trainer
    assert result.fits and not result.clearly_too_big
    assert trainer.logits_bytes < 8 * GIB  # the full fp32 logits of 2 x 32,768 tokens would be ~111 GiB
    assert trainer.per_gpu_bytes < 70 * GIB


def test_a_run_within_the_error_band_is_not_refused(tmp_path):
    cache = hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-7B")
    native = {**BIG, "model_name_or_path": "Qwen/Qwen2.5-7B", "use_peft": True, "per_device_train_batch_size": 1}
    result = estimate_run(TRL, "sft", native, ClusterSpec(gpu=1), None, EstimateOptions(gpu_memory=80), cache_dirs=[cache])
    need = result.estimate.trainer.per_gpu_bytes
    # a GPU just below the need: does not fit, but within the band a launch is not refused
    tight = estimate_run(TRL, "sft", native, ClusterSpec(gpu=1), None, EstimateOptions(gpu_memory=f"{need * 0.95 / 2**20:.0f}MiB"),
                         cache_dirs=[cache])  # fmt: skip
    assert tight.fits is False and not tight.clearly_too_big
    small = estimate_run(TRL, "sft", native, ClusterSpec(gpu=1), None, EstimateOptions(gpu_memory=f"{need * 0.8 / 2**20:.0f}MiB"),
                         cache_dirs=[cache])  # fmt: skip
    assert small.clearly_too_big  # past 1 / (1 + 0.15)
    assert REFUSAL_HEADROOM == -0.15


def test_json_keys_are_stable(tmp_path):
    cache = hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-32B")
    data = estimate_run(TRL, "sft", BIG, ClusterSpec(gpu=1), None, EstimateOptions(gpu_memory="80GB"), cache_dirs=[cache]).to_dict()
    assert tuple(data) == JSON_KEYS
    assert tuple(data["verdict"]) == VERDICT_KEYS and tuple(data["verdict"]["roles"][0]) == ROLE_KEYS
    assert tuple(data["suggestions"][0]) == SUGGESTION_KEYS
    assert data["parameters"] == 32_763_876_352 and data["trainer"]["per_gpu_bytes"] > 0
    assert data["gpu_memory_bytes"] == 80 * 10**9 and data["verdict"]["clearly_too_big"] is True
    json.dumps(data)  # plain JSON
    skipped = estimate_run(TRL, "sft", BIG, ClusterSpec(gpu=1), cache_dirs=[tmp_path / "none"]).to_dict()
    assert tuple(skipped) == JSON_KEYS and skipped["estimated"] is False and skipped["verdict"] is None
    assert "not found" in skipped["skipped"]


def test_unknown_gpu_memory_gives_an_estimate_without_a_verdict(tmp_path):
    cache = hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-32B")
    result = estimate_run(TRL, "sft", BIG, ClusterSpec(gpu=1), cache_dirs=[cache])
    assert result.estimate is not None and result.verdict is None and result.fits is None
    assert not result.clearly_too_big and "GPU memory unknown" in result.summary()


# --- the CLI ------------------------------------------------------------------------------------------


@pytest.fixture
def cw():
    from cw_cli.cli.app import build_app

    runner = CliRunner()
    return lambda *args: runner.invoke(build_app(builtin_registry()), [str(a) for a in args])


def big_config(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"gpu": 1, "checkpoint_volume": "none", **BIG, **extra}))
    return path


def test_cw_estimate_prints_every_term_and_the_verdict(cw, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-32B")))
    result = cw("estimate", "trl", "sft", big_config(tmp_path), "--gpu-memory", "80GB")
    assert result.exit_code == 0, result.output
    for term in ("weights", "gradients", "optimizer states", "activations (as configured)",
                 "without gradient checkpointing", "logits and loss buffers", "per GPU", "does not fit",
                 "train QLoRA", "use_peft: true"):  # fmt: skip
        assert term in result.stdout, term
    result = cw("estimate", "trl", "sft", big_config(tmp_path), "--gpu-memory", "80GB", "--gpu", "8", "-o", "json")
    data = json.loads(result.stdout)
    assert tuple(data) == JSON_KEYS and data["setup"]["gpus_per_node"] == 8  # launch options apply


def test_cw_estimate_without_a_cluster_says_the_memory_is_unknown(cw, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-32B")))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    result = cw("estimate", "trl", "sft", big_config(tmp_path), "-o", "json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["estimated"] and data["verdict"] is None
    assert any("the cluster did not answer" in note for note in data["notes"])


def test_a_dry_run_prints_the_verdict_and_does_not_refuse(cw, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-32B")))
    result = cw("trl", "sft", big_config(tmp_path), "--dry-run", "--gpu-memory", "80GB")
    assert result.exit_code == 0
    assert "does not fit (clearly)" in result.stderr and "fits with: train QLoRA" in result.stderr
    result = cw("trl", "sft", big_config(tmp_path, gpu_memory="80GB"), "--dry-run")  # the config's field
    assert "does not fit (clearly)" in result.stderr


def test_a_dry_run_without_the_model_config_skips_with_a_note(cw, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    result = cw("trl", "sft", big_config(tmp_path), "--dry-run")
    assert result.exit_code == 0 and "memory estimate skipped: config.json of Qwen/Qwen2.5-32B not found" in result.stderr


def test_launch_and_estimate_share_the_launch_options():
    from cw_cli.cli.estimate import estimate_command
    from cw_cli.cli.run import make_run_command

    launch = make_run_command(builtin_registry(), "trl", "sft", "")
    names = {p.name for p in estimate_command.params}
    shared = {"config", "gpu", "cpu", "memory", "image", "nodes", "name", "pull", "set", "namespace", "context",
              "gpu_memory"}  # fmt: skip
    assert shared <= names and shared <= {p.name for p in launch.params}
    assert "force" in {p.name for p in launch.params}


# --- the pre-launch check (api), without a cluster -------------------------------------------------------


class FakeKube:
    """Answers the node list; anything else would be a launch."""

    namespace = "default"
    host = "fake"

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.calls: list[str] = []

    def list(self, kind: str, **_: Any) -> list[dict[str, Any]]:
        self.calls.append(f"list {kind}")
        assert kind == "Node"
        return self.nodes

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the launch went on to call Kube.{name}")


def test_session_check_refuses_before_anything_and_force_only_reports(tmp_path, monkeypatch):
    from cw_cli import api

    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-32B")))
    session = api.Session(registry=builtin_registry())
    fake = FakeKube([H100])
    session._kube = fake  # type: ignore[assignment]
    planned = api.plan(big_config(tmp_path), "trl", "sft", registry=builtin_registry())
    with pytest.raises(api.WontFit) as refused:
        session.submit(planned, check_memory=True)
    assert fake.calls == ["list Node"]  # one request, then nothing
    error = refused.value
    assert error.exit_code == 2 and "would run out of GPU memory" in error.message
    assert any(line.startswith("trainer needs") for line in error.issues)
    assert any(line.startswith("fits with:") for line in error.issues) and "--force" in error.hint
    said: list[str] = []
    result = session.check_memory(planned, force=True, progress=said.append)
    assert result.clearly_too_big and "--force: launching anyway" in said[0]
    assert fake.calls == ["list Node"]  # the node list is read once per session


def test_cw_schema_shows_the_new_fields(cw):
    properties = json.loads(cw("schema").stdout)["properties"]
    assert "gpu_memory" in properties and "estimate" in properties["gpu_memory"]["description"]
    assert "gpu_type" in properties and "nvidia.com/gpu.product" in properties["gpu_type"]["description"]


_READS_CONFIG_PROBE = """
import sys
from pathlib import Path
from cw_cli.config.models import ClusterSpec
from cw_cli.config.options import EstimateOptions
from cw_cli.estimate.from_config import estimate_run
from cw_cli.frameworks.trl import TRLFramework
result = estimate_run(TRLFramework(), "sft", {"model_name_or_path": sys.argv[1]}, ClusterSpec(gpu=1), Path(sys.argv[2]),
                      EstimateOptions(allow_meta_device=False), cache_dirs=[])
print(result.estimate is not None, "cw_cli.frameworks.trl.setup" in sys.modules)
"""


def test_a_model_not_found_here_costs_no_framework_config_reading(tmp_path):
    """A dry run whose model's config.json is not local skips the estimate without loading its readers."""
    import subprocess
    import sys

    model = tmp_path / "tiny"
    model.mkdir()
    shutil.copy(MODELS / "Qwen__Qwen2.5-3B.json", model / "config.json")

    def probe(name: str) -> str:
        done = subprocess.run([sys.executable, "-c", _READS_CONFIG_PROBE, name, str(tmp_path)],
                              capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert probe("not-here/model") == "False False"
    assert probe("tiny") == "True True"  # the control: a found model reads the config
