"""Activation memory: the bytes autograd saves for the backward pass, per token.

The method is Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models" (arXiv:2205.05198, section 4.1): walk one transformer layer op by op and add up the
tensors each op keeps for its backward. Their GPT layer (MHA, LayerNorm, 4h GELU MLP, dropout,
attention scores materialised) gives ``sbh(34 + 5as/h)`` bytes; transformers' Llama-style layers
differ (RMSNorm upcast to fp32, GQA, gated MLP, no dropout, flash/SDPA attention that keeps only
its output and log-sum-exp), so the walk is redone here for each family, with a small simulator
that tracks which tensors share storage (a tensor saved by two ops counts once) and what
autocast and PEFT copy. tests/training/test_estimate_activations.py checks it against the
tensors PyTorch actually saves (``torch.autograd.graph.saved_tensors_hooks``) on tiny models.
"""

from __future__ import annotations

from msgspec import Struct, field
from msgspec.structs import replace

from cw_cli.estimate.shapes import ModelShape

# Every LoRA-able linear of a layer by the leaf name PEFT matches; "all-linear" means all of them.
ALL_LINEAR = "all-linear"


class ComputeSetup(Struct, frozen=True):
    """What decides which tensors autograd saves and in which dtype.

    Attributes:
        compute_bytes: Bytes of a matmul output: 2 under bf16/fp16 autocast or with half
            weights, 4 for fp32 training without autocast.
        weight_bytes: Bytes per element of the (non-quantised) stored weights; norm outputs
            take the wider of this and their input's dtype.
        autocast: torch.autocast is on (HF Trainer with ``bf16``/``fp16``): each linear casts
            a wider input to ``compute_bytes`` and saves that copy.
        full: All weights are trained (full fine-tune); otherwise only LoRA adapters are.
        train_head: The LM head is trained in full beside LoRA (PEFT ``modules_to_save``).
        lora_targets: Leaf names of the linears carrying adapters, or ``{"all-linear"}``.
        lora_experts: PEFT adapts the fused MoE experts too (``"all-linear"`` on Mixtral and
            Qwen3-MoE with PEFT 0.21).
        lora_rank: LoRA rank r.
        lora_dropout: LoRA dropout probability (> 0 keeps a mask and a dropped copy per module).
        adapter_bytes: Bytes of the adapter weights (PEFT upcasts bf16/fp16 adapters to fp32).
        dropout_mask_bytes: Bytes per element of a dropout mask: 1 on CUDA (``native_dropout``
            keeps a bool mask), the input's width on CPU (a multiplied float mask).
        repeat_kv: Keys and values are expanded to every query head before attention (SDPA
            with a padding mask, or a torch without ``enable_gqa``).
        eager_attention: Attention scores (heads × seq²) are materialised (``eager``).
        seq_len: Sequence length, for the seq² terms of eager attention.
    """

    compute_bytes: int = 2
    weight_bytes: int = 2
    autocast: bool = False
    full: bool = True
    train_head: bool = False
    lora_targets: frozenset[str] = field(default_factory=frozenset)
    lora_experts: bool = False
    lora_rank: int = 0
    lora_dropout: float = 0.0
    adapter_bytes: int = 4
    dropout_mask_bytes: int = 1
    repeat_kv: bool = False
    eager_attention: bool = False
    seq_len: int = 0

    @property
    def residual_bytes(self) -> int:
        """Bytes of the residual stream: the stored weights' dtype (fp32 under autocast)."""
        return self.weight_bytes

    def adapted(self, name: str) -> bool:
        """Whether the linear called ``name`` carries a LoRA adapter.

        PEFT's ``"all-linear"`` leaves out the LM head, which is adapted only when named.
        """
        if self.full or not self.lora_targets:
            return False
        if name in self.lora_targets:
            return True
        return ALL_LINEAR in self.lora_targets and name != "lm_head"


class _T(Struct, frozen=True):
    """A tensor per token: how many elements and how many bytes each."""

    id: int
    elements: float
    nbytes: int

    @property
    def size(self) -> float:
        return self.elements * self.nbytes


