"""The memory estimate against other estimators, published measurements and its own physics.

- Accelerate's ``estimate-memory`` (weights, and its Adam training figure), run on the same
  model built on the meta device.
- DeepSpeed's published ZeRO model-state estimators, transcribed below with their source.
- Published measured peak memory (tests/fixtures/memory_reference/published.json).
- Properties: more tokens, rank or batch never need less; sharding, checkpointing, LoRA,
  offloading and more GPUs never need more.
- GPU memory from product names and node labels; fits/suggestions; the JSON form.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# the train extra: the comparisons run the libraries themselves (a missing one fails CI)
import accelerate  # noqa: E402
import pytest
import torch  # noqa: E402
import transformers  # noqa: E402
from accelerate.commands.estimate import (  # noqa: E402
    calculate_maximum_sizes,
    estimate_training_usage,
)
from msgspec.structs import replace

from cw_cli.estimate import (
    TrainingSetup,
    VllmSetup,
    count_parameters,
    estimate_memory,
    fits,
    gpu_memory_from_node,
    gpu_memory_from_nodes,
    gpu_memory_from_product,
    kv_bytes_per_token,
    parse_memory,
    suggestions,
)
from cw_cli.estimate.activations import ComputeSetup, logits_bytes_per_token
from cw_cli.estimate.memory import GIB, TrainerMemory
from cw_cli.estimate.shapes import model_shape

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIGS = FIXTURES / "model_configs"
REFERENCE = FIXTURES / "memory_reference"
MIB = 1024**2


def _config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


LLAMA8 = _config("meta-llama__Llama-3.1-8B")
DENSE = ["meta-llama__Llama-3.1-8B", "meta-llama__Llama-3.2-3B", "Qwen__Qwen2.5-7B",
         "mistralai__Mistral-7B-Instruct-v0.1"]


def _meta_model(config: dict[str, Any]) -> Any:
    """The model as Accelerate's estimator builds it: empty weights, fp32."""
    fields = {k: v for k, v in config.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with accelerate.init_empty_weights():
        return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def _model_states(t: TrainerMemory) -> int:
    return (t.weights_bytes + t.gradients_bytes + t.optimizer_states_bytes
            + t.master_weights_bytes + t.optimizer_step_bytes + t.gathered_weights_bytes)


# --- Accelerate ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", DENSE)
def test_weights_and_fp32_adam_equal_accelerate(name: str) -> None:
    config = _config(name)
    model = _meta_model(config)
    total, _largest = calculate_maximum_sizes(model)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())  # RoPE's inv_freq
    # With transformers 5, Accelerate's init_empty_weights loses the tie of a tied LM head
    # (Llama-3.2-3B): its model has the head twice. cw counts the head once, as the real model.
    head = model.get_output_embeddings().weight
    untied = config.get("tie_word_embeddings") and head is not model.get_input_embeddings().weight
    twice = head.numel() * 4 if untied else 0
    t = estimate_memory(config, TrainingSetup(weight_dtype="fp32", mixed_precision="no")).trainer
    assert t.weights_bytes == total - buffers - twice
    # Accelerate's "Training using Adam" in fp32: the largest of its terms, 4 × the model
    adam = max(estimate_training_usage(total - twice, "float32").values())
    assert t.weights_bytes + t.gradients_bytes + t.optimizer_states_bytes == pytest.approx(
        adam, rel=1e-6)


