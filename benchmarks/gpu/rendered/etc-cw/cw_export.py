"""cw's export step: a run's checkpoint turned into a model ready to use, on the checkpoint volume.

Copied verbatim into the export Job's ConfigMap (key ``cw_export.py``), so it must stay a single
file with no cw imports. The export Job (``cw export RUN``) runs::

    python3 /etc/cw/cw_export.py --run-dir /checkpoints/RUN [--checkpoint final|latest|N] [--merge]
        [--push-to-hub ORG/NAME [--private]] [--overwrite]

What it exports:

* ``final`` (the default): the model the trainer saved in its output folder at the end;
  ``latest``: the newest complete ``checkpoint-N`` (one whose ``trainer_state.json`` reads, which
  the Trainer writes last, so one being written is never taken); ``N``: ``checkpoint-N``.
* A full model: its weights, config, generation config and tokenizer, without the optimizer,
  scheduler and RNG state a checkpoint also holds. A LoRA adapter: the adapter and tokenizer;
  with ``--merge``, the adapter merged into its base model (peft's ``merge_and_unload``), saved
  as safetensors with the tokenizer.

The result goes to ``RUN-DIR/exported/<final|checkpoint-N>[-merged]``, written in a sibling
folder and renamed into place when complete, with ``export.json`` listing each file's size and
SHA-256. An existing export is kept unless ``--overwrite``. ``--push-to-hub`` then uploads it
(``HF_TOKEN`` from the run's Secret). Exit codes: 0 done, 2 nothing to export or a bad choice,
3 the export exists, 1 anything else (the traceback says what).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

_PREFIX = "[cw-export]"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
WEIGHT_PATTERNS = ("model.safetensors", "model-*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin",
                   "pytorch_model.bin.index.json")  # fmt: skip
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
#: What a checkpoint holds besides the model: never part of an export.
TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin")
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
               "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
               "chat_template.json", "preprocessor_config.json", "processor_config.json")  # fmt: skip
NOTHING, EXISTS = 2, 3


class ExportError(Exception):
    """A choice that cannot be exported; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = NOTHING) -> None:
        super().__init__(message)
        self.code = code


def say(message: str) -> None:
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)