class _Graph:
    """Records the tensors saved for backward, once per storage."""

    def __init__(self, setup: ComputeSetup) -> None:
        self.setup = setup
        self.saved: dict[int, float] = {}
        self._next = 0

    def new(self, elements: float, nbytes: int) -> _T:
        self._next += 1
        return _T(self._next, elements, nbytes)

    def save(self, *tensors: _T) -> None:
        for t in tensors:
            self.saved[t.id] = t.size

    def cast(self, t: _T, nbytes: int) -> _T:
        """``t.to(dtype)``: the same tensor when the dtype already matches, else a copy."""
        return t if t.nbytes == nbytes else self.new(t.elements, nbytes)

    @property
    def total(self) -> float:
        return sum(self.saved.values())

    # --- ops ------------------------------------------------------------------------------

    def rms_norm(self, x: _T, rows: float = 1.0, gemma: bool = False) -> _T:
        """transformers' RMSNorm: upcast to fp32, pow/mean/rsqrt, scale by the weight."""
        s = self.setup
        x32 = self.cast(x, 4)
        self.save(x32, self.new(rows, 4))  # pow's input; rsqrt's output (per row)
        normed = self.new(x.elements, 4)
        if gemma:  # (x̂ · (1 + w)).type_as(x), computed in fp32
            if s.full:
                self.save(normed)
            return self.cast(self.new(x.elements, 4), x.nbytes)
        normed_in = self.cast(normed, x.nbytes)  # .to(input_dtype) before the weight
        if s.full:
            self.save(normed_in)  # for the weight's gradient
        return self.new(x.elements, max(s.weight_bytes, x.nbytes))

    def layer_norm(self, x: _T) -> _T:
        """nn.LayerNorm: saves its input, mean and rstd."""
        self.save(x, self.new(2, 4))
        return self.new(x.elements, x.nbytes)

    def linear(self, x: _T, name: str, out_features: int) -> _T:
        """nn.Linear, plus the LoRA branch PEFT adds when the module is a target."""
        s = self.setup
        x_in = self.cast(x, s.compute_bytes) if s.autocast else x
        if s.full:
            self.save(x_in)  # for the weight's gradient (frozen weights need only themselves)
        out = self.new(out_features, s.compute_bytes if s.autocast else x_in.nbytes)
        if s.adapted(name):
            xa = self.cast(x, s.adapter_bytes)  # PEFT casts the input to the adapter's dtype
            if s.lora_dropout > 0:
                self.save(self.new(x.elements, s.dropout_mask_bytes))  # the dropout mask
                xa = self.new(x.elements, s.adapter_bytes)
            xa_in = self.cast(xa, s.compute_bytes) if s.autocast else xa
            a_out = self.new(s.lora_rank, s.compute_bytes if s.autocast else s.adapter_bytes)
            self.save(xa_in, a_out)  # lora_A's input, lora_B's input
        return out

    def act_mul(self, gate: _T, up: _T, width: int) -> _T:
        """act(gate) * up: the activation saves its input, the product both factors."""
        act = self.new(width, gate.nbytes)
        self.save(gate, act, up)
        return self.new(width, gate.nbytes)

    def attention_core(self, q: _T, k: _T, v: _T, shape: ModelShape) -> _T:
        """Attention. SDPA/flash keeps q, k, v, its output and the log-sum-exp (fp32).

        Eager attention (Gemma 2) expands k and v to every head and keeps the scores, heads ×
        seq per token: the fp32 softmax, two low-precision copies (measured) and the
        softcapped tanh; its output is copied before o_proj, which keeps the copy if trained.
        """
        s = self.setup
        if s.autocast:  # SDPA and matmul run in the autocast dtype and keep those copies
            q, k, v = (self.cast(t, s.compute_bytes) for t in (q, k, v))
        if s.eager_attention or shape.eager_attention:
            per_score = 4 + 2 * q.nbytes + (q.nbytes if shape.logit_softcap else 0)
            scores = shape.heads * s.seq_len * per_score
            self.save(q, self.new(shape.q_dim, k.nbytes), self.new(shape.q_dim, v.nbytes))
            self.save(self.new(scores, 1))
            return self.new(shape.q_dim, q.nbytes)
        if s.repeat_kv:
            k = self.new(shape.q_dim, k.nbytes)
            v = self.new(shape.q_dim, v.nbytes)
        out = self.new(shape.q_dim, q.nbytes)  # flash layout: o_proj reads it without a copy
        self.save(q, k, v, out, self.new(shape.heads, 4))
        if shape.attention != "split":
            # q built by torch.cat (partial rotary): the output follows its layout and is
            # copied before the output projection (measured on CPU)
            return self.new(shape.q_dim, q.nbytes)
        return out


def _norm(g: _Graph, x: _T, shape: ModelShape, rows: float = 1.0) -> _T:
    if shape.norm == "layer":
        return g.layer_norm(x)
    return g.rms_norm(x, rows, gemma=shape.norm == "gemma")


