"""Model-state bytes from the estimate equal what a real training step holds (issue 13).

Tiny random models of real families (Llama, Qwen2 with tied embeddings, Qwen3-MoE) are built
on CPU, one real optimizer step is taken (full fine-tune with torch AdamW, LoRA through PEFT),
and the bytes of the model's parameters, of their ``.grad`` and of the optimizer's state tensors
are summed and compared with the estimate's ``weights_bytes``, ``gradients_bytes`` and
``optimizer_states_bytes``.

The only allowed difference is AdamW's ``step`` counter: torch keeps one fp32 scalar tensor
per parameter tensor (4 bytes each, a few hundred bytes for these models, a few KB for a real
one), which the estimate leaves out; the test removes exactly those bytes before comparing.
"""

from __future__ import annotations

from typing import Any

import peft  # noqa: E402 - the train extra: a missing one fails CI instead of skipping
import pytest
import torch  # noqa: E402
import transformers  # noqa: E402

from cw_cli.estimate import TrainingSetup, estimate_memory

pytestmark = pytest.mark.training

TINY = {
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 128,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen2": {"tie_word_embeddings": True},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                  "head_dim": 16},
}
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def _model(model_type: str, dtype: str) -> Any:
    cfg = transformers.AutoConfig.for_model(model_type, **TINY, **FAMILIES[model_type])
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).to(getattr(torch, DTYPES[dtype]))


def _config_json(model: Any) -> dict[str, Any]:
    """The model's config as its config.json would hold it."""
    cfg = model.config.to_dict()
    cfg["model_type"] = model.config.model_type
    return cfg


def _step(model: Any, optimizer: Any) -> None:
    ids = torch.randint(3, TINY["vocab_size"], (2, 16))
    model.train()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()


def _held(model: Any, optimizer: Any) -> dict[str, int]:
    """Bytes of unique parameters, of gradients and of optimizer states (minus step counters)."""
    params = {p.data_ptr(): p for p in model.parameters()}
    weights = sum(p.numel() * p.element_size() for p in params.values())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params.values()
                if p.grad is not None)
    states = steps = 0
    for state in optimizer.state.values():
        for name, value in state.items():
            if not torch.is_tensor(value):
                continue
            size = value.numel() * value.element_size()
            if name == "step":
                steps += size
            else:
                states += size
    assert steps <= 4 * len(params)  # one fp32 scalar per parameter tensor at most
    return {"weights": weights, "gradients": grads, "optimizer_states": states}


def _estimated(config: dict[str, Any], setup: TrainingSetup) -> dict[str, int]:
    t = estimate_memory(config, setup).trainer
    return {
        "weights": t.weights_bytes,
        "gradients": t.gradients_bytes,
        "optimizer_states": t.optimizer_states_bytes,
    }


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_full_fine_tune_with_adamw(model_type: str, dtype: str) -> None:
    model = _model(model_type, dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    _step(model, optimizer)
    setup = TrainingSetup(method="full", weight_dtype=dtype, mixed_precision="no",
                          optimizer="adamw_torch")
    assert _held(model, optimizer) == _estimated(_config_json(model), setup)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_full_fine_tune_with_sgd_keeps_no_state(model_type: str) -> None:
    model = _model(model_type, "bf16")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    _step(model, optimizer)
    setup = TrainingSetup(method="full", weight_dtype="bf16", mixed_precision="no",
                          optimizer="sgd")
    assert _held(model, optimizer) == _estimated(_config_json(model), setup)


LORA = [
    ("llama", 8, ["q_proj", "v_proj"]),
    ("llama", 16, "all-linear"),
    ("qwen2", 4, ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"]),
    ("qwen3_moe", 8, "all-linear"),
    ("qwen3_moe", 8, ["q_proj", "v_proj"]),
]


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize(("model_type", "rank", "targets"), LORA,
                         ids=lambda v: str(v) if not isinstance(v, list) else "+".join(v))
def test_lora_through_peft(model_type: str, rank: int, targets: Any, dtype: str) -> None:
    model = _model(model_type, dtype)
    config = _config_json(model)
    # PEFT's defaults: adapters upcast to fp32 (autocast_adapter_dtype=True), base frozen
    model = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=targets))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, foreach=False)
    _step(model, optimizer)
    setup = TrainingSetup(method="lora", lora_rank=rank,
                          lora_targets=targets if isinstance(targets, str) else tuple(targets),
                          weight_dtype=dtype, mixed_precision="no", optimizer="adamw_torch")
    assert _held(model, optimizer) == _estimated(config, setup)


def test_adapter_dtype_can_follow_the_base() -> None:
    model = _model("llama", "bf16")
    config = _config_json(model)
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules="all-linear"),
                                autocast_adapter_dtype=False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4,
                                  foreach=False)
    _step(model, optimizer)
    setup = TrainingSetup(method="lora", lora_rank=8, weight_dtype="bf16", adapter_dtype="bf16",
                          mixed_precision="no", optimizer="adamw_torch")
    assert _held(model, optimizer) == _estimated(config, setup)