def has_model(folder: Path) -> bool:
    """Whether ``folder`` holds a model or an adapter the Trainer saved."""
    return any(any(folder.glob(pattern)) for pattern in (*WEIGHT_PATTERNS, *ADAPTER_FILES))


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """The run's complete ``checkpoint-N`` folders, oldest first."""
    found = []
    for child in run_dir.iterdir() if run_dir.is_dir() else []:
        match = _CHECKPOINT.match(child.name)
        if not (match and child.is_dir()):
            continue
        try:
            json.loads((child / "trainer_state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written, or interrupted while saving
        found.append((int(match.group(1)), child))
    return sorted(found)


def choose(run_dir: Path, checkpoint: str) -> tuple[Path, str]:
    """The folder to export and its label (``final`` or ``checkpoint-N``).

    Raises:
        ExportError: Nothing to export for that choice (the message says what there is).
    """
    checkpoints = complete_checkpoints(run_dir)
    listed = ", ".join(path.name for _, path in checkpoints) or "none"
    if checkpoint == "final":
        if has_model(run_dir):
            return run_dir, "final"
        raise ExportError(f"{run_dir} holds no final model (the run may still be training, or it failed); "
                          f"complete checkpoints: {listed}; export one with --checkpoint latest or --checkpoint N")  # fmt: skip
    if checkpoint == "latest":
        if not checkpoints:
            raise ExportError(f"{run_dir} holds no complete checkpoint yet")
        return checkpoints[-1][1], checkpoints[-1][1].name
    wanted = f"checkpoint-{int(checkpoint)}"
    for _, path in checkpoints:
        if path.name == wanted:
            return path, wanted
    raise ExportError(f"{run_dir}/{wanted} is not a complete checkpoint; complete checkpoints: {listed}")


def _copy_files(source: Path, dest: Path, names: list[str]) -> None:
    for name in names:
        shutil.copy2(source / name, dest / name)


def _model_files(source: Path) -> list[str]:
    names = {p.name for pattern in WEIGHT_PATTERNS for p in source.glob(pattern)}
    names |= {name for name in MODEL_FILES if (source / name).is_file()}
    return sorted(names)


def _adapter_files(source: Path) -> list[str]:
    keep = set(ADAPTER_FILES) | set(MODEL_FILES) - {"config.json", "generation_config.json"}
    return sorted(name for name in keep if (source / name).is_file())


def merge(source: Path, dest: Path) -> None:
    """Merge the LoRA adapter in ``source`` into its base model and save both in ``dest``."""
    import torch
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoTokenizer

    base = json.loads((source / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
    say(f"merging the adapter in {source} into its base model {base}")
    model = AutoPeftModelForCausalLM.from_pretrained(str(source), dtype=torch.bfloat16 if torch.cuda.is_available() else "auto")
    merged = model.merge_and_unload()
    merged.save_pretrained(str(dest), safe_serialization=True)
    tokenizer_source = source if (source / "tokenizer_config.json").is_file() else base
    AutoTokenizer.from_pretrained(str(tokenizer_source)).save_pretrained(str(dest))


def manifest(folder: Path, source: Path, label: str, merged: bool) -> dict:
    """``export.json``: where the export came from and each file's size and SHA-256."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        files[path.relative_to(folder).as_posix()] = {"size": path.stat().st_size, "sha256": digest.hexdigest()}
    return {"source": str(source), "checkpoint": label, "merged": merged, "files": files}


def export(run_dir: Path, checkpoint: str, do_merge: bool, overwrite: bool) -> Path:
    """Export one checkpoint of the run in ``run_dir``; returns the finished folder.

    Raises:
        ExportError: Nothing to export, a merge without an adapter, or an export already there.
    """
    source, label = choose(run_dir, checkpoint)
    adapter = (source / "adapter_config.json").is_file()
    if do_merge and not adapter:
        raise ExportError(f"{source} holds a full model, not a LoRA adapter: there is nothing to merge; drop --merge")
    dest = run_dir / "exported" / (label + ("-merged" if do_merge else ""))
    if dest.exists() and not overwrite:
        raise ExportError(f"{dest} exists already (an earlier export); --overwrite replaces it", EXISTS)
    work = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if do_merge:
        merge(source, work)
    else:
        _copy_files(source, work, _adapter_files(source) if adapter else _model_files(source))
    (work / "export.json").write_text(json.dumps(manifest(work, source, label, do_merge), indent=1) + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    work.rename(dest)  # whole or not at all: a reader never sees a half-written export
    return dest


def push(folder: Path, repo: str, private: bool) -> str:
    """Upload the export to the Hub (token: ``HF_TOKEN``); returns the repository's URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=os.environ.get("HF_TOKEN"))
    url = api.create_repo(repo, private=private, exist_ok=True)
    api.upload_folder(folder_path=str(folder), repo_id=repo, commit_message=f"cw export of {folder.name}")
    return str(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cw_export.py", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--checkpoint", default="final")
    parser.add_argument("--merge", action="store_true")
    parser.add_argument("--push-to-hub", metavar="REPO")
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if args.checkpoint not in ("final", "latest") and not re.fullmatch(r"[0-9]{1,11}", args.checkpoint):
        say(f"--checkpoint {args.checkpoint!r}: expected final, latest or a step number")
        return NOTHING
    try:
        dest = export(args.run_dir, args.checkpoint, args.merge, args.overwrite)
    except ExportError as exc:
        say(str(exc))
        return exc.code
    say(f"exported to {dest}")
    if args.push_to_hub:
        say(f"pushed to {push(dest, args.push_to_hub, args.private)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
