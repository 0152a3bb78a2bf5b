"""`cw download RUN DEST`: copy the final model, a checkpoint or an export of a run from its
volume to this machine, through the API server, as `kubectl cp` does.

Each file comes through its own exec stream of the reader pod (a few at once) and is written to
``NAME.partial`` as it arrives, so memory stays flat whatever the size. The pod hashes each file
as it sends it; cw hashes what it writes and renames the file only when both agree. An
interrupted download goes on where it stopped: finished files are recorded in DEST's marker and
not sent again, and a partial one continues from its size (its bytes hashed here, not re-sent).
A folder that is not an earlier download of the same source is never written into, and the
local disk must have room for what is left before anything is copied.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from cw_cli.after_training.artifacts import Reader, reader
from cw_cli.client.connection import Kube
from cw_cli.errors import ConfigError, Conflict, CwError
from cw_cli.frameworks.runtime_files import ARTIFACTS_FILE, FETCH_FILE
from cw_cli.plain_files import sha256_of
from cw_cli.render.artifact_choice import Source, choose_source

#: The record in DEST of what is being downloaded there, so a second call can go on.
MARKER = ".cw-download.json"
#: Files fetched at once, each through its own stream (one stream is bound by one core's TLS).
PARALLEL_FILES = 4
_CHUNK_PROGRESS = Callable[[int], None]
_HASH_LINE = re.compile(r"cw-fetch-sha256 ([0-9a-f]{64}) ([0-9]+)\s*$")


class _Marker:
    """DEST's record: which run and folder it holds, and each file verified so far (size, time, hash)."""

    def __init__(self, dest: Path, origin: dict[str, str]) -> None:
        self.path = dest / MARKER
        self.origin = origin
        self.done: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def claim(self) -> None:
        """Refuse a folder that holds anything but an earlier download of the same source."""
        dest = self.path.parent
        if dest.exists() and not dest.is_dir():
            raise Conflict(f"{dest} exists and is not a folder", hint="give a new folder")
        if dest.is_dir() and any(dest.iterdir()):
            try:
                earlier = json.loads(self.path.read_text(encoding="utf-8"))
                origin = {key: earlier[key] for key in self.origin}
            except (OSError, ValueError, KeyError, TypeError):
                raise Conflict(f"{dest} exists and holds other files", hint="give a new or empty folder") from None
            if origin != self.origin:
                raise Conflict(f"{dest} holds a download of {origin.get('run')} {origin.get('source')}", hint="give another folder")
            files = earlier.get("files")
            self.done = {k: v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}
        dest.mkdir(parents=True, exist_ok=True)
        self._write()

    def finished(self, item: dict[str, Any], dest: Path) -> bool:
        """Whether ``item`` arrived whole in an earlier call: recorded for the pod's same size and
        time, and the local file untouched since (its time as recorded) or, if touched, with the
        recorded hash (read here; nothing is sent again)."""
        record = self.done.get(item["path"])
        local = dest / item["path"]
        if record is None or record.get("size") != item["size"] or record.get("mtime") != item["mtime"]:
            return False
        try:
            info = local.stat()
        except OSError:
            return False
        if info.st_size != item["size"]:
            return False
        return info.st_mtime_ns == record.get("local_mtime_ns") or sha256_of(local) == record.get("sha256")

    def record(self, item: dict[str, Any], sha256: str, local: Path) -> None:
        """Note a verified file (written at once: a kill a moment later keeps it)."""
        with self._lock:
            self.done[item["path"]] = {"size": item["size"], "mtime": item["mtime"], "sha256": sha256,
                                       "local_mtime_ns": local.stat().st_mtime_ns}  # fmt: skip
            self._write()

    def _write(self) -> None:
        temporary = self.path.with_name(MARKER + ".new")
        temporary.write_text(json.dumps({**self.origin, "files": self.done}, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temporary, self.path)


def download(
    kube: Kube, run_name: str, which: str, dest: Path, started: Callable[[int, int], None] = lambda total, done: None,
    progress: _CHUNK_PROGRESS = lambda n: None, parallel: int = PARALLEL_FILES,
) -> dict[str, Any]:  # fmt: skip
    """Download what ``which`` names of the run into ``dest``.

    Args:
        started: Called with the total bytes and the bytes already there, once they are known.
        progress: Called with each chunk's size as it is written (from several threads).
        parallel: Files fetched at once.

    Returns:
        ``{"source", "dest", "files", "bytes", "resumed_bytes"}``.

    Raises:
        NotFound: No such run, or its volume is gone.
        ConfigError: Nothing of that name, a checkpoint still being written, or a destination
            that cannot be written.
        Conflict: ``dest`` holds other files.
        CwError: Not enough room here, or a file that arrived different from the pod's.
    """
    check_destination(dest)
    with reader(kube, run_name) as pod:
        listing = json.loads(_checked(pod.python(ARTIFACTS_FILE, pod.relative_run_dir, timeout_s=600), "listing"))
        source = choose_source(listing, which)
        listed = pod.python(FETCH_FILE, "list", source.folder, *(["top"] if source.top else []), timeout_s=600)
        files = json.loads(_checked(listed, "listing the files"))["files"]
        try:
            return _download_files(pod, run_name, source, files, dest, started, progress, parallel)
        except OSError as exc:  # the destination: read-only, /proc, a full disk, a file where a folder goes
            raise ConfigError([f"cannot write the download to {dest}: {exc.strerror or exc}"],
                              hint="choose a folder you can write to, on a disk with room") from None  # fmt: skip


def _download_files(
    pod: Reader, run_name: str, source: Source, files: list[dict[str, Any]], dest: Path,
    started: Callable[[int, int], None], progress: _CHUNK_PROGRESS, parallel: int,
) -> dict[str, Any]:  # fmt: skip
    marker = _Marker(dest, {"run": run_name, "namespace": pod.kube.namespace, "source": source.folder})
    marker.claim()
    total = sum(int(f["size"]) for f in files)
    left = [f for f in files if not marker.finished(f, dest)]
    have = total - sum(int(f["size"]) for f in left) + sum(_partial_size(dest, f) for f in left)
    check_room(dest, total - have)
    started(total, have)
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="cw-download") as pool:
        futures = [pool.submit(_fetch, pod, source, dest, item, marker, progress, stop) for item in left]
        try:
            _wait_all(futures)
        finally:
            stop.set()  # an error or Ctrl-C: the other streams end at their next chunk
    return {"source": source.folder, "dest": str(dest), "files": len(files), "bytes": total, "resumed_bytes": have}