@pytest.mark.parametrize("name", DENSE)
def test_mixed_precision_terms_against_accelerate(name: str) -> None:
    """Accelerate's bf16 terms: model 4Ψ, gradients 1.5 × 4Ψ ("weight gradient + computation"),
    optimizer 8Ψ. cw's weights and optimizer states must equal them; its gradients plus the
    bf16 weight copies autocast keeps must come within 5% of Accelerate's 6Ψ (cw copies only
    what a matmul uses: not the input embedding or the norms)."""
    config = _config(name)
    model = _meta_model(config)
    total, _ = calculate_maximum_sizes(model)
    if config.get("tie_word_embeddings"):  # see above: Accelerate's model has the head twice
        total -= model.get_output_embeddings().weight.numel() * 4
    acc = estimate_training_usage(total, "bfloat16")
    t = estimate_memory(config, TrainingSetup(weight_dtype="fp32", mixed_precision="bf16")).trainer
    assert t.weights_bytes == pytest.approx(acc["model"], rel=1e-6)
    assert t.optimizer_states_bytes == pytest.approx(acc["optimizer"], rel=1e-6)
    assert t.gradients_bytes + t.weight_copies_bytes == pytest.approx(acc["gradients"], rel=0.05)


# --- DeepSpeed ----------------------------------------------------------------------------
# Transcribed from DeepSpeed's estimators (GPU part), documented at
# https://deepspeed.readthedocs.io/en/latest/memory.html ("API To Estimate Memory Usage"), code in
# https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/zero/stage_1_and_2.py
# (estimate_zero2_model_states_mem_needs) and .../zero/stage3.py
# (estimate_zero3_model_states_mem_needs). Bytes per GPU; fp16/bf16 training with Adam.


def ds_zero2_gpu(total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
                 cpu_offload: bool = True) -> int:
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        return int(2 * total_params)
    return int(4 * total_params + int(16 * total_params / total_gpus))


def ds_zero3_gpu(total_params: int, largest_layer_params: int, num_gpus_per_node: int = 1,
                 num_nodes: int = 1, cpu_offload: bool = True,
                 cpu_offload_params: bool = True) -> int:
    total_gpus = num_nodes * num_gpus_per_node
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            return int(largest_layer_memory)
        return int(largest_layer_memory + int(2 * total_params / total_gpus))
    return int(largest_layer_memory + int(18 * total_params / total_gpus))


def _largest_layer(model: Any) -> int:
    """DeepSpeed's ``largest_layer_params``: the biggest module's own parameters."""
    return max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())


# (stage, gpus, offload optimizer, offload params, allowed cw/DeepSpeed range, why)
DS_CASES = [
    (2, 1, False, False, (0.99, 1.01), "one GPU: 2+2+12 bytes and the fp32 step gradient"),
    (2, 8, True, False, (0.99, 1.01), "offload: only the 16-bit weights stay"),
    (3, 8, True, True, (0.99, 1.01), "offload all: the gathered largest layer"),
    (3, 8, True, False, (0.99, 1.01), "offload optimizer: 16-bit shard + gathered layer"),
    (2, 8, False, False, (0.6, 0.8),
     "DeepSpeed counts full 16-bit gradients (4Ψ); ZeRO-2 keeps a 1/N partition "
     "(the ZeRO paper's 2Ψ + 14Ψ/N), which cw follows"),
    (3, 8, False, False, (1.0, 1.15),
     "cw adds the 16-bit gradient shard and the fp32 gradient partition of the step "
     "(20Ψ/N against DeepSpeed's 18Ψ/N)"),
    (3, 64, False, False, (1.0, 1.15), "as above, on 8 nodes"),
]


