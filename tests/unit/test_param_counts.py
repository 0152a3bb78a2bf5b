"""Parameter counts from config.json equal transformers' and PEFT's own (issue 13).

The fixtures are real public config.json files (tests/fixtures/model_configs/SOURCES.md).
Architectures with no real fixture there (Mixtral, Qwen2-MoE, Qwen3-MoE's v5 spelling, Gemma 2/3,
Phi-3, GPT-NeoX) are checked on the default config of transformers' own config class, whose
defaults are the shapes of a released model (Mixtral-8x7B, Qwen1.5-MoE-A2.7B, gemma-2-2b,
Phi-3-mini, GPT-NeoX-20B). Models are built on the meta device: shapes only, no memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import peft  # noqa: E402 - the train extra: these counts are checked against the libraries themselves
import pytest
import torch  # noqa: E402
import transformers  # noqa: E402

from cw_cli.estimate import count_parameters, lora_trainable_parameters

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "model_configs"
REAL = sorted(FIXTURES.glob("*.json"))
DEFAULT_TYPES = [
    "mixtral", "qwen2_moe", "qwen3_moe", "gemma2", "gemma3_text", "phi3", "gpt_neox", "gemma",
]


def _real(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _default(model_type: str) -> dict[str, Any]:
    """transformers' default config of a model_type, as the dict a config.json would hold."""
    return {**transformers.AutoConfig.for_model(model_type).to_dict(), "model_type": model_type}