def _wait_all(futures: list[Future[None]]) -> None:
    """Wait for every file; the first failure is raised (in the main thread, so Ctrl-C still acts)."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()


#: Kernel pseudo-filesystems: writing a download there is never meant (and may hang or crash).
_PSEUDO = ("/proc", "/sys", "/dev")


def check_destination(dest: Path) -> None:
    """Refuse a destination no download can be written to, before the cluster is asked.

    Raises:
        ConfigError: Under /proc, /sys or /dev, or below a file rather than a folder.
    """
    resolved = Path(os.path.abspath(dest.expanduser()))
    if any(resolved == Path(root) or Path(root) in resolved.parents for root in _PSEUDO):
        raise ConfigError([f"download destination {dest}: under {resolved.parts[1] and '/' + resolved.parts[1]}, a kernel "
                           "pseudo-filesystem"], hint="give a folder on a disk, e.g. ./model")  # fmt: skip
    for parent in [resolved, *resolved.parents]:
        if parent.exists():
            if parent != resolved and not parent.is_dir():
                raise ConfigError([f"download destination {dest}: {parent} is a file, not a folder"], hint="give a folder path")
            break


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


def _partial_size(dest: Path, item: dict[str, Any]) -> int:
    """Bytes of ``item`` a ``.partial`` holds already (0 when it holds more than the file has)."""
    partial = dest / (item["path"] + ".partial")
    size = partial.stat().st_size if partial.is_file() else 0
    return size if size <= int(item["size"]) else 0


class _Stopped(Exception):
    """Another file failed or cw was interrupted: this stream ends at its next chunk."""


def _fetch(pod: Reader, source: Source, dest: Path, item: dict[str, Any], marker: _Marker, progress: _CHUNK_PROGRESS,
           stop: threading.Event) -> None:  # fmt: skip
    local = dest / item["path"]
    if not _inside(dest, local):
        raise CwError(f"the pod named a file outside {dest}: {item['path']!r}")
    size = int(item["size"])
    partial = local.with_name(local.name + ".partial")
    local.parent.mkdir(parents=True, exist_ok=True)
    have = _partial_size(dest, item)
    digest = hashlib.sha256()
    with open(partial, "r+b" if have else "wb") as handle:
        for block in iter(lambda: handle.read(min(1 << 20, have - handle.tell())) if handle.tell() < have else b"", b""):
            digest.update(block)  # what an earlier call wrote: hashed here, not sent again
        handle.truncate(have)

        def write(chunk: bytes) -> None:
            if stop.is_set():
                raise _Stopped
            handle.write(chunk)
            digest.update(chunk)
            progress(len(chunk))

        try:
            done = pod.python(FETCH_FILE, "read", f"{source.folder}/{item['path']}", str(have), sink=write, timeout_s=24 * 3600)
        except _Stopped:
            return
    if done.exit_code != 0:
        raise CwError(f"reading {item['path']} in the reader pod failed (exit {done.exit_code}): {done.stderr.strip()[-300:]}")
    sent = _HASH_LINE.search(done.stderr)
    wrote = partial.stat().st_size
    if sent is None or sent.group(1) != digest.hexdigest() or int(sent.group(2)) != wrote or wrote != size:
        partial.unlink()  # started again from zero by the next call
        raise CwError(f"{item['path']} arrived different from the pod's copy (size or SHA-256)",
                      hint="run the same download again: it starts that file over")  # fmt: skip
    os.replace(partial, local)
    marker.record(item, digest.hexdigest(), local)


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False
