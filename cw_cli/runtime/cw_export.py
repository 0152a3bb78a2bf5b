"""cw's export step: a run's checkpoint turned into a model ready to use, on the checkpoint volume.

Copied verbatim into the export Job's ConfigMap (key ``cw_export.py``), so it must stay a single
file with no cw imports. The export Job (``cw export RUN``) runs::

    python3 /etc/cw/cw_export.py --run-dir /checkpoints/RUN [--checkpoint final|latest|N] [--merge]
        [--push-to-hub ORG/NAME [--private]] [--to s3://BUCKET/PATH] [--overwrite]

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
SHA-256. An existing export is kept unless ``--overwrite``: without a destination that is exit 3;
with one, the finished export is uploaded as it is. ``--push-to-hub`` uploads it to the Hub
(``HF_TOKEN`` from the run's Secret); ``--to URL`` copies it to object storage through fsspec
(``s3://`` with s3fs, ``gs://`` with gcsfs, ``az://``/``abfs://`` with adlfs; the export Job
pip-installs the driver first), with the credentials the driver reads from the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ... from Secrets). Each
file is streamed from disk (multipart for large ones), its size checked on the far side, and
``export.json`` goes last: once it is there, the upload is whole. Exit codes: 0 done, 2 nothing
to export or a bad choice, 3 the export exists, 4 the upload failed or arrived short, 1 anything
else (the traceback says what).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path

_PREFIX = "[cw-export]"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
WEIGHT_PATTERNS = ("model.safetensors", "model-*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin",
                   "pytorch_model.bin.index.json")  # fmt: skip
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
#: What a checkpoint holds besides the model: never part of an export.
COMPLETE_MARKER = ".cw-complete"  # cw_fault.COMPLETE_MARKER
TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin")
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
               "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
               "chat_template.json", "preprocessor_config.json", "processor_config.json")  # fmt: skip
NOTHING, EXISTS, UPLOAD = 2, 3, 4
#: fsspec's driver package for each URL scheme ``--to`` takes (the export Job installs it).
STORAGE_DRIVERS = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs"}
#: A bucket (or container) name as S3, GCS and Azure all accept it: 3-63 of [a-z0-9.-], no '..'.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
#: A key segment: printable, no '/', never '.' or '..' (each store treats those differently).
_SEGMENT = re.compile(r"[A-Za-z0-9!_.*'()=+,@~-]{1,255}")
#: Seconds between progress lines of a long upload.
PROGRESS_EVERY_S = 30.0


class ExportError(Exception):
    """A choice that cannot be exported; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = NOTHING) -> None:
        super().__init__(message)
        self.code = code


def say(message: str) -> None:
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)


