"""`cw artifacts --local` and `cw download --local`: what a `--local` run left in ./cw-local/<run>.

The listing is the pod-side lister's (cw_cli/runtime/cw_artifacts.py), run here as the reader pod
runs it, so a local run and a cluster run list the same way. A download copies the chosen folder
(``final``: the final model's files beside the checkpoints, not the checkpoints) file by file,
each written as ``NAME.partial``, checked against the source's size and SHA-256 and renamed; a
second call goes on where the first stopped, as the cluster download does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cw_cli.errors import ConfigError, Conflict, CwError, NotFound
from cw_cli.frameworks.runtime_files import ARTIFACTS_FILE, runtime_file
from cw_cli.plain_files import sha256_of
from cw_cli.render.artifact_choice import choose_source

#: Where `cw ... --local` keeps a run's /checkpoints (cw_cli/cli/local_run.py).
LOCAL_ROOT = "cw-local"
#: Written by the local runner beside the run's folders: where its output folder is.
RECORD = ".cw-local-run.json"
#: The record in DEST of what is being downloaded there (the cluster download's name).
MARKER = ".cw-download.json"
_CHECKPOINT = re.compile(r"^checkpoint-\d+$")
_WEIGHTS = re.compile(r"^(model.*\.safetensors|pytorch_model.*\.bin|adapter_model\.(safetensors|bin))$")
_MAX_DEPTH = 4


def _holds_outputs(folder: Path) -> bool:
    try:
        return any((_CHECKPOINT.match(p.name) and p.is_dir()) or _WEIGHTS.match(p.name) for p in folder.iterdir())
    except OSError:
        return False


def _search(folder: Path, depth: int) -> list[Path]:
    """Folders under ``folder`` holding checkpoints or weights (not inside one), at most ``depth`` deep."""
    if _holds_outputs(folder):
        return [folder]
    if depth == 0:
        return []
    found: list[Path] = []
    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    except OSError:
        return []
    for child in children:
        found += _search(child, depth - 1)
    return found


def local_run_dir(target: str, base: Path | None = None) -> Path:
    """The output folder of the local run ``target`` names: a run name (``./cw-local/<name>``), or
    a path to that folder or to the run's output folder inside it.

    Raises:
        NotFound: No such folder, or nothing a trainer saves under it.
        ConfigError: Several output folders under it (the message lists them).
    """
    base = base or Path.cwd()
    given = Path(target).expanduser()
    candidate = given if (os.sep in target or given.is_dir()) and given.is_dir() else base / LOCAL_ROOT / target
    if not candidate.is_dir():
        raise NotFound(f"no local run {target[:80]!r}: {candidate} is not a folder",
                       hint=f"a --local run keeps its outputs in ./{LOCAL_ROOT}/<run>; run this where you ran it")  # fmt: skip
    record = candidate / RECORD
    if record.is_file():
        try:
            run_dir = candidate / str(json.loads(record.read_text(encoding="utf-8"))["run_dir"])
        except (OSError, ValueError, KeyError, TypeError):
            run_dir = candidate
        if run_dir.resolve().is_relative_to(candidate.resolve()) and run_dir.is_dir():
            return run_dir
    found = _search(candidate, _MAX_DEPTH)
    if not found:
        nested = candidate / candidate.name  # the trainer's working folder: /checkpoints/<run>
        return nested if nested.is_dir() else candidate
    if len(found) > 1:
        raise ConfigError([f"{candidate} holds the outputs of several folders: {', '.join(str(p) for p in found[:5])}"],
                          hint="give the one you mean as the path")  # fmt: skip
    return found[0]


def list_local_artifacts(target: str, base: Path | None = None) -> dict[str, Any]:
    """What the local run left, as ``cw artifacts`` lists a cluster run (cw_artifacts.py's document).

    Raises:
        NotFound: No such local run.
        CwError: The lister failed.
    """
    run_dir = local_run_dir(target, base).resolve()
    done = subprocess.run([sys.executable, "-c", runtime_file(ARTIFACTS_FILE), str(run_dir)], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL, cwd=run_dir)  # fmt: skip
    if done.returncode != 0:
        raise CwError(f"listing {run_dir} failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    listing = json.loads(done.stdout)
    listing["run_dir"] = str(run_dir)
    return dict(listing)


def _files(folder: Path, recursive: bool) -> list[Path]:
    if not recursive:
        return sorted(p.relative_to(folder) for p in folder.iterdir() if p.is_file() and not p.is_symlink())
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _claim(dest: Path, origin: dict[str, str]) -> None:
    if dest.exists() and not dest.is_dir():
        raise Conflict(f"{dest} exists and is not a folder", hint="give a new folder")
    if dest.is_dir() and any(dest.iterdir()):
        try:
            earlier = json.loads((dest / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise Conflict(f"{dest} exists and holds other files", hint="give a new or empty folder") from None
        if earlier != origin:
            raise Conflict(f"{dest} holds a download of {earlier.get('run')} {earlier.get('source')}", hint="give another folder")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MARKER).write_text(json.dumps(origin, sort_keys=True) + "\n", encoding="utf-8")


def download_local(
    target: str, which: str, dest: Path, started: Callable[[int, int], None] = lambda total, have: None,
    progress: Callable[[int], None] = lambda size: None, base: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Copy what ``which`` names of the local run ``target`` into ``dest``, verified file by file.

    Returns:
        ``{"source", "dest", "files", "bytes", "resumed_bytes"}``, as the cluster download.

    Raises:
        NotFound: No such local run.
        ConfigError: Nothing of that name, or a checkpoint still being written.
        Conflict: ``dest`` holds other files.
        CwError: Not enough room, or a copy that differs from its source.
    """
    chosen = choose_source(list_local_artifacts(target, base), which)
    source, recursive = Path(chosen.folder), not chosen.top
    dest = dest.expanduser()
    if dest.resolve().is_relative_to(source.resolve()):
        raise ConfigError([f"{dest} is inside {source}: the copy would copy itself"], hint="give a folder elsewhere")
    names = _files(source, recursive)
    sizes = {name: (source / name).stat().st_size for name in names}
    try:
        _claim(dest, {"run": str(local_run_dir(target, base).resolve()), "namespace": "local", "source": str(source)})
    except OSError as exc:  # /proc, /sys, a read-only disk: the destination is the user's choice
        raise ConfigError([f"{dest}: cannot write there ({exc.strerror or exc})"], hint="give a folder you can write") from None
    have = {name: sizes[name] for name in names
            if (dest / name).is_file() and (dest / name).stat().st_size == sizes[name]
            and sha256_of(dest / name) == sha256_of(source / name)}  # fmt: skip
    total, resumed = sum(sizes.values()), sum(have.values())
    free = shutil.disk_usage(dest).free
    if total - resumed > free:
        raise CwError(f"{dest} has {free / 2**30:.1f} GiB free, and {(total - resumed) / 2**30:.1f} GiB are left to copy",
                      hint="free some space or choose a folder on a larger disk")  # fmt: skip
    started(total, resumed)
    for name in names:
        if name in have:
            continue
        _copy_verified(source / name, dest / name, progress)
    return {"source": str(source), "dest": str(dest), "files": len(names), "bytes": total, "resumed_bytes": resumed}


def _copy_verified(source: Path, dest: Path, progress: Callable[[int], None]) -> None:
    """Copy through ``NAME.partial``, hashing what is read; rename only when the written file's size
    and SHA-256 match the source's."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    with open(source, "rb") as reader, open(partial, "wb") as writer:
        for block in iter(lambda: reader.read(1 << 20), b""):
            digest.update(block)
            writer.write(block)
            progress(len(block))
    if partial.stat().st_size != source.stat().st_size or sha256_of(partial) != digest.hexdigest():
        partial.unlink(missing_ok=True)
        raise CwError(f"{dest} arrived different from {source} (size or SHA-256): nothing was kept", hint="run it again")
    partial.replace(dest)
