"""`cw download RUN DEST`: copy a checkpoint, the final model or an export of a run from its
volume to this machine, through the API server, as `kubectl cp` does.

Each file is streamed to disk as it arrives (never held in memory), written as ``NAME.partial``
and renamed once its size and SHA-256 (computed in the pod) match. An interrupted download goes
on where it stopped: whole files already verified are kept, a partial one continues from its
size. A folder that is not an earlier download of the same source is never written into, and
the local disk must have room for what is left before anything is copied.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct

from cw_cli.errors import ConfigError, Conflict, CwError
from cw_cli.frameworks.runtime_files import ARTIFACTS_FILE, FETCH_FILE
from cw_cli.k8s.artifacts import Reader, reader
from cw_cli.k8s.connection import ClusterTarget, Kube

#: The record in DEST of what is being downloaded there, so a second call can go on.
MARKER = ".cw-download.json"
_CHUNK_PROGRESS = Callable[[int], None]


class Source(Struct, frozen=True):
    """What to download: a folder of the run's, relative to the volume's root."""

    folder: str
    label: str


def choose_source(listing: dict[str, Any], which: str) -> Source:
    """The folder ``which`` names: ``final``, ``latest``, a step number or ``export:NAME``.

    Raises:
        ConfigError: Not there (the message lists what is), or a checkpoint still being written.
    """
    items = listing.get("artifacts") or []
    checkpoints = [a for a in items if a["kind"] == "checkpoint"]
    complete = [a for a in checkpoints if a["complete"]]
    there = ", ".join([*(f"checkpoint {a['step']}" for a in complete), *(a["kind"] for a in items if a["kind"] == "final"),
                       *(f"export:{Path(a['path']).name}" for a in items if a["kind"] == "export")]) or "nothing yet"  # fmt: skip
    chosen: dict[str, Any] | None = None
    if which == "final":
        chosen = next((a for a in items if a["kind"] == "final"), None)
    elif which == "latest":
        chosen = complete[-1] if complete else None
    elif which.startswith("export:"):
        chosen = next((a for a in items if a["kind"] == "export" and Path(a["path"]).name == which[7:]), None)
    elif re.fullmatch(r"[0-9]{1,11}", which):
        chosen = next((a for a in checkpoints if a["step"] == int(which)), None)
        if chosen is not None and not chosen["complete"]:
            raise ConfigError([f"checkpoint {which} is being written (no trainer_state.json yet): never half a checkpoint"],
                              hint="download --checkpoint latest, or wait until it is complete")  # fmt: skip
    else:
        raise ConfigError([f"--checkpoint {which[:40]!r}: expected final, latest, a step number or export:NAME"])
    if chosen is None:
        raise ConfigError([f"the run has no {which} to download; there: {there}"])
    path = str(chosen["path"])
    label = f"checkpoint-{which}" if which.isdecimal() and which.isascii() else which
    return Source(folder=path.removeprefix("/checkpoints/") if path.startswith("/") else path, label=label)


def _verified(path: Path, size: int, sha256: str) -> bool:
    if not path.is_file() or path.stat().st_size != size:
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest() == sha256


def _claim_destination(dest: Path, origin: dict[str, str]) -> None:
    """Refuse a folder that holds anything but an earlier download of the same source."""
    marker = dest / MARKER
    if dest.exists() and not dest.is_dir():
        raise Conflict(f"{dest} exists and is not a folder", hint="give a new folder")
    if dest.is_dir() and any(dest.iterdir()):
        try:
            earlier = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise Conflict(f"{dest} exists and holds other files", hint="give a new or empty folder") from None
        if earlier != origin:
            raise Conflict(f"{dest} holds a download of {earlier.get('run')} {earlier.get('source')}",
                           hint="give another folder")  # fmt: skip
    dest.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(origin, sort_keys=True) + "\n", encoding="utf-8")


def download(
    kube: Kube, target: ClusterTarget, run_name: str, which: str, dest: Path,
    started: Callable[[int, int], None] = lambda total, done: None, progress: _CHUNK_PROGRESS = lambda n: None,
) -> dict[str, Any]:  # fmt: skip
    """Download what ``which`` names of the run into ``dest``.

    Args:
        started: Called with the total bytes and the bytes already there, once they are known.
        progress: Called with each chunk's size as it is written.

    Returns:
        ``{"source", "dest", "files", "bytes", "resumed_bytes"}``.

    Raises:
        NotFound: No such run, or its volume is gone.
        ConfigError: Nothing of that name, or a checkpoint still being written.
        Conflict: ``dest`` holds other files.
        CwError: Not enough room here, or a file that arrived different from the pod's.
    """
    with reader(kube, target, run_name) as pod:
        listing = json.loads(_checked(pod.python(ARTIFACTS_FILE, pod.relative_run_dir, timeout_s=600), "listing"))
        source = choose_source(listing, which)
        files = json.loads(_checked(pod.python(FETCH_FILE, "list", source.folder, timeout_s=3600), "hashing"))["files"]
        _claim_destination(dest, {"run": run_name, "namespace": kube.namespace, "source": source.folder})
        total = sum(int(f["size"]) for f in files)
        there = {f["path"]: _there(dest, f) for f in files}
        have = sum(there.values())
        check_room(dest, total - have)
        started(total, have)
        for item in files:
            _fetch(pod, source, dest, item, there[item["path"]], progress)
    return {"source": source.folder, "dest": str(dest), "files": len(files), "bytes": total, "resumed_bytes": have}


def check_room(dest: Path, needed: int) -> None:
    """Refuse a download whose remaining bytes do not fit the disk that holds ``dest``.

    Raises:
        CwError: Fewer bytes are free there than are left to copy (nothing was copied yet).
    """
    free = shutil.disk_usage(dest).free
    if needed > free:
        raise CwError(f"{dest} has {free / 2**30:.1f} GiB free, and {needed / 2**30:.1f} GiB are left to copy",
                      hint="free some space or choose a folder on a larger disk")  # fmt: skip


def _checked(done: Any, what: str) -> bytes:
    if done.exit_code != 0:
        raise CwError(f"{what} in the reader pod failed (exit {done.exit_code}): {done.stderr.strip()[-300:]}")
    return bytes(done.stdout)


def _there(dest: Path, item: dict[str, Any]) -> int:
    """Bytes of ``item`` already here: all of it when verified, else what its ``.partial`` holds."""
    local = dest / item["path"]
    if _verified(local, int(item["size"]), item["sha256"]):
        return int(item["size"])
    partial = local.with_name(local.name + ".partial")
    size = partial.stat().st_size if partial.is_file() else 0
    return size if size <= int(item["size"]) else 0


def _fetch(pod: Reader, source: Source, dest: Path, item: dict[str, Any], have: int, progress: _CHUNK_PROGRESS) -> None:
    local = dest / item["path"]
    if not _inside(dest, local):
        raise CwError(f"the pod named a file outside {dest}: {item['path']!r}")
    size = int(item["size"])
    if have == size and _verified(local, size, item["sha256"]):
        return
    partial = local.with_name(local.name + ".partial")
    local.parent.mkdir(parents=True, exist_ok=True)
    if have == 0 or not partial.is_file():
        partial.write_bytes(b"")
        have = 0
    with open(partial, "ab") as handle:
        def write(chunk: bytes) -> None:
            if chunk:
                handle.write(chunk)
                progress(len(chunk))

        done = pod.python(FETCH_FILE, "read", f"{source.folder}/{item['path']}", str(have), sink=write, timeout_s=24 * 3600)
    if done.exit_code != 0:
        raise CwError(f"reading {item['path']} in the reader pod failed (exit {done.exit_code}): {done.stderr.strip()[-300:]}")
    if not _verified(partial, size, item["sha256"]):
        partial.unlink()  # started again from zero by the next call
        raise CwError(f"{item['path']} arrived different from the pod's copy (size or SHA-256)",
                      hint="run the same download again: it starts that file over")  # fmt: skip
    os.replace(partial, local)


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False

