"""Peak memory of TRL SFT runs launched through cw, against `cw estimate` (issue 13).

For each setting (full fine-tune and LoRA, gradient checkpointing on and off, a few
``max_length`` / ``per_device_train_batch_size`` values) this benchmark does what a user does:

1. once: a random-initialised model of a real architecture's shape (a config.json of
   ``tests/fixtures/model_configs``) and an offline word-level tokenizer are saved into a local
   Hugging Face cache under a made-up repo id, and a small text dataset (every text longer than
   ``max_length``, so packing fills each sequence) is written beside the configs;
2. a TRL SFT config is written as a user writes one (the repo id, ``dataset_name: ./data``,
   ``max_length``, ``packing``, ``gpu: 1``, ...);
3. ``cw estimate trl sft CONFIG -o json`` (the real CLI, a subprocess) gives the trainer's
   ``allocated_bytes`` (peak of live tensors) and ``per_gpu_bytes``;
4. ``cw_cli.api.plan(CONFIG, "trl", "sft", local=True)`` renders the run (as
   ``cw trl sft CONFIG --local`` does) and ``cw_cli.localrun.runner.LocalRunner`` writes its
   ConfigMap files and runs the trainer container's own command here. A ``sitecustomize.py`` put
   first on ``PYTHONPATH`` writes each process's peak at exit (one file per PID, so the
   ``accelerate launch`` child is covered): ``torch.cuda.max_memory_allocated()`` when the process
   used CUDA, else its peak RSS (``ru_maxrss``; not comparable with the estimate).

Nothing reaches the Hugging Face hub (``HF_HUB_OFFLINE=1`` and friends). On a GPU the table's
ratio is estimate / measured, the issue's goal being within 15%; ``--cpu-smoke`` runs two tiny
settings on CPU only to keep the pipeline runnable in CI (the RSS is printed, no ratio).

Usage:
    python benchmarks/estimate_through_cw.py                  # GPU, Llama-3.2-3B shape
    python benchmarks/estimate_through_cw.py --config path/to/config.json --layers 8
    python benchmarks/estimate_through_cw.py --cpu-smoke --json out.json
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from estimate_gpu import DEFAULT_CONFIG, TINY  # noqa: E402 - the same shapes as the plain-torch benchmark

REPO_OWNER = "cw-bench"
PEAK_DIR_ENV = "CW_BENCH_PEAK_DIR"
LORA_RANK = 16
GIB = 2**30
MIB = 2**20

# Nothing may reach the Hugging Face hub; CUDA stays visible (the CPU mode hides it in the runner).
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_DISABLED": "true",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
}

# Loaded by every Python process of the run (PYTHONPATH); touches nothing but a file at exit.
SITECUSTOMIZE = '''"""Written by benchmarks/estimate_through_cw.py: this process's peak memory, at exit."""
import atexit
import json
import os
import sys


