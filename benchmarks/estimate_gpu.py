"""Measured peak memory of real training steps against cw's estimate (issue 13).

Builds a random-initialised model of a real architecture's shape from a config.json (nothing is
downloaded), trains a few steps for several settings (full fine-tune in bf16 or fp32 with bf16
autocast, LoRA, gradient checkpointing on and off, a few sequence lengths), and compares the
peak of live tensors with ``estimate_memory(...).trainer.allocated_bytes``:

- on a GPU, ``torch.cuda.max_memory_allocated()`` over the last step (the optimizer states
  exist by then);
- with ``--cpu-smoke``, on a tiny shape on CPU: the tensors alive before the step plus the peak
  of the profiler's allocation events during it (``torch.profiler`` with
  ``profile_memory=True``). CPU kernels are not CUDA's, so this keeps the benchmark runnable and
  the estimate honest on a small scale; the GPU figures are the ones to record in docs.

Usage:
    python benchmarks/estimate_gpu.py                       # GPU, Llama-3.2-3B shape
    python benchmarks/estimate_gpu.py --config path/to/config.json --layers 8
    python benchmarks/estimate_gpu.py --cpu-smoke --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cw_cli.estimate import TrainingSetup, estimate_memory  # noqa: E402

DEFAULT_CONFIG = ROOT / "tests" / "fixtures" / "model_configs" / "meta-llama__Llama-3.2-3B.json"
# A tiny shape of the same family for CPU: small enough for a CI runner.
TINY = {
    "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 2048,
}


@dataclass(frozen=True)
class Setting:
    """One measured configuration.

    Attributes:
        name: Row label.
        method: ``"full"`` or ``"lora"``.
        weight_dtype: ``"bf16"`` or ``"fp32"`` (fp32 trains under bf16 autocast, like TRL).
        checkpointing: Gradient checkpointing.
        seq_len: Tokens per sequence.
        micro_batch: Sequences per step.
    """

    name: str
    method: str
    weight_dtype: str
    checkpointing: bool
    seq_len: int
    micro_batch: int = 1


GPU_SETTINGS = [
    Setting("full bf16", "full", "bf16", False, 1024),
    Setting("full bf16 ckpt", "full", "bf16", True, 2048),
    Setting("full bf16 ckpt 4k", "full", "bf16", True, 4096),
    Setting("full fp32+autocast ckpt", "full", "fp32", True, 1024),
    Setting("lora bf16", "lora", "bf16", False, 1024),
    Setting("lora bf16 ckpt", "lora", "bf16", True, 4096),
    Setting("lora bf16 mb2", "lora", "bf16", False, 2048, 2),
    Setting("lora fp32+autocast ckpt", "lora", "fp32", True, 2048),
]
CPU_SETTINGS = [
    Setting("full bf16", "full", "bf16", False, 128),
    Setting("full bf16 ckpt", "full", "bf16", True, 128),
    Setting("full fp32+autocast", "full", "fp32", False, 64),
    Setting("lora bf16", "lora", "bf16", False, 128),
    Setting("lora bf16 ckpt", "lora", "bf16", True, 256),
]
LORA_RANK = 16


def _setup(s: Setting) -> TrainingSetup:
    return TrainingSetup(
        method=s.method, lora_rank=LORA_RANK, lora_targets="all-linear",
        weight_dtype=s.weight_dtype, mixed_precision="bf16",
        optimizer="adamw_torch_fused", micro_batch=s.micro_batch, seq_len=s.seq_len,
        packing=True,  # no padding: the batches below have no attention mask
        gradient_checkpointing=s.checkpointing,
    )


def _build(config: dict[str, Any], s: Setting, device: str) -> tuple[Any, Any]:
    import torch
    import transformers

    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **fields)
    cfg._attn_implementation = "sdpa"
    dtype = torch.bfloat16 if s.weight_dtype == "bf16" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    if s.method == "lora":
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=LORA_RANK,
                                                           target_modules="all-linear"))
    if s.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if s.method == "lora":
            model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5, fused=True)
    return model, optimizer


def _train_step(model: Any, optimizer: Any, ids: Any, device: str) -> None:
    import torch

    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _live_bytes(model: Any, optimizer: Any) -> int:
    """Bytes of the tensors alive between steps: parameters, gradients, optimizer states."""
    import torch

    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[p.data_ptr()] = p.numel() * p.element_size()
        if p.grad is not None:
            seen[p.grad.data_ptr()] = p.grad.numel() * p.grad.element_size()
    for state in optimizer.state.values():
        for v in state.values():
            if torch.is_tensor(v):
                seen[v.data_ptr()] = v.numel() * v.element_size()
    return sum(seen.values())


def _cpu_peak(step: Any) -> int:
    """Peak bytes allocated on CPU during ``step()``, above what was live before it."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def _measure_once(config: dict[str, Any], s: Setting, device: str, steps: int) -> int:
    import torch

    model, optimizer = _build(config, s, device)
    ids = torch.randint(0, config["vocab_size"], (s.micro_batch, s.seq_len), device=device)
    for _ in range(steps):
        _train_step(model, optimizer, ids, device)
    if device != "cuda":
        before = _live_bytes(model, optimizer) + ids.numel() * ids.element_size()
        return before + _cpu_peak(lambda: _train_step(model, optimizer, ids, device))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    _train_step(model, optimizer, ids, device)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def measure(config: dict[str, Any], s: Setting, device: str, steps: int = 2) -> int:
    """Peak bytes of live tensors during a training step (after warm-up steps)."""
    peak = _measure_once(config, s, device, steps)
    gc.collect()  # the model and optimizer of this setting are gone before the next one
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
    return peak


