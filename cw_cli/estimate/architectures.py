"""The architecture of each supported model family, as the tensors transformers (>= 5) builds.

Each supported ``model_type`` is described as embeddings, per-layer ``nn.Linear`` modules (by
the leaf name PEFT matches), norms, MoE routers and fused expert tensors, the final norm and the
LM head, built from its ``config.json`` with the defaults of transformers' config classes.
:mod:`cw_cli.estimate.params` counts parameters from this description.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from msgspec import Struct


class Linear(Struct, frozen=True):
    """One ``nn.Linear`` module of a layer.

    Attributes:
        name: Leaf module name, as PEFT's ``target_modules`` matches it.
        in_features: Input width.
        out_features: Output width.
        bias: Whether the module has a bias.
    """

    name: str
    in_features: int
    out_features: int
    bias: bool = False

    @property
    def parameters(self) -> int:
        """Weight plus bias elements."""
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


class Layer(Struct, frozen=True):
    """One decoder layer.

    Attributes:
        linears: Its ``nn.Linear`` modules (what LoRA can target by name).
        other: Parameters outside those modules that are always used: norms, qk-norms, routers.
        experts_total: Parameters of all routed experts (fused 3-D tensors in transformers 5).
        experts_active: Parameters of the experts one token goes through (top-k of them).
        all_linear_per_rank: LoRA parameters per unit of rank that PEFT's ``"all-linear"``
            adds beyond ``linears`` (the MoE router and the fused expert tensors, see
            :func:`_peft_moe_per_rank`).
    """

    linears: tuple[Linear, ...]
    other: int = 0
    experts_total: int = 0
    experts_active: int = 0
    all_linear_per_rank: int = 0

    @property
    def total(self) -> int:
        """All parameters of the layer."""
        return sum(lin.parameters for lin in self.linears) + self.other + self.experts_total

    @property
    def active(self) -> int:
        """Parameters one token uses."""
        return self.total - self.experts_total + self.experts_active


class Architecture(Struct, frozen=True):
    """A whole causal LM as cw counts it.

    Attributes:
        vocab_size: Rows of the input embedding (and of the LM head).
        hidden_size: Model width.
        layers: The decoder layers, in order.
        final_norm: Parameters of the last norm.
        tied: Whether the LM head shares the input embedding's tensor.
        embed_name: Leaf name of the input embedding module.
        head_name: Leaf name of the LM head module.
    """

    vocab_size: int
    hidden_size: int
    layers: tuple[Layer, ...]
    final_norm: int
    tied: bool
    embed_name: str = "embed_tokens"
    head_name: str = "lm_head"

    @property
    def embedding(self) -> int:
        """Input embedding parameters."""
        return self.vocab_size * self.hidden_size

    @property
    def lm_head(self) -> int:
        """LM head parameters that are not the embedding's (0 when tied)."""
        return 0 if self.tied else self.vocab_size * self.hidden_size


# --- config access ---------------------------------------------------------------------------


