"""`cw estimate FRAMEWORK TYPE CONFIG [launch options]`: per-GPU memory of a run before it is launched."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.formats import check_output, dump
from cw_cli.cli.options import check_gpu_memory_flag, gpu_memory_option, launch_flags, take_launch_options
from cw_cli.cli.output import err, out
from cw_cli.config.options import SIZING_FIELDS
from cw_cli.labels import TRAINER, VLLM
from cw_cli.render.naming import validate_run_name

if TYPE_CHECKING:
    from rich.table import Table

    from cw_cli.estimate.from_config import RunEstimate
    from cw_cli.frameworks.registry import FrameworkRegistry

GIB = 1024**3
#: The trainer's terms, in the order printed (``TrainerMemory`` field, label).
TRAINER_ROWS = (
    ("weights_bytes", "weights"),
    ("gradients_bytes", "gradients"),
    ("optimizer_states_bytes", "optimizer states"),
    ("master_weights_bytes", "master weights (fp32)"),
    ("gathered_weights_bytes", "gathered layers (ZeRO-3 / FSDP)"),
    ("weight_copies_bytes", "weight copies kept for backward"),
    ("activations_bytes", "activations (as configured)"),
    ("activations_no_checkpointing_bytes", "  without gradient checkpointing"),
    ("activations_checkpointing_bytes", "  with gradient checkpointing"),
    ("logits_bytes", "logits and loss buffers"),
    ("optimizer_step_bytes", "optimizer step temporaries"),
    ("reference_model_bytes", "reference model"),
    ("generation_bytes", "generation (HF generate's KV cache)"),
    ("overhead_bytes", "CUDA context, NCCL, fragmentation"),
    ("allocated_bytes", "peak of live tensors"),
)
VLLM_ROWS = (
    ("weights_bytes", "weights"),
    ("overhead_bytes", "overhead (context, CUDA graphs, profiling forward, sampler)"),
    ("kv_cache_bytes", "KV cache budget"),
    ("min_per_gpu_bytes", "needed to start (one max_model_len sequence)"),
    ("per_gpu_bytes", "taken (gpu_memory_utilization x GPU)"),
)


def _registry(ctx: click.Context, framework: str) -> FrameworkRegistry:
    """The frameworks the estimate needs: a built-in alone (no plugin is imported), else all."""
    root = ctx.find_root().command
    registry_for = getattr(root, "registry_for", None)
    if registry_for is not None:
        return registry_for(framework)
    from cw_cli.frameworks.registry import registry_for as load

    return load(framework)


@click.command("estimate")
@click.argument("framework")
@click.argument("training_type", metavar="TYPE")
@launch_flags(SIZING_FIELDS)
@gpu_memory_option
@click.option("--output", "-o", default="table", show_default=True, metavar="FORMAT",
              help="table, json or yaml (fields: docs/estimate.md).")
@click.option("--hub/--no-hub", default=True, show_default=True,
              help="Fetch the model's config.json from the Hugging Face hub when it is neither a local folder nor in the "
              "local cache (never with HF_HUB_OFFLINE=1).")  # fmt: skip
@click.pass_context
@handle_errors
def estimate_command(
    ctx: click.Context, framework: str, training_type: str, config: Path, context: str | None, gpu_memory: str | None,
    output: str, hub: bool, **flags: Any,
) -> None:  # fmt: skip
    """Estimate a run's per-GPU memory (trainer, vLLM) and whether it fits.

    Reads the framework's own config (TRL, Axolotl, verifiers; DeepSpeed and Accelerate files it
    names), the model's config.json (a local folder, the Hugging Face cache, or the hub) and one
    GPU's memory (--gpu-memory, else `gpu_memory` / `gpu_type`, else the nodes' GPU labels: the
    only request to the cluster, skipped when a size is given). Prints every term per role, the
    verdict and the changes that would make it fit. docs/estimate.md has the model.
    """

    output = check_output(output)
    check_gpu_memory_flag(gpu_memory)  # before anything is read: `--gpu-memory 0` is no GPU
    options = take_launch_options(flags)
    registry = _registry(ctx, framework)
    if options.name is not None:
        validate_run_name(options.name)  # a launch option: checked, though an estimate names nothing

    def list_nodes() -> list[dict[str, Any]]:
        return api.Session(context=context, namespace=options.namespace).nodes()

    # An estimate needs neither a checkpoint volume nor the Secrets a launch would mount.
    how = api.EstimateOptions(gpu_memory=gpu_memory, hub=hub)
    result = api.estimate(api.read_config(config), framework, training_type, options, how, registry=registry,
                          list_nodes=list_nodes)  # fmt: skip
    if output != "table":
        out().file.write(dump(result.to_dict(), output))
        return
    _print(result)


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:,.2f}"


def _count(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e9:.2f}B" if value >= 1e8 else f"{value / 1e6:.1f}M"


def _print(result: RunEstimate) -> None:
    from rich.markup import escape

    console = out()
    est = result.estimate
    console.print(f"[bold]{escape(result.framework)} {escape(result.training_type)}[/]: "
                  f"{escape(result.model or '(no model)')}")  # fmt: skip
    if result.model_config:
        console.print(f"config.json: {escape(result.model_config)}")
    if est is None:
        console.print(f"[yellow]no estimate[/]: {escape(result.skipped or '')}")
        _notes(result)
        return
    setup = result.setup
    assert setup is not None
    trained = "full fine-tune" if setup.method == "full" else f"{setup.method.upper()} r={setup.lora_rank}"
    console.print(
        f"{escape(est.model_type)}: {_count(est.parameters)} parameters"
        + (f" ({_count(est.active_parameters)} active)" if est.active_parameters != est.parameters else "")
        + f", {_count(est.trainable_parameters)} trainable ({trained}); counted by {est.counting}"
    )
    console.print(escape(_describe(result)))
    gpu = result.gpu.memory
    if gpu is not None:
        product = f"{gpu.product}, " if gpu.product else ""
        console.print(f"GPU: {_gib(gpu.bytes)} GiB ({escape(product)}from {escape(result.gpu.source or '?')})")
    else:
        console.print("GPU: memory unknown (no verdict)")
    if TRAINER in result.roles:
        console.print(_trainer_table(result))
    if est.vllm is not None:
        console.print(_vllm_table(result))
    _verdict(result)
    _notes(result)


def _describe(result: RunEstimate) -> str:
    s = result.setup
    assert s is not None
    if s.zero_stage is not None:
        shard = f"DeepSpeed ZeRO-{s.zero_stage}"
    else:
        shard = "FSDP full shard" if s.fsdp else "no sharding (DDP)" if s.world_size > 1 else "one GPU"
    if s.offload_optimizer or s.offload_params:
        shard += " + CPU offload (" + ", ".join(
            w for w, on in (("optimizer", s.offload_optimizer), ("parameters", s.offload_params)) if on) + ")"
    quant = f", base in {s.quantization or 'nf4'}" if s.method == "qlora" or s.quantization else ""
    tokens = (f"{s.max_prompt_length}+{s.max_completion_length} tokens, {s.num_generations} generations per prompt"
              if s.grpo else f"{s.seq_len} tokens" + (" packed" if s.packing else ""))  # fmt: skip
    pairs = " (chosen + rejected)" if s.preference_pairs else ""
    return (
        f"setup: {s.gpus_per_node} GPU(s) x {s.nodes} node(s), {shard}; weights {s.weight_dtype}{quant}, mixed "
        f"precision {s.mixed_precision}, {s.optimizer}; micro batch {s.micro_batch}{pairs} x {tokens}, gradient "
        f"accumulation {s.gradient_accumulation}, checkpointing {'on' if s.gradient_checkpointing else 'off'}, "
        f"attention {s.attention}" + (", reference model" if s.reference_model else "")
    )


def _table(title: str) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    table.add_column("TERM")
    table.add_column("GiB", justify="right")
    return table


def _trainer_table(result: RunEstimate) -> Table:
    est = result.estimate
    assert est is not None
    t = est.trainer
    table = _table(f"trainer, per GPU ({t.world_size} process(es))")
    for key, label in TRAINER_ROWS:
        value = getattr(t, key)
        if value or key in ("weights_bytes", "activations_bytes", "logits_bytes", "allocated_bytes"):
            table.add_row(label, _gib(value))
    table.add_row(f"[bold]per GPU[/] (peak at {t.peak_phase}, + overhead)", f"[bold]{_gib(t.per_gpu_bytes)}[/]")
    if t.colocated_vllm_bytes:
        table.add_row("colocated vLLM's share of the same GPU", _gib(t.colocated_vllm_bytes))
    if t.cpu_offload_bytes:
        table.add_row("offloaded to CPU memory (per process)", _gib(t.cpu_offload_bytes))
    table.caption = ("the peak is the largest of four moments (at the loss, end of backward, optimizer step, "
                     "generation), not the sum of the terms")  # fmt: skip
    table.caption_justify = "left"
    return table


def _vllm_table(result: RunEstimate) -> Table:
    est = result.estimate
    assert est is not None and est.vllm is not None
    v = est.vllm
    where = "colocated in each trainer process" if v.mode == "colocate" else "server pod"
    table = _table(f"vLLM ({where}), per GPU, tensor parallel {v.tensor_parallel}, "
                   f"gpu_memory_utilization {v.gpu_memory_utilization}")  # fmt: skip
    for key, label in VLLM_ROWS:
        table.add_row(label, _gib(getattr(v, key)))
    table.add_row("KV cache per token", f"{v.kv_bytes_per_token / 1024:,.0f} KiB")
    table.add_row("max_model_len", f"{v.max_model_len:,}")
    if v.kv_cache_tokens is not None:
        table.add_row("KV cache holds", f"{v.kv_cache_tokens:,} tokens ({v.max_sequences:,} full-length sequences)")
    if v.generation_tokens:
        table.add_row("one GRPO generation round asks", f"{v.generation_tokens:,} tokens")
    return table


def _verdict(result: RunEstimate) -> None:
    from rich.markup import escape

    console = out()
    if result.verdict is None:
        console.print("[yellow]verdict: unknown[/] (GPU memory unknown)")
        return
    for role in result.verdict.roles:
        if role.role not in result.roles:
            continue
        mark = "[green]fits[/]" if role.fits else "[red]does not fit[/]"
        console.print(f"{'vLLM' if role.role == VLLM else TRAINER}: {mark}: {_gib(role.required_bytes)} of "
                      f"{_gib(role.available_bytes)} GiB ({role.ratio:.0%}; {escape(role.reason)})")  # fmt: skip
    if result.fits is False:
        band = ("clearly: a launch is refused (--force launches anyway)" if result.clearly_too_big
                else "within the estimate's error band: a launch is not refused")  # fmt: skip
        console.print(f"[red]does not fit[/], {band}")
    if result.suggestions:
        console.print("changes that fit (each re-estimated):")
        for suggestion, changes in zip(result.suggestions, result.changes):
            how = f": {escape('; '.join(changes))}" if changes else ""
            console.print(f"  - {escape(suggestion.description)} -> {_gib(suggestion.per_gpu_bytes)} GiB per GPU "
                          f"({suggestion.ratio:.0%}){how}")  # fmt: skip
    elif result.fits is False:
        console.print("no change tried makes it fit (checkpointing, LoRA/QLoRA, ZeRO-3, offload, more nodes, a smaller "
                      "micro batch or length)")  # fmt: skip


def _notes(result: RunEstimate) -> None:
    from rich.markup import escape

    for note in result.notes:
        err().print(f"[yellow]note:[/] {escape(note)}")
