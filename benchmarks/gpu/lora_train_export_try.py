"""A LoRA SFT run as cw renders it, on one real GPU: train, export (merge), try. Figures to JSON.

Runs where the GPU is (started by lora_train_export_try.sh), from the files render_run.py wrote
here with cw (benchmarks/gpu/rendered/). Stages, each timed:

1. assets: a random-initialised model of Qwen2.5-0.5B's shape (its config.json values; no weights
   are downloaded), saved with save_pretrained in bf16; a word-level tokenizer with a chat template
   built offline (as tests/training/conftest.py does); a JSONL chat dataset whose rows are longer
   than max_length, so every sequence is exactly max_length tokens.
2. train: the trainer container's command, exactly as rendered, with only paths rewritten
   (/etc/cw and /checkpoints to folders under --work; model_name_or_path, dataset_name and
   output_dir in config.yaml), its env and workingDir likewise. A sitecustomize hook (hook/) adds
   one TrainerCallback for step times and peak memory; nvidia-smi is sampled beside it.
3. export: the export container's command (``cw export lora-bench --merge``), paths rewritten, with
   no GPU visible since the export Job asks for none by default (``--gpu 0``).
4. try: the merged model answers one chat question through transformers' generate and the
   tokenizer's chat template. Not cw try's path (that starts the vLLM image; vLLM is not here).

Usage: python3 lora_train_export_try.py --work DIR --out DIR [--tiny]
    --tiny: a 2-layer model and 2 steps, for checking the whole script on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RENDERED = HERE / "rendered"
HOOK = HERE / "hook"

#: Qwen/Qwen2.5-0.5B's config.json (hub revision of 2024-09; values only, no weights).
QWEN25_05B = {
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "tie_word_embeddings": True, "vocab_size": 151936, "hidden_act": "silu", "use_sliding_window": False,
}  # fmt: skip
TINY = {**QWEN25_05B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
#: Config changes for --tiny only (the device run changes nothing but paths).
TINY_CONFIG = {"max_steps": 2, "per_device_train_batch_size": 2, "max_length": 64, "save_steps": 1, "logging_steps": 1}
#: Dense bf16 peak of the H100 SXM and H200 (NVIDIA's datasheets, without sparsity), FLOP/s.
PEAK_BF16 = 989.4e12
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Qwen2.5's ChatML form (without its default system message).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
QUESTION = "what is two plus three ?"


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


# --------------------------------------------------------------------------- assets


def make_words(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct made-up words of 2 to 4 syllables (the dataset's vocabulary)."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choices(syllables, k=rng.randint(2, 4))))
    return sorted(words)


def build_tokenizer(words: list[str]):
    """A byte-level BPE trained here on the dataset's words, as a Qwen2Tokenizer with ChatML.

    Qwen2's own tokenizer class (what AutoTokenizer picks for a qwen2 model: transformers 5 builds
    it from vocab and merges with Qwen2's pre-tokenizer) with a small vocabulary: real BPE
    tokenization, no download. The model keeps Qwen2.5's 151936-row embedding.
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
                                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])  # fmt: skip
    trainer = trainers.BpeTrainer(vocab_size=len(words) + 2000, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)  # fmt: skip
    corpus = [" ".join(words[i : i + 50]) + " " + QUESTION for i in range(0, len(words), 50)]
    core.train_from_iterator(corpus * 3, trainer)
    model = json.loads(core.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = Qwen2Tokenizer(vocab=model["vocab"], merges=merges, unk_token=None, bos_token=None,
                         eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"])  # fmt: skip
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = 32768
    return tok


def build_assets(work: Path, tiny: bool, rows: int, words_per_answer: int) -> dict:
    """The model folder and the dataset folder; returns their paths and the model's shape."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    rng = random.Random(0)
    words = make_words(rng, 4000)
    tok = build_tokenizer(words)
    shape = TINY if tiny else QWEN25_05B
    bos = tok.convert_tokens_to_ids("<|endoftext|>")  # Qwen2.5's bos_token_id is its <|endoftext|> too
    config = Qwen2Config(**shape, bos_token_id=bos, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         dtype="bfloat16")  # fmt: skip
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):  # random init on the GPU: seconds instead of a minute on CPU
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model_dir = work / "models" / "qwen2.5-0.5b-random"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    params = sum(p.numel() for p in model.parameters())
    del model
    data_dir = work / "data" / "chat"
    data_dir.mkdir(parents=True, exist_ok=True)
    lengths = []
    with open(data_dir / "train.jsonl", "w", encoding="utf-8") as handle:
        for row in range(rows):
            question = " ".join(rng.choices(words, k=32)) + " ?"
            answer = " ".join(rng.choices(words, k=words_per_answer)) + " ."
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            handle.write(json.dumps({"messages": messages}) + "\n")
            if row < 20:
                lengths.append(len(tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]))
    return {"model_dir": str(model_dir), "data_dir": str(data_dir), "params": params, "shape": shape, "rows": rows,
            "words_per_answer": words_per_answer, "tokens_per_row_min_of_20": min(lengths),
            "tokenizer_vocab": len(tok)}  # fmt: skip


# --------------------------------------------------------------------------- the pod's layout


def rewrite(value: str, etc: Path, checkpoints: Path) -> str:
    """A rendered path on the pod's filesystem, as a folder under --work."""
    for pod_path, here in (("/etc/cw", etc), ("/checkpoints", checkpoints)):
        if value == pod_path or value.startswith(pod_path + "/"):
            return str(here) + value[len(pod_path) :]
    return value


def lay_out(work: Path, assets: dict, tiny: bool) -> dict:
    """/etc/cw and /checkpoints under ``work``; the config with its paths rewritten."""
    import yaml

    etc, checkpoints = work / "etc" / "cw", work / "checkpoints"
    shutil.rmtree(etc, ignore_errors=True)
    shutil.copytree(RENDERED / "etc-cw", etc)
    config = yaml.safe_load((etc / "config.yaml").read_text(encoding="utf-8"))
    rendered = dict(config)
    config["model_name_or_path"] = assets["model_dir"]
    config["dataset_name"] = assets["data_dir"]
    config["output_dir"] = rewrite(config["output_dir"], etc, checkpoints)
    if tiny:
        import torch

        config.update(TINY_CONFIG, **({} if torch.cuda.is_available() else {"use_cpu": True}))  # bf16 on a CPU needs it
    (etc / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    trainer = json.loads((RENDERED / "trainer.json").read_text())
    export = json.loads((RENDERED / "export.json").read_text())
    changed = {k: [rendered.get(k), v] for k, v in config.items() if rendered.get(k) != v}
    return {"etc": etc, "checkpoints": checkpoints, "config": config, "changed": changed, "trainer": trainer, "export": export}


def pod_env(container: dict, etc: Path, checkpoints: Path, extra: dict) -> dict:
    env = {**os.environ, **OFFLINE}
    for entry in container.get("env", []):
        env[entry["name"]] = rewrite(str(entry.get("value", "")), etc, checkpoints)
    # Where this machine keeps the carried packages (the image has them in site-packages).
    carried = os.environ.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), carried) if p)
    env.update(extra)
    return env


