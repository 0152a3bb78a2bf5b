"""cw's file reader for `cw download`: run in the reader pod (volume mounted read-only), from
the volume's root. Standard library only, no cw imports::

    python3 -c "$(cat cw_fetch.py)" list FOLDER        # JSON: every file, its size and SHA-256
    python3 -c "$(cat cw_fetch.py)" read FILE OFFSET   # the file's bytes from OFFSET, on stdout

Reading from an offset lets an interrupted download go on where it stopped; the sizes and
hashes let cw verify each file it wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

_CHUNK = 1 << 20


def list_files(folder: str) -> dict:
    """Every regular file under ``folder`` (partial exports and hidden folders left out)."""
    files = []
    for root, folders, names in os.walk(folder):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(names):
            path = os.path.join(root, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(_CHUNK), b""):
                    digest.update(block)
            files.append({"path": os.path.relpath(path, folder), "size": os.path.getsize(path), "sha256": digest.hexdigest()})
    return {"folder": folder, "files": files}


def read(path: str, offset: int) -> None:
    """Copy ``path`` from ``offset`` to stdout."""
    out = sys.stdout.buffer
    with open(path, "rb") as handle:
        handle.seek(offset)
        for block in iter(lambda: handle.read(_CHUNK), b""):
            out.write(block)
    out.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["list"]:
        print(json.dumps(list_files(sys.argv[2])))
    elif sys.argv[1:2] == ["read"]:
        read(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit("usage: cw_fetch.py list FOLDER | read FILE OFFSET")
