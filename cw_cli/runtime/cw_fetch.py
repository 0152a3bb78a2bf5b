"""cw's file reader for `cw download`: run in the reader pod (volume mounted read-only), from
the volume's root. Standard library only, no cw imports::

    python3 -c "$(cat cw_fetch.py)" list FOLDER [top]   # JSON: every file, its size and time
    python3 -c "$(cat cw_fetch.py)" read FILE OFFSET    # the file's bytes from OFFSET, on stdout

``top`` lists only the files directly in FOLDER (a run's final model sits beside its
checkpoints). ``read`` hashes the whole file as it goes, the part before OFFSET too (read, not
sent), and ends with ``cw-fetch-sha256 HEX SIZE`` on stderr: each byte is read once in the pod,
an interrupted download goes on where it stopped, and cw checks what it wrote against the hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys

_CHUNK = 1 << 20
#: Folders deeper than this are not walked (a model folder is one or two levels deep).
_MAX_DEPTH = 32


def list_files(folder: str, top: bool = False) -> dict:
    """Every regular file under ``folder``: links, hidden files and folders, and partial exports left out.

    Folders are walked without following links, so a loop cannot be entered.
    """
    files = []
    base_depth = folder.rstrip("/").count("/")
    for root, folders, names in os.walk(folder, followlinks=False):
        if top or root.count("/") - base_depth >= _MAX_DEPTH:
            folders.clear()
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISREG(info.st_mode):
                files.append({"path": os.path.relpath(path, folder), "size": info.st_size, "mtime": info.st_mtime})
    return {"folder": folder, "files": files}


def read(path: str, offset: int) -> None:
    """Copy ``path`` from ``offset`` to stdout; the SHA-256 of the whole file goes to stderr last."""
    out = sys.stdout.buffer
    digest = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SystemExit(f"cw-fetch: {path} is not a regular file")
    os.set_blocking(fd, True)
    with open(fd, "rb") as handle:
        while size < offset:  # hashed, not sent: cw has these bytes already
            block = handle.read(min(_CHUNK, offset - size))
            if not block:
                break
            digest.update(block)
            size += len(block)
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
            out.write(block)
            size += len(block)
    out.flush()
    sys.stderr.write(f"\ncw-fetch-sha256 {digest.hexdigest()} {size}\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["list"]:
        print(json.dumps(list_files(sys.argv[2], top=sys.argv[3:4] == ["top"])))
    elif sys.argv[1:2] == ["read"]:
        read(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit("usage: cw_fetch.py list FOLDER [top] | read FILE OFFSET")