def destination_problem(url: str) -> str | None:
    """What is wrong with a ``--to`` URL (None when it is ``SCHEME://BUCKET[/PATH]`` with a known scheme).

    cw runs this same function before it creates the Job (``cw_cli/render/export.py`` imports it).
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in STORAGE_DRIVERS:
        return f"expected s3://BUCKET/PATH (or {', '.join(f'{s}://' for s in STORAGE_DRIVERS if s != 's3')})"
    bucket, _, path = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        return f"bucket {bucket[:70]!r}: 3 to 63 lower-case letters, digits, '.' or '-'"
    segments = path.rstrip("/").split("/") if path.strip("/") else []
    for segment in segments:
        if not _SEGMENT.fullmatch(segment) or segment in (".", ".."):
            return f"path segment {segment[:70]!r}: letters, digits and !_.*'()=+,@~- only, never empty, '.' or '..'"
    if len(rest) > 900:
        return "longer than 900 characters"
    return None


def has_model(folder: Path) -> bool:
    """Whether ``folder`` holds a model or an adapter the Trainer saved."""
    return any(any(folder.glob(pattern)) for pattern in (*WEIGHT_PATTERNS, *ADAPTER_FILES))


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """The run's complete ``checkpoint-N`` folders, oldest first."""
    found = []
    folders = [c for c in (run_dir.iterdir() if run_dir.is_dir() else []) if _CHECKPOINT.match(c.name) and c.is_dir()]
    # cw_fault marks each checkpoint all ranks finished (cw_entrypoint's rule): where any is marked, all must be.
    marked = any((child / COMPLETE_MARKER).is_file() for child in folders)
    for child in folders:
        match = _CHECKPOINT.match(child.name)
        assert match is not None
        try:
            json.loads((child / "trainer_state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written, or interrupted while saving
        if marked and not (child / COMPLETE_MARKER).is_file():
            continue  # cut short after trainer_state.json, before every rank was done
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


def export(run_dir: Path, checkpoint: str, do_merge: bool, overwrite: bool, reuse: bool = False) -> Path:
    """Export one checkpoint of the run in ``run_dir``; returns the finished folder.

    Args:
        reuse: An earlier export of the same checkpoint and form is returned as it is (for an
            upload); without it, an existing export is an error unless ``overwrite``.

    Raises:
        ExportError: Nothing to export, a merge without an adapter, or an export already there.
    """
    source, label = choose(run_dir, checkpoint)
    adapter = (source / "adapter_config.json").is_file()
    if do_merge and not adapter:
        raise ExportError(f"{source} holds a full model, not a LoRA adapter: there is nothing to merge; drop --merge")
    dest = run_dir / "exported" / (label + ("-merged" if do_merge else ""))
    if dest.exists() and not overwrite and reuse and (dest / "export.json").is_file():
        say(f"{dest} exists already (an earlier export): uploading it as it is")
        return dest
    if dest.exists() and not overwrite:
        raise ExportError(f"{dest} exists already (an earlier export); --overwrite replaces it", EXISTS)
    # Two export pods may share the volume, each as pid 1: the host name tells them apart.
    work = dest.with_name(f".{dest.name}.partial-{socket.gethostname()}-{os.getpid()}")
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


class _Progress:
    """One line per file, and one every ``PROGRESS_EVERY_S`` seconds within a long file."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.started, self.last = total, 0, time.monotonic(), time.monotonic()

    def add(self, size: int) -> None:
        self.done += size
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.line()

    def line(self) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        say(f"uploaded {self.done / 2**20:.0f} of {self.total / 2**20:.0f} MiB in {elapsed:.0f} s "
            f"({self.done / 2**20 / elapsed:.1f} MiB/s)")  # fmt: skip


def upload(folder: Path, url: str) -> str:
    """Copy the export in ``folder`` to ``url`` (fsspec), each file checked by size on the far side.

    ``export.json`` goes last, so a reader that finds it there finds every file it lists.

    Raises:
        ExportError: The URL is bad, the driver is missing, or a file arrived short (exit 4).
    """
    problem = destination_problem(url)
    if problem:
        raise ExportError(f"--to {url[:100]!r}: {problem}")
    try:
        import fsspec
        from fsspec.callbacks import Callback
    except ImportError:
        raise ExportError("fsspec is not installed in the export image: pip install fsspec " +
                          STORAGE_DRIVERS[url.partition("://")[0]], UPLOAD) from None  # fmt: skip
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise ExportError(f"--to {url}: {exc}", UPLOAD) from None
    root = root.rstrip("/")
    listed = json.loads((folder / "export.json").read_text(encoding="utf-8"))["files"]
    names = sorted(name for name in listed if name != "export.json") + ["export.json"]
    sizes = {name: (folder / name).stat().st_size for name in names}
    progress = _Progress(sum(sizes.values()))

    class Reporting(Callback):  # fsspec's own base class: put_file sets its size and value
        seen = 0

        def call(self, *args: object, **kwargs: object) -> None:
            progress.add(self.value - self.seen)
            self.seen = self.value

    say(f"uploading {len(names)} files ({progress.total / 2**20:.1f} MiB) to {url}")
    for name in names:
        remote = f"{root}/{name}"
        try:
            fs.put_file(str(folder / name), remote, callback=Reporting())
            arrived = fs.info(remote).get("size")
        except Exception as exc:  # the driver's own errors (auth, network, quota) end the export here
            raise ExportError(f"uploading {name} to {url} failed: {type(exc).__name__}: {exc}", UPLOAD) from None
        if arrived != sizes[name]:
            raise ExportError(f"{url}/{name} holds {arrived} bytes after the upload, not {sizes[name]}", UPLOAD)
        say(f"  {name}: {sizes[name]} bytes")
    progress.line()
    return f"{url.rstrip('/')}/"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cw_export.py", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--checkpoint", default="final")
    parser.add_argument("--merge", action="store_true")
    parser.add_argument("--push-to-hub", metavar="REPO")
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--to", metavar="URL")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if args.checkpoint not in ("final", "latest") and not re.fullmatch(r"[0-9]{1,11}", args.checkpoint):
        say(f"--checkpoint {args.checkpoint!r}: expected final, latest or a step number")
        return NOTHING
    problem = destination_problem(args.to) if args.to else None
    if problem:  # before the export: a bad URL costs nothing
        say(f"--to {args.to[:100]!r}: {problem}")
        return NOTHING
    if args.push_to_hub:
        try:  # the Hub's own rules, before the export (cw checked the same ones before the Job)
            from huggingface_hub.utils import validate_repo_id

            validate_repo_id(args.push_to_hub)
        except ImportError:
            pass  # push() says so
        except ValueError as exc:  # HFValidationError
            say(f"--push-to-hub {args.push_to_hub[:100]!r}: {exc}")
            return NOTHING
    try:
        dest = export(args.run_dir, args.checkpoint, args.merge, args.overwrite, reuse=bool(args.to or args.push_to_hub))
        say(f"exported to {dest}")
        if args.to:
            say(f"uploaded to {upload(dest, args.to)}")
    except ExportError as exc:
        say(str(exc))
        return exc.code
    if args.push_to_hub:
        say(f"pushed to {push(dest, args.push_to_hub, args.private)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