def _cw_bench_peak():
    folder = os.environ.get("CW_BENCH_PEAK_DIR")
    if not folder:
        return
    record = {"pid": os.getpid(), "argv": list(sys.argv)}
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            record.update(kind="cuda", bytes=int(torch.cuda.max_memory_allocated()),
                          reserved_bytes=int(torch.cuda.max_memory_reserved()))
    except Exception as exc:  # report, never break the run's exit
        record["error"] = repr(exc)
    if "kind" not in record:
        import resource

        record.update(kind="rss", bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    path = os.path.join(folder, "peak-%d.json" % os.getpid())
    with open(path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)


atexit.register(_cw_bench_peak)


def _chain():
    """Run the sitecustomize this file shadows (a distribution's), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


try:
    _chain()
except Exception:
    pass
'''


@dataclass(frozen=True)
class Setting:
    """One measured run.

    Attributes:
        name: Row label (also the run name's stem).
        method: ``"full"`` or ``"lora"``.
        checkpointing: TRL's ``gradient_checkpointing``.
        max_length: TRL's ``max_length`` (packed: every sequence is this long).
        batch: ``per_device_train_batch_size``.
        dtype: TRL's ``dtype`` for loading the model; None leaves TRL's default (fp32).
    """

    name: str
    method: str
    checkpointing: bool
    max_length: int
    batch: int = 1
    dtype: str | None = "bfloat16"


GPU_SETTINGS = [
    Setting("full bf16", "full", False, 2048, 2),
    Setting("full bf16 ckpt", "full", True, 2048, 2),
    Setting("full bf16 ckpt 8k", "full", True, 8192),
    Setting("full fp32 default ckpt", "full", True, 1024, 2, dtype=None),
    Setting("lora bf16", "lora", False, 1024, 2),
    Setting("lora bf16 ckpt 4k", "lora", True, 4096, 2),
    Setting("lora bf16 bs4", "lora", False, 2048, 4),
]
CPU_SETTINGS = [
    Setting("full bf16", "full", False, 64, 2),
    Setting("lora bf16 ckpt", "lora", True, 128),
]


# --------------------------------------------------------------------------- model and data


def _vocabulary() -> list[str]:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    return letters + [a + b for a in letters for b in letters]


# The tests' and the runtime image's special tokens and chat template; only the vocabulary differs.
from cw_cli.testcluster.realnode.tiny_model import CHAT_TEMPLATE, SPECIALS  # noqa: E402


def build_tokenizer() -> Any:
    """A word-level tokenizer (one token per word, ~700 ids) with a chat template, built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + _vocabulary())}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="<|end|>", unk_token="<unk>", pad_token="<pad>",
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>", "</s>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def snapshot_dir(hub_cache: Path, repo_id: str, revision: str) -> Path:
    """A Hugging Face cache entry for ``repo_id`` (``refs/main`` -> ``snapshots/<revision>``)."""
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def build_model(config: dict[str, Any], folder: Path) -> None:
    """Save a random-initialised bf16 model of ``config``'s shape and the tokenizer into ``folder``.

    The config keeps its vocabulary size; only the special token ids are the tokenizer's.
    """
    import torch
    import transformers

    if any(folder.glob("model*.safetensors*")):
        return  # built by an earlier call with the same --workdir
    tok = build_tokenizer()
    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    fields.update(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = transformers.AutoConfig.for_model(config["model_type"], **fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    del model
    gc.collect()


def write_dataset(folder: Path, n_texts: int, n_words: int) -> Path:
    """``train.jsonl`` of ``{"text": ...}`` rows, each ``n_words`` tokens long."""
    rng = random.Random(0)
    words = _vocabulary()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w", encoding="utf-8") as handle:
        for _ in range(n_texts):
            handle.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(n_words))}) + "\n")
    return folder


# --------------------------------------------------------------------------- the user's config


def user_config(s: Setting, repo_id: str, cpu: bool, steps: int) -> dict[str, Any]:
    """The TRL SFT config a user would write for ``s`` (cw's ``gpu`` field included)."""
    config: dict[str, Any] = {
        "gpu": 1,
        "checkpoint_volume": "none",  # a benchmark keeps nothing
        "model_name_or_path": repo_id,
        "dataset_name": "./data",
        "max_length": s.max_length,
        "packing": True,
        "per_device_train_batch_size": s.batch,
        "gradient_accumulation_steps": 1,
        "gradient_checkpointing": s.checkpointing,
        "bf16": True,
        "optim": "adamw_torch_fused",
        "learning_rate": 1.0e-5,
        "max_steps": steps,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "seed": 0,
    }
    if s.dtype:
        config["dtype"] = s.dtype
    if s.method == "lora":
        config.update(use_peft=True, lora_r=LORA_RANK, lora_target_modules="all-linear")
    if cpu:
        config["use_cpu"] = True
    return config


def slug(name: str) -> str:
    """A run-name-safe form of a setting's name."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def write_config(folder: Path, s: Setting, config: dict[str, Any]) -> Path:
    """Write ``config`` as ``sft-<setting>.yaml`` in ``folder`` (beside ``./data``)."""
    import yaml

    path = folder / f"sft-{slug(s.name)}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# --------------------------------------------------------------------------- cw


def cw_command() -> list[str]:
    """The ``cw`` CLI of this interpreter's environment, else ``python -m cw_cli`` from the repo."""
    script = Path(sys.executable).parent / "cw"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "cw_cli"]


def cw_estimate(config_path: Path, env: dict[str, str], gpu_memory: str) -> dict[str, Any]:
    """``cw estimate trl sft CONFIG -o json`` as a user runs it.

    Raises:
        RuntimeError: The command failed or gave no trainer estimate.
    """
    command = [*cw_command(), "estimate", "trl", "sft", str(config_path), "-o", "json",
               "--gpu-memory", gpu_memory, "--no-hub"]
    # `python -m cw_cli` (no installed `cw`) imports cw_cli from this checkout.
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=config_path.parent,
                          env={**os.environ, **env, "PYTHONPATH": pythonpath}, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout)
    if not result.get("trainer"):
        raise RuntimeError(f"cw estimate gave no trainer estimate: {result.get('skipped')}; {result.get('notes')}")
    return result