def _attention(g: _Graph, x: _T, shape: ModelShape) -> _T:
    b = g.setup.compute_bytes
    if shape.attention == "split":
        q = g.linear(x, "q_proj", shape.q_dim)
        k = g.linear(x, "k_proj", shape.kv_dim)
        v = g.linear(x, "v_proj", shape.kv_dim)
    else:  # one fused projection; attention gets contiguous copies of its q, k, v slices
        name = "qkv_proj" if shape.attention == "fused_qkv" else "query_key_value"
        qkv = g.linear(x, name, shape.q_dim + 2 * shape.kv_dim)
        q = g.new(shape.q_dim, qkv.nbytes)
        k = g.new(shape.kv_dim, qkv.nbytes)
        v = g.new(shape.kv_dim, qkv.nbytes)
    if shape.qk_norm:
        q = _norm(g, q, shape, rows=shape.heads)
        k = _norm(g, k, shape, rows=shape.kv_heads)
    # RoPE returns new tensors and keeps only cos/sin (shared by all layers)
    q, k = g.new(shape.q_dim, q.nbytes or b), g.new(shape.kv_dim, k.nbytes or b)
    out = g.attention_core(q, k, v, shape)
    return g.linear(out, "o_proj" if shape.attention != "neox" else "dense", shape.hidden)


def _mlp(g: _Graph, x: _T, shape: ModelShape, width: int) -> _T:
    if shape.mlp == "plain":  # GPT-NeoX: dense_h_to_4h, GELU, dense_4h_to_h
        up = g.linear(x, "dense_h_to_4h", width)
        g.save(up)
        act = g.new(width, up.nbytes)
        return g.linear(act, "dense_4h_to_h", shape.hidden)
    if shape.mlp == "fused_gated":  # Phi-3: gate and up are halves of one output
        both = g.linear(x, "gate_up_proj", 2 * width)
        g.save(both)
        act = g.new(width, both.nbytes)
        g.save(act)
        prod = g.new(width, both.nbytes)
    else:
        gate = g.linear(x, "gate_proj", width)
        up = g.linear(x, "up_proj", width)
        prod = g.act_mul(gate, up, width)
    return g.linear(prod, "down_proj", shape.hidden)


def _moe(g: _Graph, x: _T, shape: ModelShape) -> None:
    """Router and routed experts (transformers 5's fused experts), plus a shared expert."""
    s = g.setup
    if s.full:
        g.save(g.cast(x, s.compute_bytes) if s.autocast else x)  # the router's input
    # softmax over experts in fp32, top-k renormalised: probabilities E, then a per-token sum
    g.save(g.new(shape.experts + 1, 4))
    # the experts' grouped matmul is not an autocast op: it runs in the residual dtype
    b = s.weight_bytes if s.autocast else s.compute_bytes
    h, i = shape.hidden, shape.expert_intermediate
    trained = s.full or s.lora_experts
    # per routed slot: the gathered input (kept when the experts train), the expert output
    # (kept to scale it by the routing weight), gate_up output 2I, activation I, product I
    # (kept when the experts train); token indices and the routing weight, ~40 bytes.
    slot = h * b + 3 * i * b + 40
    if trained:
        slot += h * b + i * b
    g.save(g.new(shape.top_k, slot))
    if shape.shared_intermediate:
        out = _mlp(g, x, shape, shape.shared_intermediate)
        g.save(out, g.new(1, s.compute_bytes))  # sigmoid(shared_expert_gate) · shared output


def layer_bytes_per_token(shape: ModelShape, setup: ComputeSetup, layer: int = 0) -> float:
    """Bytes one decoder layer keeps for backward, per token.

    Args:
        shape: The model's dimensions.
        setup: Dtypes, trainability and attention kernel.
        layer: The layer's index (MoE models mix dense and sparse layers).

    Returns:
        Bytes per token (fractional: per-head and per-row terms).
    """
    g = _Graph(setup)
    x = g.new(shape.hidden, setup.residual_bytes)
    if shape.parallel_residual:  # GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
        _attention(g, _norm(g, x, shape), shape)
        _mlp(g, _norm(g, x, shape), shape, shape.intermediate)
        return g.total
    h = _norm(g, x, shape)
    attn = _attention(g, h, shape)
    if shape.norms_per_layer == 4:
        _norm(g, attn, shape)  # post-attention norm; its output feeds the residual add
    h = _norm(g, g.new(shape.hidden, setup.residual_bytes), shape)
    if layer in shape.moe_layers:
        _moe(g, h, shape)
    else:
        out = _mlp(g, h, shape, shape.intermediate)
        if shape.norms_per_layer == 4:
            _norm(g, out, shape)
    return g.total