def _meta_model(config: dict[str, Any]) -> Any:
    fields = {k: v for k, v in config.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def _unique_numel(model: Any) -> int:
    # count each tensor once, so a tied LM head is not counted twice
    seen = {id(p): p.numel() for _, p in model.named_parameters(remove_duplicate=False)}
    return sum(seen.values())


def test_at_least_twelve_real_configs() -> None:
    assert len(REAL) >= 12


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_total_equals_transformers_on_real_configs(path: Path) -> None:
    config = json.loads(path.read_text())
    model = _meta_model(config)
    counts = count_parameters(config)
    assert counts.method == "formula"
    assert counts.total_parameters == _unique_numel(model)
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    assert counts.tied_embeddings == (head is embed)
    assert counts.embedding_parameters == embed.numel()
    assert counts.lm_head_parameters == (0 if head is embed else head.numel())


@pytest.mark.parametrize("model_type", DEFAULT_TYPES)
def test_total_equals_transformers_on_default_configs(model_type: str) -> None:
    config = _default(model_type)
    assert count_parameters(config).total_parameters == _unique_numel(_meta_model(config))


def test_dense_models_use_every_parameter() -> None:
    counts = count_parameters(_real("meta-llama__Llama-3.1-8B"))
    assert counts.active_parameters == counts.total_parameters == 8_030_261_248


def test_qwen3_30b_a3b_active_by_hand() -> None:
    """Qwen3-30B-A3B: H=2048, 48 layers, 32 q / 4 kv heads of 128, 128 experts of 768, top-8.

    Per layer: attention q 2048*4096 + k,v 2 * 2048*512 + o 4096*2048 = 18,874,368;
    q/k norms 2*128; 2 RMSNorms 2*2048; router 128*2048 = 262,144;
    one expert 3*2048*768 = 4,718,592, eight active = 37,748,736. Layer: 56,889,600.
    Model: 48 layers 2,730,700,800 + embedding and untied head 2 * 151936*2048 = 622,329,856
    + final norm 2048 = 3,353,032,704 (Qwen publishes "3.3B activated").
    """
    counts = count_parameters(_real("Qwen__Qwen3-30B-A3B"))
    assert counts.active_parameters == 3_353_032_704
    assert counts.total_parameters == 3_353_032_704 + 48 * 120 * 4_718_592 == 30_532_122_624


def test_mixtral_8x7b_active_by_hand() -> None:
    """Mixtral-8x7B (MixtralConfig defaults): H=4096, 32 layers, 32 q / 8 kv heads of 128,
    8 experts of 14336, top-2.

    Per layer: attention 2 * 4096*4096 + 2 * 4096*1024 = 41,943,040; 2 RMSNorms 8,192;
    router 8*4096 = 32,768; one expert 3*4096*14336 = 176,160,768, two active = 352,321,536.
    Layer: 394,305,536; 32 layers 12,617,777,152 + 2 * 32000*4096 = 262,144,000 + 4096
    = 12,879,925,248 (Mistral publishes 12.9B active, 46.7B total).
    """
    counts = count_parameters(_default("mixtral"))
    assert counts.active_parameters == 12_879_925_248
    assert counts.total_parameters == 12_879_925_248 + 32 * 6 * 176_160_768 == 46_702_792_704


def test_qwen15_moe_active_by_hand() -> None:
    """Qwen1.5-MoE-A2.7B (Qwen2MoeConfig defaults): H=2048, 24 layers, 16 heads of 128 with a
    q/k/v bias, 60 experts of 1408, top-4, a shared expert of 5632 with a sigmoid gate.

    Per layer: attention 3 * (2048*2048 + 2048) + 2048*2048 = 16,783,360; 2 RMSNorms 4,096;
    router 60*2048 = 122,880; shared expert 3*2048*5632 = 34,603,008; its gate 2,048;
    one expert 3*2048*1408 = 8,650,752, four active = 34,603,008. Layer: 86,118,400.
    24 layers 2,066,841,600 + 2 * 151936*2048 = 622,329,856 + 2048 = 2,689,173,504 ("A2.7B").
    """
    counts = count_parameters(_default("qwen2_moe"))
    assert counts.active_parameters == 2_689_173_504
    assert counts.total_parameters == 2_689_173_504 + 24 * 56 * 8_650_752


# (config, rank, target_modules, train embeddings): at least two settings for Llama, Qwen2
# and Mixtral, plus a tied model and both Qwen MoEs
LORA_CASES = [
    ("meta-llama__Llama-3.1-8B", 8, ["q_proj", "v_proj"], False),
    ("meta-llama__Llama-3.1-8B", 16, "all-linear", True),
    ("meta-llama__Llama-3.2-3B", 16, "all-linear", False),
    ("Qwen__Qwen2.5-7B", 8, ["q_proj", "k_proj", "v_proj", "o_proj"], False),
    ("Qwen__Qwen2.5-7B", 32, ["gate_proj", "up_proj", "down_proj"], True),
    ("Qwen__Qwen3-30B-A3B", 8, "all-linear", False),
    ("Qwen__Qwen3-30B-A3B", 16, ["q_proj", "o_proj"], False),
    ("mixtral", 8, ["q_proj", "v_proj"], False),
    ("mixtral", 16, "all-linear", True),
    ("qwen2_moe", 8, "all-linear", False),
]


@pytest.mark.parametrize(("source", "rank", "targets", "embeddings"), LORA_CASES)
def test_lora_trainable_equals_peft(
    source: str, rank: int, targets: list[str] | str, embeddings: bool
) -> None:
    config = _real(source) if (FIXTURES / f"{source}.json").exists() else _default(source)
    model = _meta_model(config)
    lora = peft.LoraConfig(
        r=rank,
        target_modules=targets,
        modules_to_save=["embed_tokens", "lm_head"] if embeddings else None,
    )
    peft_model = peft.get_peft_model(model, lora)
    expected = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert lora_trainable_parameters(config, rank, targets, embeddings) == expected


def test_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match="no linear module"):
        lora_trainable_parameters(_real("meta-llama__Llama-3.1-8B"), 8, ["query_key_value"])


def test_unknown_architecture_is_counted_on_the_meta_device() -> None:
    config = _default("olmo2")  # no formula in cw for OLMo 2
    counts = count_parameters(config)
    assert counts.method == "meta-device"
    assert counts.notes
    assert counts.total_parameters == _unique_numel(_meta_model(config))
    assert lora_trainable_parameters(config, 8, ["q_proj"]) > 0


def test_unknown_architecture_without_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from cw_cli.estimate import UnknownArchitectureError

    real_import = builtins.__import__

    def no_transformers(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == "transformers":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    with pytest.raises(UnknownArchitectureError, match="no parameter formula.*olmo2"):
        count_parameters({"model_type": "olmo2", "hidden_size": 8})


def test_params_module_imports_no_heavy_library() -> None:
    import ast

    source = (Path(__file__).resolve().parents[2] / "cw_cli/estimate/params.py").read_text()
    top_level = [n for n in ast.parse(source).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name for n in top_level for a in n.names} | {
        n.module for n in top_level if isinstance(n, ast.ImportFrom)
    }
    assert not names & {"torch", "transformers", "peft"}
