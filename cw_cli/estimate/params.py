"""Exact parameter counts from a model's ``config.json``, computed from its architecture.

Each supported ``model_type`` is described as the tensors transformers (>= 5) builds for it
(:mod:`cw_cli.estimate.architectures`): embeddings, per-layer ``nn.Linear`` modules (by the leaf
name PEFT matches), norms, MoE routers and fused expert tensors, the final norm and the LM head.
Counts follow from the shapes, so a new checkpoint of a known family needs no table entry. An unknown ``model_type`` falls back to
instantiating the model on the meta device (no memory, no weights) when transformers is
installed. See docs/estimate.md.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from cw_cli.estimate.architectures import SUPPORTED_MODEL_TYPES, Architecture, Linear, architecture

__all__ = [
    "ALL_LINEAR", "SUPPORTED_MODEL_TYPES", "Architecture", "ParamCounts", "UnknownArchitectureError",
    "architecture", "count_parameters", "lora_trainable_parameters", "transformers_lists",
]

ALL_LINEAR = "all-linear"  # PEFT's shorthand: every nn.Linear except the output layer


class UnknownArchitectureError(ValueError):
    """The config's architecture has no formula, and transformers cannot count it either."""


class ParamCounts(Struct, frozen=True):
    """What :func:`count_parameters` reports.

    Attributes:
        model_type: The config's ``model_type``.
        method: ``"formula"`` (computed from the architecture) or ``"meta-device"``
            (counted by transformers on the meta device: the architecture is unknown to cw).
        total_parameters: Unique parameters (a tied head counts once).
        active_parameters: Parameters one token uses: everything but the routed experts it
            skips (equal to the total for a dense model).
        embedding_parameters: Input embedding.
        lm_head_parameters: LM head, 0 when tied to the embedding.
        tied_embeddings: Whether the LM head is the embedding's tensor.
        notes: Caveats worth showing to the user.
    """

    model_type: str
    method: str
    total_parameters: int
    active_parameters: int
    embedding_parameters: int
    lm_head_parameters: int
    tied_embeddings: bool
    notes: tuple[str, ...] = field(default_factory=tuple)


# --- public API ------------------------------------------------------------------------------


def count_parameters(config: Mapping[str, Any]) -> ParamCounts:
    """Total, active, embedding and LM-head parameter counts of a model.

    Args:
        config: A parsed config.json (the ``model_type`` selects the formula).

    Returns:
        The counts, with ``method`` saying how they were obtained.

    Raises:
        UnknownArchitectureError: The ``model_type`` has no formula and transformers is not
            installed to count it on the meta device.
    """
    model_type = str(config.get("model_type", ""))
    arch = architecture(config)
    if arch is None:
        return _meta_counts(config)
    body = sum(layer.total for layer in arch.layers) + arch.final_norm
    active = sum(layer.active for layer in arch.layers) + arch.final_norm
    heads = arch.embedding + arch.lm_head
    return ParamCounts(
        model_type=model_type,
        method="formula",
        total_parameters=body + heads,
        active_parameters=active + heads,
        embedding_parameters=arch.embedding,
        lm_head_parameters=arch.lm_head,
        tied_embeddings=arch.tied,
    )


def lora_trainable_parameters(
    config: Mapping[str, Any],
    rank: int,
    target_modules: Iterable[str] | str,
    train_embeddings: bool = False,
) -> int:
    """Trainable parameters of a LoRA fine-tune, as PEFT's ``print_trainable_parameters``.

    Each targeted ``nn.Linear`` of shape (in, out) adds ``rank * (in + out)`` (A and B).
    Routed experts are fused 3-D tensors in transformers 5, not ``nn.Linear`` modules: named
    targets such as ``gate_proj`` reach only dense and shared-expert MLPs, while PEFT's
    ``"all-linear"`` also adapts Mixtral's and Qwen3-MoE's routers and experts (counted).

    Args:
        config: A parsed config.json.
        rank: LoRA rank ``r``.
        target_modules: Leaf module names (PEFT matches a name or a ``.name`` suffix), or
            ``"all-linear"`` for every linear layer but the LM head.
        train_embeddings: The input embedding and the LM head are trained in full (PEFT's
            ``modules_to_save``); a tied pair counts once.

    Returns:
        The number of trainable parameters.

    Raises:
        ValueError: No module of the model matches ``target_modules`` (PEFT refuses too).
        UnknownArchitectureError: As for :func:`count_parameters`.
    """
    arch = architecture(config)
    if arch is None:
        return _meta_lora(config, rank, target_modules, train_embeddings)
    targets = _targets(target_modules)
    linears = [lin for layer in arch.layers for lin in layer.linears]
    head = Linear(arch.head_name, arch.hidden_size, arch.vocab_size)
    if targets != {ALL_LINEAR} and arch.head_name in targets and not arch.tied:
        linears.append(head)  # the head is a LoRA target only when named explicitly
    chosen = [lin for lin in linears if targets == {ALL_LINEAR} or lin.name in targets]
    if not chosen:
        raise ValueError(f"no linear module named {sorted(targets)} in this architecture")
    trainable = sum(rank * (lin.in_features + lin.out_features) for lin in chosen)
    if targets == {ALL_LINEAR}:
        trainable += rank * sum(layer.all_linear_per_rank for layer in arch.layers)
    if train_embeddings:
        trainable += arch.embedding + arch.lm_head
    return trainable


