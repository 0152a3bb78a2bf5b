"""`cw serve`'s vLLM command is derived from what the run really left, read by the pod-side lister
(cw_artifacts.py) from folders saved by transformers and peft themselves: a LoRA adapter is served
on its base with vLLM's LoRA flags under the run's name, a full model under the run's name; the
tensor parallelism divides the GPUs and the attention heads, the context is the model's (capped)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cw_cli.errors import ConfigError
from cw_cli.render.helper_pods import (
    MAX_MODEL_LEN_CAP,
    ServedModel,
    serve_parallelism,
    served_model,
    vllm_command,
)
from cw_cli.runtime.cw_artifacts import list_artifacts

HEADS, KV_HEADS, POSITIONS = 6, 2, 65536


@pytest.fixture(scope="module")
def volume(tmp_path_factory) -> Path:
    """A volume root with a tiny Llama (the base) and two runs: one LoRA, one full fine-tune."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("volume")
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, vocab_size=128, max_position_embeddings=POSITIONS)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(root / "base")
    base = LlamaForCausalLM.from_pretrained(root / "base")
    base.name_or_path = "my-org/tiny-llama"  # as when the trainer loaded it from the Hub
    adapter = get_peft_model(base, LoraConfig(r=12, lora_alpha=24, target_modules=["q_proj", "v_proj"]))
    # The final model: the adapter beside its checkpoints (peft need not ask the Hub about embeddings).
    adapter.save_pretrained(root / "lora" / "out", save_embedding_layers=False)
    LlamaForCausalLM(config).save_pretrained(root / "full" / "out")
    return root


def _final(root: Path, run_dir: str) -> dict:
    cwd = os.getcwd()
    os.chdir(root)  # the lister runs from the volume's root, as in the reader pod
    try:
        listing = list_artifacts(run_dir)
    finally:
        os.chdir(cwd)
    return next(a for a in listing["artifacts"] if a["kind"] == "final")


def test_a_lora_runs_final_model_is_served_on_its_base_with_the_adapter_under_the_runs_name(volume):
    entry = _final(volume, "lora/out")
    assert entry["adapter"] is True
    assert entry["model"]["base"] == "my-org/tiny-llama" and entry["model"]["lora_rank"] == 12
    command = vllm_command("lora", served_model(entry), gpus=1)
    assert command == ["vllm", "serve", "my-org/tiny-llama", "--enable-lora", "--lora-modules", "lora=/checkpoints/lora/out",
                       "--max-lora-rank", "16", "--host", "0.0.0.0", "--port", "8000"]  # fmt: skip


def test_an_adapters_base_on_the_volume_gives_its_heads_and_context(volume):
    """The lister reads an adapter's base's config.json where the base is a folder it can read."""
    adapter_config = volume / "lora" / "out" / "adapter_config.json"
    saved = adapter_config.read_text()
    try:
        adapter_config.write_text(json.dumps({**json.loads(saved), "base_model_name_or_path": str(volume / "base")}))
        entry = _final(volume, "lora/out")
    finally:
        adapter_config.write_text(saved)
    facts = entry["model"]
    assert (facts["heads"], facts["kv_heads"], facts["max_positions"]) == (HEADS, KV_HEADS, POSITIONS)
    # That base is a folder here, not under /checkpoints: in the server pod it would not exist.
    with pytest.raises(ConfigError, match="not on the run's volume") as refused:
        vllm_command("lora", served_model(entry), gpus=1)
    assert "cw export lora --merge" in (refused.value.hint or "")
    on_volume = ServedModel(**{**_struct(served_model(entry)), "base": "/checkpoints/base"})
    command = vllm_command("lora", on_volume, gpus=4)
    assert command[2] == "/checkpoints/base"
    assert command[-6:] == ["--tensor-parallel-size", "2", "--data-parallel-size", "2", "--max-model-len",
                            str(MAX_MODEL_LEN_CAP)]  # fmt: skip


def _struct(model: ServedModel) -> dict:
    import msgspec

    return msgspec.structs.asdict(model)


def test_a_full_model_is_served_under_the_runs_name_with_parallelism_and_context_from_its_config(volume):
    entry = _final(volume, "full/out")
    assert entry["adapter"] is False
    command = vllm_command("full", served_model(entry), gpus=2)
    assert command == ["vllm", "serve", "/checkpoints/full/out", "--served-model-name", "full", "--host", "0.0.0.0",
                       "--port", "8000", "--tensor-parallel-size", "2", "--max-model-len", str(MAX_MODEL_LEN_CAP)]  # fmt: skip
    short = ServedModel(path="/checkpoints/x", heads=HEADS, max_positions=2048)
    assert vllm_command("x", short, gpus=1)[-2:] == ["--max-model-len", "2048"]


@pytest.mark.parametrize("gpus,heads,kv_heads,expected", [
    (1, 14, 2, (1, 1)), (0, 14, 2, (1, 1)),
    (8, 32, 8, (8, 1)),   # Llama 3 8B: 32 heads, 8 key/value heads
    (8, 14, 2, (2, 4)),   # Qwen2.5 0.5B: 14 heads split 2 ways; the other GPUs serve copies
    (4, 28, 4, (4, 1)),   # Qwen2.5 7B
    (8, 40, 8, (8, 1)),
    (6, 32, 8, (2, 3)),   # 6 does not divide 32; 3 does not split 8 key/value heads
    (8, None, None, (8, 1)),  # heads unknown (a Hub base): every GPU, vLLM checks
])  # fmt: skip
def test_tensor_parallelism_divides_the_gpus_and_the_heads(gpus, heads, kv_heads, expected):
    tp, dp = serve_parallelism(gpus, heads, kv_heads)
    assert (tp, dp) == expected
    assert tp * dp == max(gpus, 1)
    if heads:
        assert heads % tp == 0
        assert (kv_heads % tp == 0) if tp <= kv_heads else (tp % kv_heads == 0)


def test_a_rank_above_vllms_largest_is_refused_with_the_merge_to_run():
    with pytest.raises(ConfigError, match="rank 1024") as refused:
        vllm_command("big", ServedModel(path="/checkpoints/big", adapter=True, base="org/m", lora_rank=1024), gpus=1)
    assert "export:final-merged" in (refused.value.hint or "")


def test_an_adapter_without_a_base_is_refused():
    with pytest.raises(ConfigError, match="names no base_model_name_or_path"):
        vllm_command("nob", ServedModel(path="/checkpoints/nob", adapter=True), gpus=1)
