"""One bounded walk of a local folder, for everything that reads a user's folder before a launch
(files shipped with the run, the run's code, the data whose columns are checked).

``os.walk`` and ``Path.rglob`` recurse once per folder level: a folder nested 1,200 deep ends in
a RecursionError on Python 3.11. This walk keeps its own stack, stops at :data:`MAX_DEPTH`
levels (deeper than any real project or dataset), never follows a link to a folder (so a link
loop cannot make it go round), and remembers the folders it has entered by device and inode, so
a bind mount that contains itself is entered once. It only lists: it never opens an entry, so
a FIFO or a device among the files costs nothing; the caller decides what to read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

#: Folder levels below the root that are walked; deeper is refused (:class:`FolderTooDeep`).
MAX_DEPTH = 64


class FolderTooDeep(ValueError):
    """A folder has more levels than :data:`MAX_DEPTH`; the message names the folder and the fix."""


def walk_files(
    root: Path, *, skip_folder: Callable[[str], bool] = lambda name: False, max_depth: int = MAX_DEPTH
) -> Iterator[tuple[str, Path, os.stat_result]]:
    """Every entry under ``root`` that is not a folder, as (path relative to it, path, lstat), in
    sorted order, folders depth first.

    Links are listed as links (their lstat); links to folders are not entered. Entries that
    vanish or cannot be read while walking are left out.

    Args:
        root: The folder to walk.
        skip_folder: Called with a folder's name; True leaves it (and all below it) out.
        max_depth: Folder levels below ``root`` that may be entered.

    Raises:
        FolderTooDeep: A folder deeper than ``max_depth`` levels holds more folders.
        OSError: ``root`` itself cannot be listed.
    """
    first = os.stat(root)
    seen = {(first.st_dev, first.st_ino)}
    # A stack of (folder, relative prefix, depth); popped in order so the output is sorted.
    stack: list[tuple[Path, str, int]] = [(root, "", 0)]
    top = True
    while stack:
        folder, prefix, depth = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            if top:
                raise
            continue  # unreadable or vanished below the root: not listed
        top = False
        subfolders: list[tuple[Path, str, int]] = []
        for entry in entries:
            relative = f"{prefix}{entry.name}"
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if skip_folder(entry.name) or (info.st_dev, info.st_ino) in seen:
                    continue
                if depth + 1 > max_depth:
                    raise FolderTooDeep(
                        f"{root} has folders more than {max_depth} levels deep ({_short(relative)}); "
                        "flatten it (no project or dataset is that deep)"
                    )
                seen.add((info.st_dev, info.st_ino))
                subfolders.append((Path(entry.path), f"{relative}/", depth + 1))
                continue
            yield relative, Path(entry.path), info
        stack.extend(reversed(subfolders))


def _short(relative: str) -> str:
    return relative if len(relative) <= 80 else f"{relative[:38]}...{relative[-38:]}"