def _targets(target_modules: Iterable[str] | str) -> set[str]:
    if isinstance(target_modules, str):
        return {target_modules}
    return set(target_modules)


# --- meta-device fallback --------------------------------------------------------------------


def transformers_lists(model_type: str) -> bool | None:
    """Whether the installed transformers names ``model_type``, read from its auto mappings'
    source without importing it (importing costs seconds; a model_type it lacks is answered in
    milliseconds).

    Returns:
        None when it cannot tell (transformers not installed, or laid out differently).
    """
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    auto = Path(spec.origin).parent / "models" / "auto"
    texts = []
    for name in ("configuration_auto.py", "auto_mappings.py"):  # the table moved to the latter in transformers 5
        try:
            texts.append((auto / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    if not texts:
        return None
    return any(f'("{model_type}",' in text for text in texts)


def _meta_model(config: Mapping[str, Any]) -> Any:
    """Instantiate the model on the meta device: shapes only, no memory, no download.

    Raises:
        UnknownArchitectureError: transformers is not installed, does not know the
            ``model_type``, or cannot build a model from this config.
    """
    model_type = str(config.get("model_type"))
    no_formula = f"cw has no parameter formula for model_type {model_type!r} (known: {', '.join(SUPPORTED_MODEL_TYPES)})"
    if transformers_lists(model_type) is False:
        raise UnknownArchitectureError(f"{no_formula}, and the installed transformers does not know it either")
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as err:
        raise UnknownArchitectureError(
            f"{no_formula}, and transformers is not installed to count it on the meta device: pip install torch transformers"
        ) from err
    fields = {k: v for k, v in config.items() if k != "model_type"}
    try:
        cfg = AutoConfig.for_model(model_type, **fields)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg)
    except Exception as exc:  # noqa: BLE001 - third-party code on an arbitrary config.json: a skip, not a crash
        said = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise UnknownArchitectureError(f"{no_formula}, and transformers cannot build it from this config.json: {said}") from None


def _meta_counts(config: Mapping[str, Any]) -> ParamCounts:
    model = _meta_model(config)
    total = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embed
    head_params = 0 if head is None or tied else head.weight.numel()
    return ParamCounts(
        model_type=str(config.get("model_type", "")),
        method="meta-device",
        total_parameters=total,
        active_parameters=total,
        embedding_parameters=embed.numel(),
        lm_head_parameters=head_params,
        tied_embeddings=tied,
        notes=("counted by transformers on the meta device; active parameters are not "
               "derived for this architecture (shown equal to the total)",),
    )


def _meta_lora(
    config: Mapping[str, Any],
    rank: int,
    target_modules: Iterable[str] | str,
    train_embeddings: bool,
) -> int:
    from torch import nn

    model = _meta_model(config)
    targets = _targets(target_modules)
    head = model.get_output_embeddings()
    trainable = 0
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if targets == {ALL_LINEAR} and module is not head or leaf in targets:
            trainable += rank * (module.in_features + module.out_features)
    if not trainable:
        raise ValueError(f"no linear module named {sorted(targets)} in this architecture")
    if train_embeddings:
        embed = model.get_input_embeddings().weight
        trainable += embed.numel()
        if head is not None and head.weight is not embed:
            trainable += head.weight.numel()
    return trainable