def write_hook(folder: Path) -> Path:
    """The folder holding the peak-recording ``sitecustomize.py``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def run_through_cw(config_path: Path, run_name: str, work: Path, env: dict[str, str], hook: Path,
                   cpu: bool) -> dict[str, Any]:
    """Plan the run with cw and run its trainer container's command here, recording each process's peak.

    Returns:
        ``returncode``, ``command``, ``config_file`` (the ConfigMap's config.yaml the runner
        wrote), ``peaks`` (one record per Python process) and ``log`` (its last lines).
    """
    from cw_cli import api
    from cw_cli.localrun.runner import LocalRunner

    planned = api.plan(config_path, "trl", "sft", name=run_name, local=True)
    workdir, checkpoints, peaks = work / "run", work / "checkpoints", work / "peaks"
    peaks.mkdir(parents=True, exist_ok=True)
    # The runner puts the hook's folder in front of the container's PYTHONPATH (/etc/cw, mapped).
    runner = LocalRunner(planned.manifests, checkpoints, workdir=workdir, cpu_only=cpu,
                         extra_env={**env, "PYTHONPATH": str(hook), PEAK_DIR_ENV: str(peaks)})
    prepared = runner.prepare()
    lines: list[str] = []
    code = runner.run(lines.append)
    (work / "trainer.log").write_text("\n".join(lines))
    records = [json.loads(p.read_text()) for p in sorted(peaks.glob("peak-*.json"))]
    return {"returncode": code, "command": prepared.command, "config_file": str(prepared.config_file),
            "peaks": records, "log": lines[-40:]}


def measured_peak(records: list[dict[str, Any]], cpu: bool) -> dict[str, Any] | None:
    """The trainer process's record: the largest CUDA peak, or on CPU the largest RSS."""
    kind = "rss" if cpu else "cuda"
    found = [r for r in records if r.get("kind") == kind]
    return max(found, key=lambda r: r["bytes"]) if found else None


def measure(s: Setting, folder: Path, repo_id: str, env: dict[str, str], hook: Path, cpu: bool,
            gpu_memory: str, steps: int) -> dict[str, Any]:
    """Estimate and run one setting; the row of the table."""
    import yaml

    t0 = time.time()
    config_path = write_config(folder, s, user_config(s, repo_id, cpu, steps))
    estimate = cw_estimate(config_path, env, gpu_memory)
    work = folder.parent / "runs" / slug(s.name)
    shutil.rmtree(work, ignore_errors=True)  # no stale peaks or checkpoints from an earlier call
    ran = run_through_cw(config_path, f"bench-{slug(s.name)}", work, env, hook, cpu)
    trainer_config = yaml.safe_load(Path(ran["config_file"]).read_text())
    peak = measured_peak(ran["peaks"], cpu)
    trainer = estimate["trainer"]
    measured = peak["bytes"] if peak else None
    row = {
        "setting": s.name, "method": s.method, "checkpointing": s.checkpointing,
        "max_length": s.max_length, "batch": s.batch, "dtype": s.dtype or "float32 (TRL default)",
        "estimate_allocated_bytes": trainer["allocated_bytes"], "estimate_per_gpu_bytes": trainer["per_gpu_bytes"],
        "peak_phase": trainer["peak_phase"], "model_config": estimate["model_config"],
        "estimate_setup": {k: estimate["setup"].get(k) for k in
                           ("method", "weight_dtype", "seq_len", "micro_batch", "gradient_checkpointing", "packing")},
        "measured_kind": "rss" if cpu else "cuda_max_memory_allocated",
        "measured_bytes": measured,
        "measured_reserved_bytes": peak.get("reserved_bytes") if peak else None,
        "measured_argv": peak["argv"] if peak else None,
        "ratio": None if cpu or not measured else trainer["allocated_bytes"] / measured,
        "processes": len(ran["peaks"]),
        "returncode": ran["returncode"],
        "trained": any("train_runtime" in line for line in ran["log"]),
        "command": ran["command"],
        "config_file": ran["config_file"],
        "config_max_length": trainer_config.get("max_length"),
        "config_batch": trainer_config.get("per_device_train_batch_size"),
        "seconds": round(time.time() - t0, 1),
    }
    if ran["returncode"] != 0:
        row["log_tail"] = ran["log"]
    shutil.rmtree(work / "checkpoints", ignore_errors=True)  # a full fine-tune saves the whole model at the end
    return row


# --------------------------------------------------------------------------- main