@pytest.mark.parametrize(("stage", "gpus", "off_opt", "off_params", "band", "why"), DS_CASES)
def test_model_states_against_deepspeed(stage: int, gpus: int, off_opt: bool, off_params: bool,
                                        band: tuple[float, float], why: str) -> None:
    total = count_parameters(LLAMA8).total_parameters
    largest = _largest_layer(_meta_model(LLAMA8))
    per_node = min(gpus, 8)
    setup = TrainingSetup(zero_stage=stage, gpus_per_node=per_node, nodes=gpus // per_node,
                          offload_optimizer=off_opt, offload_params=off_params,
                          weight_dtype="bf16", mixed_precision="bf16")
    cw = _model_states(estimate_memory(LLAMA8, setup).trainer)
    if stage == 2:
        ds = ds_zero2_gpu(total, per_node, gpus // per_node, cpu_offload=off_opt)
    else:
        ds = ds_zero3_gpu(total, largest, per_node, gpus // per_node, cpu_offload=off_opt,
                          cpu_offload_params=off_params)
    assert band[0] <= cw / ds <= band[1], why


# --- published measurements -----------------------------------------------------------------

PUBLISHED = json.loads((REFERENCE / "published.json").read_text())


def test_liger_lm_head_cross_entropy_benchmark() -> None:
    """The logits/loss model: three vocabulary-sized buffers in the logits' dtype when the loss
    does not upcast (transformers' loss upcasts: three fp32 buffers)."""
    ref = PUBLISHED["liger_lm_head_cross_entropy"]
    h, v = ref["hidden"], ref["vocab"]
    shape = model_shape({"model_type": "llama", "hidden_size": h, "num_hidden_layers": 1,
                         "num_attention_heads": 32, "vocab_size": v})
    per_token = logits_bytes_per_token(shape, ComputeSetup(compute_bytes=2), upcast=False)
    for point in ref["points"]:
        bt = point["bt"]
        # the benchmark's own tensors: two bf16 lm_head weights (torch's and Liger's), the
        # input, int64 targets; from the second of its 10 calls the weight's and the input's
        # gradients persist (no zero_grad)
        first = 2 * v * h * 2 + bt * h * 2 + bt * 8 + bt * per_token
        later = first + v * h * 2 + bt * h * 2
        estimate = (first + 9 * later) / 10
        ratio = estimate / (point["measured"] * MIB)
        assert abs(ratio - 1) <= ref["tolerance"], (bt, ratio)


def test_qwen_7b_lora_profile() -> None:
    ref = PUBLISHED["qwen_7b_lora"]
    config = json.loads((REFERENCE / ref["config"]).read_text())
    assert count_parameters(config).total_parameters == 7_721_324_544  # Qwen-7B's 7.7B
    for point in ref["points"]:
        setup = TrainingSetup(
            method="lora", lora_rank=64, lora_targets="all-linear", lora_dropout=0.05,
            train_embeddings=point["method"] == "lora_emb", weight_dtype="bf16",
            adapter_dtype="bf16", mixed_precision="bf16", optimizer="adamw_torch",
            micro_batch=1, gradient_accumulation=8, seq_len=point["seq_len"], packing=True,
            attention="flash_attention_2", gradient_checkpointing=True,
        )
        estimate = estimate_memory(config, setup).trainer.per_gpu_bytes
        ratio = estimate / (point["measured"] * GIB)
        assert abs(ratio - 1) <= ref["tolerance"], (point, ratio)


# --- properties ---------------------------------------------------------------------------


def _per_gpu(config: dict[str, Any], **kw: Any) -> int:
    return estimate_memory(config, TrainingSetup(**kw)).trainer.per_gpu_bytes


@pytest.mark.parametrize("name", DENSE + ["Qwen__Qwen3-30B-A3B", "google__gemma-7b-it"])
def test_monotonic_in_tokens_batch_and_rank(name: str) -> None:
    config = _config(name)
    for method in ("full", "lora"):
        for ckpt in (False, True):
            kw = {"method": method, "gradient_checkpointing": ckpt}
            by_len = [_per_gpu(config, seq_len=n, **kw) for n in (256, 1024, 4096, 16384)]
            assert by_len == sorted(by_len) and by_len[0] < by_len[-1]
            by_batch = [_per_gpu(config, micro_batch=b, **kw) for b in (1, 2, 4, 8)]
            assert by_batch == sorted(by_batch) and by_batch[0] < by_batch[-1]
    by_rank = [_per_gpu(config, method="lora", lora_rank=r) for r in (4, 16, 64, 256)]
    assert by_rank == sorted(by_rank) and by_rank[0] < by_rank[-1]


@pytest.mark.parametrize("name", DENSE + ["Qwen__Qwen3-30B-A3B"])
def test_sharding_checkpointing_lora_and_offload_never_cost_more(name: str) -> None:
    config = _config(name)
    zero = {s: _per_gpu(config, zero_stage=s, gpus_per_node=8) for s in (0, 1, 2, 3)}
    # ZeRO-1 and -2 differ by the gradients, which (one micro-batch per step) are not alive
    # yet at the loss, where the peak may be: equal there, never more
    assert zero[3] < zero[2] <= zero[1] < zero[0]
    states = [_model_states(estimate_memory(config, TrainingSetup(zero_stage=s, gpus_per_node=8))
                            .trainer) for s in (0, 1, 2, 3)]
    assert states == sorted(states, reverse=True) and len(set(states)) == 4
    assert _per_gpu(config, fsdp=True, gpus_per_node=8) < zero[1]
    assert _per_gpu(config, zero_stage=3, gpus_per_node=8, nodes=4) < zero[3]
    assert _per_gpu(config, zero_stage=3, gpus_per_node=8, offload_optimizer=True) < zero[3]
    for method in ("full", "lora"):
        t = {c: estimate_memory(config, TrainingSetup(method=method, seq_len=4096,
                                                      gradient_checkpointing=c)).trainer
             for c in (False, True)}
        assert t[True].activations_bytes < t[False].activations_bytes
        # when every gradient at the end of backward is the peak, checkpointing cannot lower it
        assert t[True].per_gpu_bytes <= t[False].per_gpu_bytes
        assert t[True].activations_no_checkpointing_bytes == t[False].activations_bytes
    full = _per_gpu(config, method="full")
    lora = _per_gpu(config, method="lora")
    qlora = _per_gpu(config, method="qlora")
    assert qlora < lora < full


def test_fp32_weights_cost_more_than_bf16() -> None:
    assert _per_gpu(LLAMA8, weight_dtype="fp32") > _per_gpu(LLAMA8, weight_dtype="bf16")
    assert _per_gpu(LLAMA8, optimizer="adamw_8bit") < _per_gpu(LLAMA8)


# --- vLLM ---------------------------------------------------------------------------------


def test_kv_cache_of_llama_31_8b() -> None:
    # 2 (K, V) × 32 layers × 8 KV heads × 128 dims × 2 bytes: the 128 KiB per token vLLM and
    # NVIDIA's KV-cache guides quote for Llama 3 8B
    assert kv_bytes_per_token(model_shape(LLAMA8), 2) == 128 * 1024
    assert kv_bytes_per_token(model_shape(LLAMA8), 2, tensor_parallel=2) == 64 * 1024
    v = estimate_memory(LLAMA8, TrainingSetup(), VllmSetup(max_model_len=8192), 80 * GIB).vllm
    assert v is not None and v.kv_cache_tokens is not None and v.max_sequences is not None
    assert v.kv_cache_tokens * v.kv_bytes_per_token <= v.kv_cache_bytes
    assert v.max_sequences == v.kv_cache_tokens // 8192
    assert v.per_gpu_bytes == int(0.9 * 80 * GIB)


def test_colocated_vllm_takes_its_share_of_the_trainers_gpu() -> None:
    setup = TrainingSetup(method="lora", num_generations=8, micro_batch=8,
                          gradient_checkpointing=True)
    alone = fits(estimate_memory(LLAMA8, setup, None, 80 * GIB), 80 * GIB)
    v = VllmSetup(mode="colocate", gpu_memory_utilization=0.3, max_model_len=1024)
    shared = fits(estimate_memory(LLAMA8, setup, v, 80 * GIB), 80 * GIB)
    trainer = {r.role: r for r in shared.roles}["trainer"]
    assert trainer.required_bytes == alone.roles[0].required_bytes + int(0.3 * 80 * GIB)


def test_vllm_that_cannot_hold_one_sequence_is_refused_and_fixed() -> None:
    setup = TrainingSetup(method="lora", num_generations=8, max_prompt_length=512,
                          max_completion_length=1024, gradient_checkpointing=True)
    v = VllmSetup(mode="colocate", gpu_memory_utilization=0.3)  # max_model_len: 131072
    verdict = fits(estimate_memory(LLAMA8, setup, v, 80 * GIB), 80 * GIB)
    assert not {r.role: r for r in verdict.roles}["vllm"].fits
    keys = {s.key for s in suggestions(LLAMA8, setup, 80 * GIB, v)}
    assert "vllm_max_model_len" in keys


# --- fits and suggestions -----------------------------------------------------------------


def test_suggestions_fit_when_re_estimated() -> None:
    setup = TrainingSetup(weight_dtype="fp32", micro_batch=4, seq_len=4096, gpus_per_node=8)
    assert not fits(estimate_memory(LLAMA8, setup), 80 * GIB).fits
    found = suggestions(LLAMA8, setup, 80 * GIB)
    assert found
    for s in found:
        assert s.setup != setup
        assert fits(estimate_memory(LLAMA8, s.setup, s.vllm, 80 * GIB), 80 * GIB).fits
        assert s.ratio <= 1


def test_single_changes_are_listed_when_they_fit() -> None:
    setup = TrainingSetup(seq_len=8192, micro_batch=2)  # full bf16, one 141 GB GPU
    gpu = 141 * 10**9
    assert not fits(estimate_memory(LLAMA8, setup), gpu).fits
    keys = [s.key for s in suggestions(LLAMA8, setup, gpu)]
    assert {"gradient_checkpointing", "micro_batch", "max_length"} <= set(keys)
    assert "lora" not in keys  # LoRA alone keeps 8k × 2 tokens of activations: too much
    per_gpu = [s.per_gpu_bytes for s in suggestions(LLAMA8, setup, gpu)]
    assert per_gpu == sorted(per_gpu)


def test_a_run_that_fits_needs_nothing() -> None:
    setup = TrainingSetup(method="lora", gradient_checkpointing=True)
    verdict = fits(estimate_memory(LLAMA8, setup), 80 * GIB)
    assert verdict.fits and verdict.worst_ratio < 1
    assert not fits(estimate_memory(LLAMA8, setup), 16 * GIB).fits
    assert fits(estimate_memory(LLAMA8, setup), 80 * GIB, headroom=0.8).fits is False


# --- GPU memory ---------------------------------------------------------------------------


@pytest.mark.parametrize(("product", "mib"), [
    ("NVIDIA-H100-80GB-HBM3", 81_559), ("NVIDIA H100 PCIe", 81_559),
    ("NVIDIA-H100-NVL", 95_830), ("NVIDIA-H200", 143_771), ("NVIDIA-B200", 183_359),
    ("NVIDIA-A100-SXM4-80GB", 81_920), ("NVIDIA-A100-SXM4-40GB", 40_960),
    ("NVIDIA-A100-PCIE-40GB", 40_960), ("NVIDIA-L40S", 46_068), ("NVIDIA-A10G", 23_028),
    ("NVIDIA-L4", 23_034), ("Tesla-T4", 15_360), ("NVIDIA-GeForce-RTX-4090", 24_564),
])
def test_products(product: str, mib: int) -> None:
    mem = gpu_memory_from_product(product)
    assert mem is not None and mem.bytes == mib * MIB and mem.source == "product"


def test_unknown_product_and_mig_slices() -> None:
    assert gpu_memory_from_product("Acme-GPU-9000") is None
    mig = gpu_memory_from_product("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb")
    assert mig is not None and mig.bytes == 40 * 1024 * MIB and mig.source == "mig"


def _node(**labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels}}


