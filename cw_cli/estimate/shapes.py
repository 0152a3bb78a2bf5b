"""The dimensions of a causal LM that the memory model needs, read from its ``config.json``.

Parameter counts come from :mod:`cw_cli.estimate.params`; this module adds what activations and
the KV cache depend on (heads, head size, experts, norm style) for the same families, and a
Llama-like reading of any other config that has the usual fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import Struct

# How each family's decoder layer is built in transformers 5 (what autograd saves differs).
_STYLE: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {},
    "qwen2": {},
    "qwen3": {"qk_norm": True},
    "gemma": {"norm": "gemma"},
    "gemma2": {"norm": "gemma", "norms_per_layer": 4, "eager_attention": True},
    "gemma3_text": {"norm": "gemma", "norms_per_layer": 4, "qk_norm": True},
    "phi3": {"attention": "fused_qkv", "mlp": "fused_gated"},
    "gpt_neox": {"norm": "layer", "attention": "neox", "mlp": "plain", "parallel_residual": True},
    "mixtral": {"moe": True},
    "qwen2_moe": {"moe": True, "shared_expert": True},
    "qwen3_moe": {"moe": True, "qk_norm": True},
}
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text"}


class ModelShape(Struct, frozen=True):
    """Dimensions of a decoder-only LM.

    Attributes:
        model_type: The config's ``model_type``.
        known: Whether the family's layer layout is modelled (otherwise read as Llama-like).
        hidden: ``hidden_size`` (H).
        layers: ``num_hidden_layers`` (L).
        heads: ``num_attention_heads`` (h).
        kv_heads: ``num_key_value_heads`` (k, GQA).
        head_dim: Size of one head (d).
        intermediate: Dense MLP width (I).
        vocab: ``vocab_size`` (V).
        experts: Routed experts per MoE layer (0 for a dense model).
        top_k: Experts each token goes through.
        expert_intermediate: Width of one expert's MLP.
        shared_intermediate: Width of Qwen2-MoE's shared expert (0 when none).
        moe_layers: Indices of the layers that carry experts.
        norm: ``"rms"``, ``"gemma"`` (RMSNorm computed in fp32) or ``"layer"`` (LayerNorm).
        norms_per_layer: 2, or 4 for Gemma 2/3's sandwich norms.
        qk_norm: Whether q and k are RMS-normalised per head (Qwen3, Gemma 3).
        attention: ``"split"`` (q/k/v projections), ``"fused_qkv"`` (Phi-3) or ``"neox"``.
        mlp: ``"gated"``, ``"fused_gated"`` (Phi-3's gate_up_proj) or ``"plain"`` (GPT-NeoX).
        parallel_residual: GPT-NeoX's attention and MLP read the same layer input.
        eager_attention: The family cannot use SDPA (Gemma 2's softcapping), so attention
            scores are materialised.
        logit_softcap: Gemma 2's final logit softcapping (adds copies of the logits).
        max_position_embeddings: The default context length (vLLM's default ``max_model_len``).
        dtype: The checkpoint's ``torch_dtype``/``dtype`` (what vLLM loads by default).
    """

    model_type: str
    known: bool
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    moe_layers: tuple[int, ...] = ()
    norm: str = "rms"
    norms_per_layer: int = 2
    qk_norm: bool = False
    attention: str = "split"
    mlp: str = "gated"
    parallel_residual: bool = False
    eager_attention: bool = False
    logit_softcap: bool = False
    max_position_embeddings: int = 4096
    dtype: str = "bfloat16"

    @property
    def q_dim(self) -> int:
        """Width of the queries, h·d."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values), k·d."""
        return self.kv_heads * self.head_dim


def _get(config: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = config.get(key)
    return default if value is None else value


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """Read the dimensions the memory model needs from a config.json.

    Args:
        config: A parsed config.json. Multimodal configs are read from their ``text_config``.

    Returns:
        The shape; ``known`` is False when the family is read as Llama-like.

    Raises:
        ValueError: A required field (hidden size, layers, heads, vocabulary) is missing.
    """
    config = _text_config(config)
    model_type = str(config.get("model_type", ""))
    style = _STYLE.get(model_type, {})
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        vocab = int(config["vocab_size"])
    except KeyError as err:
        raise ValueError(f"config.json has no `{err.args[0]}`") from err
    kv_heads = int(_get(config, "num_key_value_heads", heads))
    head_dim = int(_get(config, "head_dim", hidden // heads))
    intermediate = int(_get(config, "intermediate_size", 4 * hidden))
    experts = int(_get(config, "num_local_experts", _get(config, "num_experts", 0))) if style.get("moe") else 0
    dtype = str(_get(config, "torch_dtype", _get(config, "dtype", "bfloat16")))
    return ModelShape(
        model_type=model_type,
        known=model_type in _STYLE,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        experts=experts,
        top_k=int(_get(config, "num_experts_per_tok", 0)) if experts else 0,
        expert_intermediate=int(_get(config, "moe_intermediate_size", intermediate)) if experts else 0,
        moe_layers=_moe_layers(config, layers) if experts else (),
        shared_intermediate=int(_get(config, "shared_expert_intermediate_size", 0))
        if style.get("shared_expert") else 0,
        norm=style.get("norm", "rms"),
        norms_per_layer=style.get("norms_per_layer", 2),
        qk_norm=style.get("qk_norm", False),
        attention=style.get("attention", "split"),
        mlp=style.get("mlp", "gated"),
        parallel_residual=style.get("parallel_residual", False),
        eager_attention=style.get("eager_attention", False),
        logit_softcap=_get(config, "final_logit_softcapping") is not None
        and model_type == "gemma2",
        max_position_embeddings=int(_get(config, "max_position_embeddings", 4096)),
        dtype=dtype,
    )


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a multimodal config (its ``text_config``), else the config."""
    if "text_config" in config and "hidden_size" not in config:
        return {**config["text_config"], "model_type": config["text_config"].get("model_type")}
    return config


def _moe_layers(config: Mapping[str, Any], layers: int) -> tuple[int, ...]:
    """Indices of the layers that carry experts (Qwen-MoE's sparse step and dense-only layers)."""
    step = int(_get(config, "decoder_sparse_step", 1))
    dense_only = set(_get(config, "mlp_only_layers", []) or [])
    return tuple(i for i in range(layers) if i not in dense_only and (i + 1) % step == 0)


def tied_embeddings(config: Mapping[str, Any]) -> bool:
    """Whether the LM head is the input embedding (the family's default when absent)."""
    value = config.get("tie_word_embeddings")
    if value is None:
        return str(config.get("model_type")) in _TIED_BY_DEFAULT
    return bool(value)
