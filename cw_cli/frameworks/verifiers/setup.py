"""verifiers' config as the memory estimate reads it: a :class:`~cw_cli.estimate.native_setup.RunSetup`.

verifiers 0.1.9.post3's RLConfig (``trainer.args``) under cw's accelerate launch, and its
vf-vllm server (``inference.args``). Loaded only when a run's model config.json was found. The
mapping is documented in docs/estimate.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cw_cli.estimate.memory import TrainingSetup
from cw_cli.estimate.native_setup import RunSetup, lora_targets, server_vllm, trains_embeddings
from cw_cli.estimate.values import as_count, as_mapping, as_number, truthy
from cw_cli.frameworks.distributed import trainer_world

if TYPE_CHECKING:
    from cw_cli.config.models import ClusterSpec
    from cw_cli.estimate.vllm import VllmSetup


def read_setup(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
               model_config: Mapping[str, Any] | None) -> RunSetup:
    """A verifiers run's trainer and vLLM server setup.

    Args:
        training_type: ``grpo``.
        native: The vf-rl config (defaults merged).
        cluster: cw's fields: ``gpu`` per node, ``nodes``, ``services.server``.
        base_dir: The config's folder.
        model_config: The model's config.json.
    """
    notes: list[str] = []
    setup, vllm = _verifiers(training_type, native, cluster, base_dir, model_config, notes)
    return RunSetup(setup, vllm, tuple(notes))


def _verifiers(training_type: str, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None,
               model_config: Mapping[str, Any] | None, notes: list[str]) -> tuple[TrainingSetup, VllmSetup | None]:
    """verifiers 0.1.9.post3's RLConfig (``trainer.args``), under cw's accelerate launch."""
    gpus, nodes = trainer_world(cluster)
    trainer = as_mapping(native.get("trainer"))
    args = as_mapping(trainer.get("args"))
    lora = truthy(args.get("use_lora", True))
    targets, _ = lora_targets(args.get("lora_target_modules"), model_config)
    if args.get("lora_target_modules") is None:
        targets = ("q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "down_proj", "up_proj")
    strategy = str(native.get("accelerate_config") or "zero3")
    stage = int(strategy[-1]) if re.fullmatch(r"zero[123]", strategy) else None
    notes.append("verifiers trains on micro_batch_size sequences of max_seq_len tokens (logits over all of them; "
                 "its Liger kernels need less)")
    setup = TrainingSetup(
        method="lora" if lora else "full",
        lora_rank=as_count(args.get("lora_rank"), 8),
        lora_targets=targets,
        lora_dropout=as_number(args.get("lora_dropout"), 0.0),
        train_embeddings=lora and trains_embeddings(args.get("lora_modules_to_save")),
        weight_dtype="bf16",  # verifiers loads the model in bf16 with flash attention
        mixed_precision="bf16" if truthy(args.get("bf16", True)) else "no",
        optimizer=str(args.get("optim") or "adamw_torch_fused"),
        zero_stage=stage,
        gpus_per_node=gpus,
        nodes=nodes,
        micro_batch=as_count(args.get("micro_batch_size"), 8),
        gradient_accumulation=1,
        seq_len=as_count(args.get("max_seq_len"), 2048),
        gradient_checkpointing=truthy(args.get("gradient_checkpointing", False)),
        attention="flash_attention_2",
    )
    inference = as_mapping(as_mapping(native.get("inference")).get("args"))
    return setup, server_vllm(cluster, {k: v for k, v in inference.items() if v is not None})