def test_node_labels() -> None:
    # the driver-reported memory label wins over the product table
    node = _node(**{"nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.product": "NVIDIA-H200"})
    mem = gpu_memory_from_node(node)
    assert mem is not None and mem.bytes == 81_559 * MIB and mem.source == "label"
    only_product = gpu_memory_from_node(_node(**{"nvidia.com/gpu.product": "NVIDIA-L40S"}))
    assert only_product is not None and only_product.bytes == 46_068 * MIB
    assert gpu_memory_from_node(_node()) is None
    assert gpu_memory_from_node({"metadata": {}}) is None
    nodes = [_node(**{"nvidia.com/gpu.product": "NVIDIA-H200"}),
             _node(**{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}), _node()]
    smallest = gpu_memory_from_nodes(nodes)
    assert smallest is not None and smallest.product == "NVIDIA-H100-80GB-HBM3"
    h200 = gpu_memory_from_nodes(nodes, product="h200")
    assert h200 is not None and h200.bytes == 143_771 * MIB
    assert gpu_memory_from_nodes([_node()]) is None


@pytest.mark.parametrize(("text", "expected"), [
    ("80GB", 80 * 10**9), ("80Gi", 80 * GIB), ("80GiB", 80 * GIB), ("81559MiB", 81_559 * MIB),
    ("80", 80 * GIB), (80, 80 * GIB), ("0.5TiB", 512 * GIB),
])
def test_parse_memory(text: Any, expected: int) -> None:
    assert parse_memory(text) == expected


