"""Reading a small file a user named (a token, a certificate, a saved log) without ever waiting on it.

Opening a FIFO blocks until a writer comes, ``/dev/zero`` never ends, and the "regular files" of
``/proc`` and ``/sys`` report size 0 and may block (``/proc/kmsg``) or describe this machine:
none of them is opened here. What is opened is opened non-blocking and read to a bound, so a
file that changes between the check and the read cannot make the reader wait or fill memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: Kernel pseudo-filesystems: their files look regular but are not files a user keeps data in.
PSEUDO_ROOTS = ("/proc", "/sys")


class NotAPlainFile(OSError):
    """The path names something that is not a small regular file; ``str()`` says why in a few words."""


def pseudo_file(path: str | Path, roots: tuple[str, ...] = PSEUDO_ROOTS) -> str | None:
    """The resolved path when ``path`` leads into one of ``roots`` (``/proc`` or ``/sys``), else None."""
    try:
        resolved = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    return resolved if any(resolved == root or resolved.startswith(root + "/") for root in roots) else None


def check_plain_file(path: str | Path, limit: int) -> os.stat_result:
    """Refuse, without opening it, what is not a regular file of at most ``limit`` bytes.

    Raises:
        FileNotFoundError: Nothing is there.
        NotAPlainFile: A folder, a device, FIFO or socket, a kernel pseudo-file, or too large.
        OSError: It cannot be looked at (permissions, a symlink loop); ``ValueError`` (a NUL in the
            path) is raised as OSError too.
    """
    try:
        info = os.stat(path)
    except ValueError as exc:  # a NUL in the path
        raise NotAPlainFile(f"not a usable path ({exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise NotAPlainFile("it is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise NotAPlainFile("not a regular file (a device, FIFO or socket)")
    resolved = pseudo_file(path)
    if resolved is not None:
        raise NotAPlainFile(f"a file of the operating system ({resolved}), not a regular file")
    if info.st_size > limit:
        raise NotAPlainFile(f"it is {_size(info.st_size)}, more than the {_size(limit)} read from such a file")
    return info


def read_plain_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, checked before it is opened.

    Raises:
        FileNotFoundError: Nothing is there.
        NotAPlainFile: Not a regular file, a pseudo-file, or larger than ``limit`` (also when it
            grew meanwhile).
        OSError: It cannot be opened or read.
    """
    check_plain_file(path, limit)
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # swapped for a FIFO since the check
            raise NotAPlainFile("not a regular file (a device, FIFO or socket)")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(descriptor, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except BlockingIOError:
        raise NotAPlainFile("it has no data to read now (not a regular file)") from None
    finally:
        os.close(descriptor)
    if size > limit:
        raise NotAPlainFile(f"it grew past the {_size(limit)} read from such a file")
    return b"".join(chunks)


def _size(count: int) -> str:
    return f"{count / 2**20:,.1f} MiB" if count >= 2**20 else f"{count:,} bytes"


def sha256_of(path: str | Path) -> str:
    """The SHA-256 of a whole file, read in 4 MiB blocks (a model shard is never held in memory)."""
    import hashlib  # here: this module is on every command's path (the kubeconfig), hashing only on downloads

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