def head_bytes_per_token(shape: ModelShape, setup: ComputeSetup) -> float:
    """Bytes kept outside the decoder layers, per token, without the logits.

    The token ids (int64, kept by the embedding and by the loss) and the final norm; the
    final norm's output is kept by the LM head when the head is trained.
    """
    g = _Graph(setup)
    g.save(g.new(2, 8))  # input ids for the embedding, shifted labels for the loss
    out = _norm(g, g.new(shape.hidden, setup.residual_bytes), shape)
    head = _Graph(replace(setup, full=True)) if setup.train_head else g
    head.linear(out, "lm_head", shape.vocab)
    g.saved.update(head.saved)
    return g.total


def logits_bytes_per_token(shape: ModelShape, setup: ComputeSetup, upcast: bool = True) -> float:
    """Peak bytes of the logits and the loss, per token whose logits are computed.

    transformers' ``ForCausalLMLoss`` upcasts the logits to fp32 and calls cross-entropy:
    during backward three fp32 vocabulary-sized buffers coexist (the saved log-softmax, the
    gradient nll_loss returns and the gradient log-softmax returns), 12 bytes per logit,
    more than the forward's low-precision logits + fp32 copy + log-softmax (10 with bf16).
    Gemma 2's final softcapping keeps one more low-precision copy (its tanh output).

    Args:
        shape: The model's dimensions.
        setup: Dtypes.
        upcast: The loss upcasts to fp32 (transformers' loss does); without it the same three
            buffers are in the logits' dtype.
    """
    if not upcast:
        return 3 * setup.compute_bytes * shape.vocab
    per_logit = max(12, setup.compute_bytes + 8)
    if shape.logit_softcap:
        per_logit += setup.compute_bytes  # the saved tanh output
    return per_logit * shape.vocab


#: TRL's fused LM head projects tiles of this many tokens by this many vocabulary entries
#: (``TOKEN_CHUNK_SIZE`` and ``_CHUNKED_LOGPROB_CHUNK_SIZE`` in TRL 1.16).
FUSED_HEAD_TOKENS = 4096
FUSED_HEAD_VOCAB = 32768


def fused_head_bytes(shape: ModelShape, setup: ComputeSetup, tokens: int, head_weight_bytes: int | None) -> float:
    """Peak bytes of TRL's fused LM head and loss (SFT, DPO, GRPO, RLOO, KTO from TRL 1.16).

    The head never materialises the ``tokens × vocab`` logits: the forward folds tiles of
    4096 tokens × 32768 vocabulary entries into per-token statistics, the backward recomputes
    each tile in place and accumulates the gradients in fp32. What it holds at its backward: the
    scored positions' hidden states (a compacted copy, saved), their fp32 gradient and its cast
    back, one tile, and for a trained head its fp32 weight gradient and that gradient's cast.

    Args:
        shape: The model's dimensions.
        setup: Dtypes.
        tokens: Positions scored (those with a label).
        head_weight_bytes: Bytes per element of a trained LM head's weight; None when the head
            is frozen (LoRA without ``modules_to_save``).
    """
    hidden = tokens * shape.hidden * (setup.weight_bytes + 4 + setup.weight_bytes)
    tile = min(tokens, FUSED_HEAD_TOKENS) * min(shape.vocab, FUSED_HEAD_VOCAB) * setup.compute_bytes
    head = 0.0
    if head_weight_bytes is not None:
        head = shape.vocab * shape.hidden * (4 + (head_weight_bytes if head_weight_bytes != 4 else 0))
    return hidden + tile + head


def backward_transient_bytes_per_token(shape: ModelShape, setup: ComputeSetup) -> float:
    """Gradient buffers alive while one layer runs backward, per token.

    The gradients of its widest intermediates (the MLP's two I-wide inputs, or top-k experts'),
    of the attention's q, k, v and of the hidden state in and out; an approximation fitted
    to CPU peak measurements (benchmarks/estimate_gpu.py), not an op-by-op count.
    """
    width = shape.intermediate
    if shape.experts:
        width = shape.top_k * shape.expert_intermediate + shape.shared_intermediate
    return setup.compute_bytes * (2 * width + 2 * shape.hidden + shape.q_dim + 2 * shape.kv_dim)


def checkpointed_layer_input_bytes(shape: ModelShape, setup: ComputeSetup) -> float:
    """Bytes per token a checkpointed layer keeps: its input hidden states."""
    return shape.hidden * setup.residual_bytes