def run(config: dict[str, Any], settings: list[Setting], device: str) -> list[dict[str, Any]]:
    """Measure every setting and put the estimate beside it."""
    rows = []
    for s in settings:
        t0 = time.time()
        estimate = estimate_memory(config, _setup(s)).trainer
        measured = measure(config, s, device)
        rows.append({
            "setting": s.name, "seq_len": s.seq_len, "micro_batch": s.micro_batch,
            "estimate_bytes": estimate.allocated_bytes, "measured_bytes": measured,
            "ratio": estimate.allocated_bytes / measured, "peak_phase": estimate.peak_phase,
            "seconds": round(time.time() - t0, 1),
        })
    return rows


def _table(rows: list[dict[str, Any]], unit: float, unit_name: str) -> str:
    lines = [f"{'setting':28s} {'seq':>5s} {'mb':>3s} {'estimate':>10s} {'measured':>10s} "
             f"{'est/meas':>8s}  phase", "-" * 84]
    for r in rows:
        lines.append(
            f"{r['setting']:28s} {r['seq_len']:5d} {r['micro_batch']:3d} "
            f"{r['estimate_bytes'] / unit:9.2f}{unit_name} {r['measured_bytes'] / unit:9.2f}"
            f"{unit_name} {r['ratio']:8.3f}  {r['peak_phase']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="a config.json")
    parser.add_argument("--layers", type=int, help="keep only this many decoder layers")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny shape on CPU (keeps the benchmark runnable without a GPU)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)

    import torch

    config = json.loads(args.config.read_text())
    if args.cpu_smoke:
        config = {**config, **TINY}
        config.pop("rope_scaling", None)
        device, settings = "cpu", CPU_SETTINGS
        torch.set_num_threads(min(2, torch.get_num_threads()))
    elif torch.cuda.is_available():
        device, settings = "cuda", GPU_SETTINGS
    else:
        print("no GPU: run with --cpu-smoke", file=sys.stderr)
        return 2
    if args.layers:
        config = {**config, "num_hidden_layers": args.layers}
    rows = run(config, settings, device)
    unit, name = (2**20, "M") if device == "cpu" else (2**30, "G")
    gpu = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"{config.get('model_type')} {args.config.name} on {gpu}, "
          f"{config['num_hidden_layers']} layers, torch {torch.__version__}")
    print(_table(rows, unit, name))
    if args.json:
        args.json.write_text(json.dumps({"device": gpu, "config": args.config.name,
                                         "layers": config["num_hidden_layers"], "rows": rows},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