# --------------------------------------------------------------------------- running and sampling


class GpuSampler:
    """nvidia-smi's memory.used of GPU 0, every 200 ms, while a stage runs."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.proc: subprocess.Popen | None = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader,nounits",
                                          "-lms", "200", "-i", "0"], stdout=subprocess.PIPE, text=True)  # fmt: skip
            self.util: list[int] = []
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                used, util = (int(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append(used)
            self.util.append(util)

    def stop(self) -> dict:
        if self.proc is None:
            return {"nvidia_smi": None}
        self.proc.terminate()
        self.proc.wait()
        busy = [u for u in self.util if u > 0]
        return {"peak_memory_used_mib": max(self.samples, default=None), "samples": len(self.samples),
                "mean_utilization_pct_when_busy": round(statistics.mean(busy), 1) if busy else None}  # fmt: skip


def run_logged(command: list[str], env: dict, cwd: Path, log: Path) -> tuple[int, float]:
    """Run ``command``, its output both to our stdout and to ``log``; returns (exit code, seconds)."""
    say(f"$ (cd {cwd} && {' '.join(command)})")
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            handle.write(line)
        code = proc.wait()
    return code, time.perf_counter() - start


# --------------------------------------------------------------------------- figures


def train_figures(stats: dict, shape: dict, max_length: int, peak: float) -> dict:
    """Tokens/s and MFU from the callback's step times and TRL's num_tokens log."""
    steps = stats["global_step"]
    tokens = max((e.get("num_tokens", 0) for e in stats["log_history"]), default=0)
    n_lora = stats["trainable_params"]
    n_base = stats["total_params"] - n_lora  # frozen weights; the tied embedding counted once (it is lm_head's matmul)
    layers, width = shape["num_hidden_layers"], shape["hidden_size"]
    attention = 12 * layers * width * max_length  # per token, forward + backward (PaLM's 12·L·H·Q·T, no causal halving)
    flops_6n = 6 * n_base + attention  # the usual convention: every weight gets a weight gradient
    flops_lora = 4 * n_base + 6 * n_lora + attention  # frozen base: forward 2N + activation grads 2N; LoRA: full 6N
    flops_hw = flops_lora + 2 * n_base + attention // 3  # + gradient checkpointing's second forward
    ends = [0.0, *stats["step_end_times_s"]]
    step_times = [b - a for a, b in zip(ends, ends[1:])]
    steady = step_times[min(5, len(step_times) - 1) :]  # skip the warm-up steps
    per_step = tokens / steps if steps else 0
    overall_tps = tokens / stats["train_begin_to_end_s"] if stats["train_begin_to_end_s"] else 0
    median_tps = per_step / statistics.median(steady) if steady else 0

    def mfu(per_token: float, tps: float) -> float:
        return round(per_token * tps / peak, 4)

    return {
        "steps": steps, "tokens": tokens, "tokens_per_step": per_step,
        "train_loop_s": round(stats["train_begin_to_end_s"], 3),
        "step_time_median_s": round(statistics.median(steady), 4) if steady else None,
        "step_time_first_s": round(step_times[0], 3) if step_times else None,
        "tokens_per_s_overall": round(overall_tps), "tokens_per_s_median_step": round(median_tps),
        "params_base": n_base, "params_lora": n_lora,
        "flops_per_token": {"6N+attn": flops_6n, "lora_4N+6Nlora+attn": flops_lora, "hardware_with_recompute": flops_hw},
        "mfu_6N_median_step": mfu(flops_6n, median_tps), "mfu_lora_median_step": mfu(flops_lora, median_tps),
        "hfu_median_step": mfu(flops_hw, median_tps), "mfu_6N_overall": mfu(flops_6n, overall_tps),
        "peak_bf16_flops": peak,
        "max_memory_allocated_gib": _gib(stats.get("max_memory_allocated_bytes")),
        "max_memory_reserved_gib": _gib(stats.get("max_memory_reserved_bytes")),
        "device_name": stats.get("device_name"),
        "losses": [e["loss"] for e in stats["log_history"] if "loss" in e],
    }  # fmt: skip


def _gib(value: int | None) -> float | None:
    return round(value / 2**30, 2) if value else None


def try_model(merged: Path) -> dict:
    """Load the merged model and answer one chat question; the times of each part."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(merged)
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.bfloat16, device_map=device)
    loaded = time.perf_counter()
    inputs = tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True).to(device)  # fmt: skip
    out = model.generate(**inputs, max_new_tokens=64, do_sample=False)
    new = out[0, inputs["input_ids"].shape[1] :]
    answer = tok.decode(new, skip_special_tokens=True)
    done = time.perf_counter()
    return {"load_s": round(loaded - start, 3), "generate_s": round(done - loaded, 3), "load_to_answer_s": round(done - start, 3),
            "new_tokens": int(new.numel()), "question": QUESTION, "answer": answer[:300],
            "path": "transformers generate + chat template (NOT cw try's vLLM image path)"}  # fmt: skip


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--pip-seconds", type=float, default=None)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    figures: dict = {"stages_s": {}, "tiny": args.tiny}
    if args.pip_seconds is not None:
        figures["stages_s"]["pip_install_wheels"] = args.pip_seconds
    fig_path = args.out / "figures.json"

    def save() -> None:
        fig_path.write_text(json.dumps(figures, indent=1, default=str) + "\n")

    import torch
    import transformers

    figures["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}
    for name in ("trl", "datasets", "peft", "accelerate"):
        try:
            figures["versions"][name] = __import__(name).__version__
        except Exception as exc:  # noqa: BLE001 - recorded, the stage that needs it fails later
            figures["versions"][name] = f"import failed: {exc}"
    figures["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    say(f"versions {figures['versions']} on {figures['device']}")

    start = time.perf_counter()
    words = 40 if args.tiny else 1100
    assets = build_assets(args.work, args.tiny, 64 if args.tiny else args.rows, words)
    figures["stages_s"]["build_assets"] = round(time.perf_counter() - start, 3)
    figures["model"] = {k: v for k, v in assets.items() if not k.endswith("_dir")}
    say(f"assets: {figures['model']}")
    pod = lay_out(args.work, assets, args.tiny)
    figures["config_changes_from_rendered"] = pod["changed"]
    figures["trainer_command_rendered"] = pod["trainer"]["command"]
    figures["export_command_rendered"] = pod["export"]["command"]
    save()

    # ---- train
    etc, checkpoints = pod["etc"], pod["checkpoints"]
    trainer = pod["trainer"]
    stats_path = args.work / "train_stats.json"
    command = [rewrite(part, etc, checkpoints) for part in trainer["command"] + trainer.get("args", [])]
    workdir = Path(rewrite(trainer["workingDir"], etc, checkpoints))
    workdir.mkdir(parents=True, exist_ok=True)  # the volume's run folder (cw_entrypoint creates it on a real volume too)
    env = pod_env(trainer, etc, checkpoints, {"CW_BENCH_STATS": str(stats_path), "HF_HOME": str(args.work / "hf-home")})
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(HOOK)])
    figures["trainer_command_run"] = command
    sampler = GpuSampler()
    code, seconds = run_logged(command, env, workdir, args.out / "train.log")
    figures["train_gpu"] = sampler.stop()
    figures["stages_s"]["train_command"] = round(seconds, 3)
    figures["train_exit_code"] = code
    save()
    if code != 0 or not stats_path.is_file():
        say(f"training failed (exit {code}); see train.log")
        return 1
    stats = json.loads(stats_path.read_text())
    shutil.copy(stats_path, args.out / "train_stats.json")
    figures["train"] = train_figures(stats, assets["shape"], pod["config"]["max_length"], PEAK_BF16)
    figures["stages_s"]["train_loop"] = figures["train"]["train_loop_s"]
    figures["output_dir"] = sorted(p.name for p in Path(pod["config"]["output_dir"]).iterdir())
    save()

    # ---- export (the export Job asks for no GPU by default: none visible here either)
    export = pod["export"]
    command = [rewrite(part, etc, checkpoints) for part in export["command"]]
    env = pod_env(export, etc, checkpoints, {"CUDA_VISIBLE_DEVICES": "", "HF_HOME": str(args.work / "hf-home")})
    figures["export_command_run"] = command
    code, seconds = run_logged(command, env, args.work, args.out / "export.log")
    figures["stages_s"]["export_merge_cpu"] = round(seconds, 3)
    figures["export_exit_code"] = code
    save()
    if code != 0:
        say(f"export failed (exit {code}); see export.log")
        return 1
    merged = Path(pod["config"]["output_dir"]) / "exported" / "final-merged"
    manifest = json.loads((merged / "export.json").read_text())
    figures["export"] = {"folder": str(merged), "files": {k: v["size"] for k, v in manifest["files"].items()},
                         "bytes": sum(v["size"] for v in manifest["files"].values())}  # fmt: skip

    # ---- try
    figures["try"] = try_model(merged)
    figures["stages_s"]["try_load_to_answer"] = figures["try"]["load_to_answer_s"]
    save()
    say(f"figures: {json.dumps(figures['stages_s'])}")
    say(f"train: {json.dumps({k: v for k, v in figures['train'].items() if k != 'losses'})}")
    say(f"try: {json.dumps(figures['try'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