class _Cfg:
    """Typed reads of a config.json dict, with the defaults transformers' config classes use."""

    def __init__(self, raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.raw = raw
        self.defaults = defaults

    def get(self, key: str, default: Any = None) -> Any:
        value = self.raw.get(key)
        if value is None:
            value = self.defaults.get(key, default)
        return value

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        if value is None:
            raise ValueError(f"config.json has no `{key}`")
        return int(value)

    @property
    def hidden(self) -> int:
        return self.integer("hidden_size")

    @property
    def heads(self) -> int:
        return self.integer("num_attention_heads")

    @property
    def kv_heads(self) -> int:
        return self.integer("num_key_value_heads", self.heads)

    @property
    def head_dim(self) -> int:
        # Gemma and Qwen3 set head_dim independently of hidden_size / heads
        return self.integer("head_dim", self.hidden // self.heads)

    @property
    def tied(self) -> bool:
        return bool(self.get("tie_word_embeddings", False))


# --- building blocks -------------------------------------------------------------------------


def _attention(c: _Cfg, qkv_bias: bool, o_bias: bool) -> tuple[Linear, ...]:
    h, q, kv = c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim
    return (
        Linear("q_proj", h, q, qkv_bias),
        Linear("k_proj", h, kv, qkv_bias),
        Linear("v_proj", h, kv, qkv_bias),
        Linear("o_proj", q, h, o_bias),
    )


def _gated_mlp(h: int, inter: int, bias: bool = False) -> tuple[Linear, ...]:
    return (
        Linear("gate_proj", h, inter, bias),
        Linear("up_proj", h, inter, bias),
        Linear("down_proj", inter, h, bias),
    )


def _dense(
    c: _Cfg, attn: tuple[Linear, ...], norms: int, extra: int = 0, mlp_bias: bool = False
) -> Architecture:
    """A decoder of identical dense layers with RMSNorms (weight only)."""
    h = c.hidden
    layer = Layer(attn + _gated_mlp(h, c.integer("intermediate_size"), mlp_bias), norms * h + extra)
    return Architecture(
        c.integer("vocab_size"), h, (layer,) * c.integer("num_hidden_layers"), h, c.tied
    )


def _num_experts(c: _Cfg) -> int:
    # the hub's Qwen configs say num_experts; transformers 5 saves qwen3_moe as num_local_experts
    return c.integer("num_local_experts", c.integer("num_experts", 0))


def _peft_moe_per_rank(h: int, inter: int, experts: int) -> int:
    """LoRA parameters per unit of rank PEFT (0.21) gives a router and fused experts.

    Measured against PEFT's ``"all-linear"`` on transformers 5's Mixtral and Qwen3-MoE: the
    router gets A (r, H) and B (E, r); the fused ``gate_up_proj`` [E, 2I, H] gets rank 2r per
    expert, A (2rE, H) and B (2I, 2rE); ``down_proj`` [E, H, I] gets A (rE, I) and B (H, rE).
    """
    return (h + experts) + 2 * experts * (h + 2 * inter) + experts * (inter + h)


def _is_sparse(c: _Cfg, i: int) -> bool:
    """Qwen-MoE's rule for which layers carry experts."""
    step = c.integer("decoder_sparse_step", 1)
    return (
        i not in (c.get("mlp_only_layers") or [])
        and _num_experts(c) > 0
        and (i + 1) % step == 0
    )


# --- families --------------------------------------------------------------------------------


def _llama(c: _Cfg) -> Architecture:
    bias = bool(c.get("attention_bias", False))
    return _dense(c, _attention(c, bias, bias), 2, mlp_bias=bool(c.get("mlp_bias", False)))


def _mistral(c: _Cfg) -> Architecture:
    return _dense(c, _attention(c, False, False), 2)


def _qwen2(c: _Cfg) -> Architecture:
    # Qwen2 hard-codes a bias on q/k/v and none on o
    return _dense(c, _attention(c, True, False), 2)


def _qwen3(c: _Cfg) -> Architecture:
    bias = bool(c.get("attention_bias", False))
    return _dense(c, _attention(c, bias, bias), 2, extra=2 * c.head_dim)  # q_norm, k_norm


def _gemma(c: _Cfg) -> Architecture:
    bias = bool(c.get("attention_bias", False))
    return _dense(c, _attention(c, bias, bias), 2)


def _gemma2(c: _Cfg) -> Architecture:
    # sandwich norms: pre/post attention and pre/post feed-forward
    bias = bool(c.get("attention_bias", False))
    return _dense(c, _attention(c, bias, bias), 4)


def _gemma3_text(c: _Cfg) -> Architecture:
    bias = bool(c.get("attention_bias", False))
    return _dense(c, _attention(c, bias, bias), 4, extra=2 * c.head_dim)


def _phi3(c: _Cfg) -> Architecture:
    h, hd, inter = c.hidden, c.head_dim, c.integer("intermediate_size")
    qkv = (c.heads + 2 * c.kv_heads) * hd
    linears = (
        Linear("qkv_proj", h, qkv),
        Linear("o_proj", c.heads * hd, h),
        Linear("gate_up_proj", h, 2 * inter),
        Linear("down_proj", inter, h),
    )
    layer = Layer(linears, 2 * h)
    return Architecture(c.integer("vocab_size"), h, (layer,) * c.integer("num_hidden_layers"), h, c.tied)


def _gpt_neox(c: _Cfg) -> Architecture:
    h, inter = c.hidden, c.integer("intermediate_size")
    bias = bool(c.get("attention_bias", True))
    linears = (
        Linear("query_key_value", h, 3 * h, bias),
        Linear("dense", h, h, bias),
        Linear("dense_h_to_4h", h, inter, True),
        Linear("dense_4h_to_h", inter, h, True),
    )
    layer = Layer(linears, 2 * 2 * h)  # two LayerNorms, weight and bias
    return Architecture(
        c.integer("vocab_size"), h, (layer,) * c.integer("num_hidden_layers"), 2 * h, c.tied,
        embed_name="embed_in", head_name="embed_out",
    )


def _mixtral(c: _Cfg) -> Architecture:
    h, inter = c.hidden, c.integer("intermediate_size")
    experts, top_k = _num_experts(c), c.integer("num_experts_per_tok")
    expert = 3 * h * inter  # fused gate_up_proj [E, 2I, H] and down_proj [E, H, I]
    layer = Layer(
        _attention(c, False, False),
        other=2 * h + experts * h,  # two RMSNorms, router
        experts_total=experts * expert,
        experts_active=top_k * expert,
        all_linear_per_rank=_peft_moe_per_rank(h, inter, experts),
    )
    return Architecture(c.integer("vocab_size"), h, (layer,) * c.integer("num_hidden_layers"), h, c.tied)


def _qwen_moe(c: _Cfg, attn: tuple[Linear, ...], qk_norm: int, shared: bool) -> Architecture:
    h, moe_inter = c.hidden, c.integer("moe_intermediate_size")
    experts, top_k = _num_experts(c), c.integer("num_experts_per_tok", 0)
    expert = 3 * h * moe_inter
    # PEFT's all-linear reaches Qwen3-MoE's router and experts but not Qwen2-MoE's (measured)
    peft_moe = 0 if shared else _peft_moe_per_rank(h, moe_inter, experts)
    layers = []
    for i in range(c.integer("num_hidden_layers")):
        norms = 2 * h + qk_norm
        if not _is_sparse(c, i):
            layers.append(Layer(attn + _gated_mlp(h, c.integer("intermediate_size")), norms))
            continue
        linears = attn
        if shared:  # Qwen2-MoE: one always-on shared expert and its sigmoid gate
            linears += _gated_mlp(h, c.integer("shared_expert_intermediate_size"))
            linears += (Linear("shared_expert_gate", h, 1),)
        layers.append(
            Layer(linears, norms + experts * h, experts * expert, top_k * expert, peft_moe)
        )
    return Architecture(c.integer("vocab_size"), h, tuple(layers), h, c.tied)


def _qwen2_moe(c: _Cfg) -> Architecture:
    return _qwen_moe(c, _attention(c, True, False), 0, shared=True)


def _qwen3_moe(c: _Cfg) -> Architecture:
    bias = bool(c.get("attention_bias", False))
    return _qwen_moe(c, _attention(c, bias, bias), 2 * c.head_dim, shared=False)


# model_type -> (builder, the config-class defaults the count depends on)
_FAMILIES: dict[str, tuple[Callable[[_Cfg], Architecture], dict[str, Any]]] = {
    "llama": (_llama, {}),
    "mistral": (_mistral, {}),
    "qwen2": (_qwen2, {}),
    "qwen3": (_qwen3, {}),
    "gemma": (_gemma, {"tie_word_embeddings": True}),
    "gemma2": (_gemma2, {"tie_word_embeddings": True}),
    "gemma3_text": (_gemma3_text, {"tie_word_embeddings": True}),
    "phi3": (_phi3, {}),
    "gpt_neox": (_gpt_neox, {}),
    "mixtral": (_mixtral, {}),
    "qwen2_moe": (_qwen2_moe, {}),
    "qwen3_moe": (_qwen3_moe, {}),
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_FAMILIES))


def architecture(config: Mapping[str, Any]) -> Architecture | None:
    """The formula description of a config, or None when its ``model_type`` has none.

    Args:
        config: A parsed config.json.
    """
    family = _FAMILIES.get(str(config.get("model_type", "")))
    if family is None:
        return None
    builder, defaults = family
    return builder(_Cfg(config, defaults))
