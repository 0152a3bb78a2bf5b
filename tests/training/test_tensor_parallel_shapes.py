"""The estimate's tensor-parallel term against transformers' own sharding: each model is loaded
with `tp_plan="auto"` on 2 CPU ranks (gloo, through torchrun), trained one step, and the bytes of
its local parameter shards compared with what cw's estimate puts on one rank; the local attention
and MLP widths are the per-rank shape the activation terms use."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.training

WORKER = '''
import json, os, sys
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(sys.argv[1], tp_plan="auto", dtype=torch.float32)
shapes = {name: list((p.to_local() if hasattr(p, "to_local") else p).shape) for name, p in model.named_parameters()}
ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
with open(os.path.join(sys.argv[2], f"rank{os.environ['RANK']}.json"), "w") as handle:
    json.dump({"shapes": shapes, "loss": loss.item()}, handle)
'''

#: Tiny models of three families: an untied Llama, a tied Qwen3 with QK norms, a Mixtral MoE.
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": False}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"tie_word_embeddings": True, "head_dim": 16}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                {"tie_word_embeddings": False, "num_local_experts": 4, "num_experts_per_tok": 2}),
}  # fmt: skip
TP = 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _build(family: str, folder: Path) -> dict:
    import transformers

    config_name, model_name, extra = MODELS[family]
    config = getattr(transformers, config_name)(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, **extra,
    )  # fmt: skip
    getattr(transformers, model_name)(config).save_pretrained(folder)
    return json.loads((folder / "config.json").read_text())


@pytest.mark.parametrize("family", sorted(MODELS))
def test_one_ranks_shards_are_what_the_estimate_puts_on_it(family, tmp_path):
    from cw_cli.estimate.memory import TrainingSetup, estimate_memory

    config = _build(family, tmp_path / "model")
    (tmp_path / "worker.py").write_text(WORKER)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(TP), "--master_port", str(_free_port()),
         str(tmp_path / "worker.py"), str(tmp_path / "model"), str(tmp_path)],
        capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(TP)]
    measured = [4 * sum(_numel(shape) for shape in rank["shapes"].values()) for rank in ranks]  # fp32 bytes
    assert measured[0] == measured[1]

    setup = TrainingSetup(method="full", weight_dtype="fp32", mixed_precision="no", gpus_per_node=TP, micro_batch=2,
                          seq_len=16, tensor_parallel=TP)  # fmt: skip
    alone = estimate_memory(config, TrainingSetup(**{**_fields(setup), "tensor_parallel": 1, "gpus_per_node": 1}))
    sharded = estimate_memory(config, setup)
    assert alone.trainer.weights_bytes == 4 * sum(_numel(s) for s in _full_shapes(tmp_path / "model").values())
    assert sharded.trainer.weights_bytes == pytest.approx(measured[0], rel=0.001)

    # The per-rank shape the activation terms use: 1/tp of the heads and of the MLP width.
    shapes = ranks[0]["shapes"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    assert shapes["model.layers.0.self_attn.q_proj.weight"][0] == config["num_attention_heads"] // TP * head_dim
    assert shapes["model.layers.0.self_attn.k_proj.weight"][0] == config["num_key_value_heads"] // TP * head_dim
    mlp = shapes.get("model.layers.0.mlp.down_proj.weight") or shapes["model.layers.0.mlp.experts.down_proj"]
    assert mlp[-1] == config["intermediate_size"] // TP


def _numel(shape: list[int]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def _full_shapes(folder: Path) -> dict[str, list[int]]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        return {key: list(weights.get_slice(key).get_shape()) for key in weights.keys()}


def _fields(setup) -> dict:
    from msgspec.structs import asdict

    return asdict(setup)