def test_parse_memory_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        parse_memory("eighty")
    with pytest.raises(ValueError):
        parse_memory("80 parsecs")


# --- the API's shape ----------------------------------------------------------------------


def test_json_form_has_stable_keys() -> None:
    e = estimate_memory(LLAMA8, TrainingSetup(method="lora", num_generations=8),
                        VllmSetup(mode="server", max_model_len=4096), 80 * GIB)
    data = json.loads(json.dumps(e.to_dict()))
    assert data["parameters"] == 8_030_261_248
    assert 0 < data["trainable_parameters"] < data["parameters"]
    for key in ("weights_bytes", "gradients_bytes", "optimizer_states_bytes",
                "master_weights_bytes", "activations_bytes", "activations_checkpointing_bytes",
                "activations_no_checkpointing_bytes", "logits_bytes", "overhead_bytes",
                "per_gpu_bytes", "peak_phase"):
        assert key in data["trainer"]
    assert data["trainer"]["role"] == "trainer" and data["vllm"]["role"] == "vllm"
    for key in ("weights_bytes", "kv_bytes_per_token", "kv_cache_tokens", "max_sequences",
                "per_gpu_bytes"):
        assert key in data["vllm"]


def test_unknown_setup_values_are_refused() -> None:
    with pytest.raises(ValueError):
        estimate_memory(LLAMA8, TrainingSetup(method="prefix"))
    with pytest.raises(ValueError):
        estimate_memory(LLAMA8, TrainingSetup(weight_dtype="fp64"))
    e = estimate_memory(LLAMA8, TrainingSetup(optimizer="shampoo"))
    assert any("shampoo" in n for n in e.notes)


def test_cheap_and_free_of_torch() -> None:
    code = ("import sys, time, json; t = time.perf_counter(); import cw_cli.estimate as e; "
            "c = json.load(open(sys.argv[1])); e.estimate_memory(c, e.TrainingSetup()); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; "
            "print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code, str(CONFIGS / "Qwen__Qwen3-30B-A3B.json")],
                         capture_output=True, text=True, check=True)
    assert float(out.stdout) < 2.0  # the import and one estimate; measured ~0.06 s
    t0 = time.perf_counter()
    for _ in range(20):
        suggestions(LLAMA8, TrainingSetup(seq_len=16384, micro_batch=4), 80 * GIB)
    assert (time.perf_counter() - t0) / 20 < 0.5


def test_replace_keeps_setups_frozen() -> None:
    s = TrainingSetup()
    assert replace(s, micro_batch=2).micro_batch == 2 and s.micro_batch == 1