def gpu_memory_flag() -> str | None:
    """One GPU's memory for ``--gpu-memory`` from nvidia-smi (no CUDA context in this process)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout.split()
    return f"{out[0]}MiB" if out else None


def table(rows: list[dict[str, Any]], cpu: bool) -> str:
    """The rows as a text table (GiB on GPU, MiB of RSS on CPU)."""
    unit, name = (MIB, "MiB") if cpu else (GIB, "GiB")
    measured = "RSS" if cpu else "measured"
    lines = [f"{'setting':24s} {'len':>5s} {'bs':>3s} {'estimate':>10s} {measured:>10s} {'est/meas':>8s} "
             f"{'per GPU':>9s}  phase", "-" * 86]
    for r in rows:
        value = r["measured_bytes"]
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        lines.append(
            f"{r['setting']:24s} {r['max_length']:5d} {r['batch']:3d} {r['estimate_allocated_bytes'] / unit:10.2f} "
            f"{(value or 0) / unit:10.2f} {ratio:>8s} {r['estimate_per_gpu_bytes'] / unit:9.2f}  {r['peak_phase']}"
        )
    return f"({name})\n" + "\n".join(lines)


def run_env(hf_home: Path, cpu: bool) -> dict[str, str]:
    """Variables set for every process on top of this one's: offline, a private Hugging Face
    cache, few threads on CPU. PYTHONPATH is left alone (the runner merges the container's)."""
    env = {**OFFLINE_ENV, "HF_HOME": str(hf_home), "HF_HUB_CACHE": str(hf_home / "hub"),
           "HF_DATASETS_CACHE": str(hf_home / "datasets")}
    if cpu:
        env["OMP_NUM_THREADS"] = str(min(2, os.cpu_count() or 1))
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def main(argv: list[str] | None = None) -> int:
    """Run the settings, print the table; 0 when every run trained and was measured."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="a config.json")
    parser.add_argument("--layers", type=int, help="keep only this many decoder layers")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="two tiny settings on CPU (keeps the pipeline runnable without a GPU)")
    parser.add_argument("--steps", type=int, help="max_steps per run (default 3 on GPU, 2 on CPU)")
    parser.add_argument("--only", action="append", help="run only the settings of this name (repeatable)")
    parser.add_argument("--workdir", type=Path, help="keep the model, configs and runs here (default: a temp folder)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)

    cpu = args.cpu_smoke
    gpu_memory = "80GB" if cpu else gpu_memory_flag()  # on CPU only the (unused) verdict reads it
    if not cpu and gpu_memory is None:
        print("no GPU (nvidia-smi): run with --cpu-smoke", file=sys.stderr)
        return 2
    config = json.loads(args.config.read_text())
    if cpu:
        config = {**config, **TINY}
        config.pop("rope_scaling", None)
    if args.layers:
        config = {**config, "num_hidden_layers": args.layers}
    settings = [s for s in (CPU_SETTINGS if cpu else GPU_SETTINGS) if not args.only or s.name in args.only]
    steps = args.steps or (2 if cpu else 3)

    work = (args.workdir or Path(tempfile.mkdtemp(prefix="cw-bench-"))).resolve()
    try:
        rows = _run_all(config, args.config, settings, work, cpu, gpu_memory, steps)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(_header(config, args.config, cpu))
    print(table(rows, cpu))
    if args.json:
        args.json.write_text(json.dumps({"device": "cpu" if cpu else _gpu_name(), "config": args.config.name,
                                         "layers": config["num_hidden_layers"], "rows": rows}, indent=2))
    return 0 if all(r["returncode"] == 0 and r["measured_bytes"] for r in rows) else 1


def _run_all(config: dict[str, Any], config_file: Path, settings: list[Setting], work: Path, cpu: bool,
             gpu_memory: str, steps: int) -> list[dict[str, Any]]:
    env = run_env(work / "hf", cpu)
    stem = config_file.stem.split("__")[-1] + ("-tiny" if cpu else "") + "-random"
    revision = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()
    repo_id = f"{REPO_OWNER}/{stem}"
    build_model(config, snapshot_dir(Path(env["HF_HUB_CACHE"]), repo_id, revision))
    configs = work / "configs"
    longest = max(s.max_length for s in settings)
    # Texts longer than max_length: packing truncates each to one full sequence.
    write_dataset(configs / "data", n_texts=16, n_words=longest + 16)
    hook = write_hook(work / "hook")
    rows = []
    for s in settings:
        rows.append(measure(s, configs, repo_id, env, hook, cpu, gpu_memory, steps))
        print(f"{s.name}: {rows[-1]['seconds']}s, exit {rows[-1]['returncode']}", file=sys.stderr)
    return rows


def _gpu_name() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "gpu"
    out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, check=False)
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "gpu"


def _header(config: dict[str, Any], config_file: Path, cpu: bool) -> str:
    import torch
    import transformers
    import trl

    where = "CPU (peak RSS, not comparable)" if cpu else _gpu_name()
    return (f"{config.get('model_type')} {config_file.name}, {config['num_hidden_layers']} layers, on {where}; "
            f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")


if __name__ == "__main__":
    sys.exit(main())
