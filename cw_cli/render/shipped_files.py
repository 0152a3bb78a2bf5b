"""Files a run takes along in its ConfigMap: the user's `files:` and the local files its native
config names (an accelerate or DeepSpeed config, a chat template, a small dataset).

A referenced path that exists next to the config is shipped and the config value rewritten to
where it is mounted (``/etc/cw/files/<name>``); a folder keeps its layout. A path that does not
exist here is left alone: it may be a hub id or a path inside the image or a volume. The whole
ConfigMap must stay under the API server's 1 MiB limit; larger data is refused with the way
round it (a volume).
"""

from __future__ import annotations

import base64
import copy
import os
import re
import stat
from pathlib import Path
from typing import Any

from msgspec import Struct

from cw_cli.config.local_files import CONFIGMAP_LIMIT, check_shippable
from cw_cli.frameworks.base import CONFIG_MOUNT
from cw_cli.render.folder_walk import FolderTooDeep, walk_files

SHIPPED_FOLDER = "files"
#: A key-path element that stands for every item of a list.
EACH = "*"
_KEY_UNSAFE = re.compile(r"[^-._a-zA-Z0-9]+")

KeyPattern = tuple[str, ...]


class ShippedFile(Struct, frozen=True):
    """One file of the run's ConfigMap.

    Attributes:
        key: ConfigMap key.
        path: Path under /etc/cw where the pods see it.
        content: The file's bytes.
    """

    key: str
    path: str
    content: bytes

    @property
    def text(self) -> str | None:
        """The content as text, or None when it is not UTF-8 (it then goes to ``binaryData``)."""
        try:
            return self.content.decode("utf-8")
        except UnicodeDecodeError:
            return None


def text_file(key: str, text: str) -> ShippedFile:
    """A generated file (the native config, cw's runtime files) at ``/etc/cw/<key>``."""
    return ShippedFile(key=key, path=key, content=text.encode("utf-8"))


def configmap_payload(files: list[ShippedFile]) -> tuple[dict[str, str], dict[str, str], list[dict[str, str]]]:
    """``data``, ``binaryData`` and the volume ``items`` (key -> path; empty when every file is
    mounted under its own key) of the run's ConfigMap."""
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    for item in files:
        text = item.text
        if text is None:
            binary[item.key] = base64.b64encode(item.content).decode("ascii")
        else:
            data[item.key] = text
    # Items only when a file sits elsewhere than its key (a shipped folder keeps its layout).
    items = [{"key": item.key, "path": item.path} for item in files] if any(f.key != f.path for f in files) else []
    return data, binary, items


def payload_size(files: list[ShippedFile]) -> int:
    """Bytes the API server counts against the ConfigMap limit (keys plus raw values)."""
    return sum(len(item.key) + len(item.content) for item in files)


def check_size(files: list[ShippedFile], config_path: Path) -> None:
    """Refuse a ConfigMap the API server would refuse, naming the biggest files.

    Raises:
        ValueError: Over the limit.
    """
    size = payload_size(files)
    if size <= CONFIGMAP_LIMIT:
        return
    biggest = sorted(files, key=lambda item: len(item.content), reverse=True)[:3]
    listed = ", ".join(f"{item.path} ({_mib(len(item.content))})" for item in biggest)
    raise ValueError(
        f"the files shipped with the run come to {_mib(size)}, over the 1 MiB a ConfigMap holds (largest: {listed}); "
        "put large data on a volume (`volumes: {my-data: /data}`, a PersistentVolumeClaim) and point the config at "
        "its path under /data"
    )


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


def _volume_hint(setting: str) -> str:
    return (
        "put it on a volume (`volumes: {my-data: /data}`, a PersistentVolumeClaim) and "
        f"{setting} its path under /data"
    )


def _read_small(path: Path, what: str) -> bytes:
    """The bytes of a regular file of at most :data:`CONFIGMAP_LIMIT`, checked before reading
    (:func:`~cw_cli.config.local_files.check_shippable`, which an estimate applies too).

    Raises:
        ValueError: Missing, a folder, not a regular file (a FIFO would block, a device never
            ends), a file of the operating system, or over the limit; ``what`` names the setting.
    """
    check_shippable(path, what)
    content = read_without_waiting(path, what)
    if len(content) > CONFIGMAP_LIMIT:
        raise ValueError(f"{what}: {path} is over the 1 MiB a ConfigMap holds; {_volume_hint('use')}")
    return content


def read_nonblocking(path: Path | str, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``path``, opened non-blocking.

    Raises:
        BlockingIOError: The file has no data now and would make a reader wait (a FIFO, a device).
        OSError: It cannot be opened or read.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(descriptor, min(1 << 20, limit - size))  # raises BlockingIOError, never waits
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


#: Kernel pseudo-filesystems: their "regular files" (size 0) may block on read (/proc/kmsg) or
#: describe this machine, never a file of the user's to ship.
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def read_without_waiting(path: Path, what: str) -> bytes:
    """At most :data:`CONFIGMAP_LIMIT` + 1 bytes of a file, never blocking on it.

    The file is opened non-blocking, so a pseudo-file that would wait for data answers at once;
    kernel pseudo-filesystems are refused before they are opened.

    Raises:
        ValueError: A pseudo-file, or the file cannot be read at once; ``what`` names the setting.
    """
    try:
        resolved = os.path.realpath(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what}: {path} cannot be read ({exc})") from None
    if any(resolved == root or resolved.startswith(root + "/") for root in PSEUDO_ROOTS):
        raise ValueError(f"{what}: {path} is a file of the operating system ({resolved}), not one to ship with a run")
    try:
        return read_nonblocking(path, CONFIGMAP_LIMIT + 1)  # bounded even if the file grows meanwhile
    except BlockingIOError:
        raise ValueError(f"{what}: {path} has no data to read now (not a plain file); ship a regular file") from None
    except OSError as exc:
        raise ValueError(f"{what}: {path} cannot be read ({exc})") from None


def user_files(base_dir: Path, relatives: list[str]) -> list[ShippedFile]:
    """The ``files:`` list: each file at ``/etc/cw/<name>`` (Python files are importable there).

    Raises:
        ValueError: A file is missing, a folder, not a regular file, or over the ConfigMap's 1 MiB.
    """
    shipped = []
    for relative in relatives:
        path = (base_dir / relative).expanduser()
        shipped.append(ShippedFile(key=path.name, path=path.name, content=_read_small(path, "`files`")))
    return shipped


def _matches(config: Any, pattern: KeyPattern, prefix: tuple[str | int, ...] = ()) -> list[tuple[Any, str | int, tuple]]:
    """(container, key, full path) of every value a key pattern reaches."""
    if not pattern:
        return []
    head, rest = pattern[0], pattern[1:]
    if head == EACH:
        if not isinstance(config, list):
            return []
        found: list[tuple[Any, Any, tuple[Any, ...]]] = []
        for index, item in enumerate(config):
            found += _matches(item, rest, (*prefix, index)) if rest else [(config, index, (*prefix, index))]
        return found
    if not isinstance(config, dict) or head not in config:
        return []
    if not rest:
        return [(config, head, (*prefix, head))]
    return _matches(config[head], rest, (*prefix, head))


def _dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def ship_referenced(
    config: dict[str, Any], patterns: tuple[KeyPattern, ...], base_dir: Path, *, in_place: bool = False
) -> tuple[dict[str, Any], list[ShippedFile], list[str]]:
    """Ship the local files a native config names and point the config at their mounted copies.

    Args:
        config: The native config (not modified).
        patterns: Key paths whose values may name local files (``*`` for every list item).
        base_dir: Folder of the config file; relative paths start there.
        in_place: The trainer runs on this machine (``--local``): nothing is shipped, whatever its
            size (a local model folder is the usual case), and each path becomes absolute, so a
            relative one still means the config file's folder wherever the trainer starts.

    Returns:
        (the rewritten config, the files to ship, one notice per shipped path).
    """
    rewritten = copy.deepcopy(config)
    shipped: list[ShippedFile] = []
    notices: list[str] = []
    taken: set[str] = set()
    for pattern in patterns:
        for container, key, path in _matches(rewritten, pattern):
            value = container[key]
            if not isinstance(value, str) or not value or "\n" in value:
                continue
            try:
                local = (base_dir / value).expanduser()
                exists = local.exists()
            except (OSError, ValueError):
                continue  # not a path (too long, odd characters): leave it to the framework
            if not exists or not (local.is_file() or local.is_dir()):
                continue  # a device or FIFO is no file to ship; the framework will say what it makes of it
            if in_place:
                container[key] = str(local.resolve())
                continue
            try:
                paths, size, complete = _local_tree(local)
            except FolderTooDeep as exc:
                raise ValueError(f"`{_dotted(path)}`: {exc}") from None
            except OSError as exc:
                raise ValueError(f"`{_dotted(path)}`: {value} cannot be read ({exc})") from None
            if size > CONFIGMAP_LIMIT or not complete:  # checked before reading: it may be a model of many GB
                count = f"{len(paths)} file{'' if len(paths) == 1 else 's'}"
                amount = _mib(size) if complete else f"at least {count} and {_mib(size)}"
                raise ValueError(
                    f"`{_dotted(path)}: {value}` is {amount}, too large to ship with the run (a ConfigMap holds "
                    f"1 MiB); {_volume_hint(f'set `{_dotted(path)}` to')}"
                )
            name = _free_name(local.name, taken)
            files = _read_tree(local, paths, f"{SHIPPED_FOLDER}/{name}", len(shipped), f"`{_dotted(path)}`")
            shipped += files
            container[key] = f"{CONFIG_MOUNT}/{SHIPPED_FOLDER}/{name}"
            notices.append(f"`{_dotted(path)}`: ships {value} with the run as {container[key]}")
    return rewritten, shipped, notices


#: Files of a referenced folder looked at before giving up: a ConfigMap could not hold more anyway.
MAX_TREE_FILES = 10_000


def _local_tree(local: Path) -> tuple[list[Path], int, bool]:
    """The regular files a referenced path stands for (sorted), their total size, and whether the
    walk saw them all.

    The walk stops once the size passes the ConfigMap limit or it has seen :data:`MAX_TREE_FILES`
    files, so `dataset_name: /` costs a moment, not a walk of the whole disk. It is bounded in
    depth and enters no link to a folder (:func:`walk_files`); a link to a file counts as the
    file it names, when that is a regular file.

    Raises:
        FolderTooDeep: The folder is nested deeper than a real one is (a ValueError).
    """
    if local.is_file():
        return [local], local.stat().st_size, True
    paths: list[Path] = []
    size = 0
    for _, candidate, info in walk_files(local):
        if stat.S_ISLNK(info.st_mode):
            try:
                info = candidate.stat()
            except (OSError, ValueError):
                continue  # dangling or a loop: not shipped
        if not stat.S_ISREG(info.st_mode):
            continue  # devices, FIFOs and sockets are not files to ship
        paths.append(candidate)
        size += info.st_size
        if size > CONFIGMAP_LIMIT or len(paths) > MAX_TREE_FILES:
            return paths, size, False
    return sorted(paths), size, True


def _free_name(name: str, taken: set[str]) -> str:
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{number}-{name}"
    taken.add(candidate)
    return candidate


def _read_tree(local: Path, paths: list[Path], mounted: str, first_index: int, what: str) -> list[ShippedFile]:
    files = []
    for offset, path in enumerate(paths):
        relative = mounted if path == local else f"{mounted}/{path.relative_to(local).as_posix()}"
        key = _KEY_UNSAFE.sub("-", f"ref{first_index + offset}-{path.name}")[:253]
        files.append(ShippedFile(key=key, path=relative, content=read_without_waiting(path, what)))
    return files


def referenced_modules(
    config: dict[str, Any], patterns: tuple[KeyPattern, ...], base_dir: Path, already: set[str]
) -> tuple[list[ShippedFile], list[str]]:
    """Python modules named by dotted paths (``rewards.accuracy_reward``) that sit next to the config.

    Each is shipped at ``/etc/cw/<module>.py``, importable there, unless ``files:`` ships it already.

    Returns:
        (the files, one notice each).
    """
    shipped: list[ShippedFile] = []
    notices: list[str] = []
    for pattern in patterns:
        for container, key, path in _matches(config, pattern):
            values = container[key] if isinstance(container[key], list) else [container[key]]
            for value in values:
                if not isinstance(value, str) or "." not in value:
                    continue
                module = value.split(".")[0]
                if not module.isidentifier() or {f"{module}.py", module} & already:
                    continue
                local = base_dir / f"{module}.py"
                if (base_dir / module / "__init__.py").is_file():  # a package folder, e.g. grpo_code/
                    already.add(module)
                    shipped += _package_files(base_dir / module, module, f"`{_dotted(path)}`")
                    notices.append(f"`{_dotted(path)}`: ships the package {module}/ with the run (importable as `{module}`)")
                elif local.is_file():
                    already.add(f"{module}.py")
                    content = _read_small(local, f"`{_dotted(path)}`")
                    shipped.append(ShippedFile(key=f"{module}.py", path=f"{module}.py", content=content))
                    notices.append(f"`{_dotted(path)}`: ships {local.name} with the run (importable as `{module}`)")
    return shipped, notices


def _package_files(folder: Path, module: str, what: str) -> list[ShippedFile]:
    """A package folder's files at ``/etc/cw/<module>/...`` (compiled caches left out).

    Raises:
        ValueError: Larger than a ConfigMap holds; the message names `code`, which ships more.
    """
    try:
        paths, size, complete = _local_tree(folder)
    except (FolderTooDeep, OSError) as exc:
        raise ValueError(f"{what}: {exc}") from None
    paths = [p for p in paths if "__pycache__" not in p.relative_to(folder).parts and p.suffix not in (".pyc", ".pyo")]
    if not complete or sum(p.stat().st_size for p in paths) > CONFIGMAP_LIMIT:
        raise ValueError(
            f"{what}: the package {folder} is too large to ship file by file (a ConfigMap holds 1 MiB); ship it "
            f"compressed with `code: {folder.name}` (or the folder above it), or install it in the image"
        )
    return [
        ShippedFile(
            key=_KEY_UNSAFE.sub("-", f"pkg{index}-{module}-{p.name}")[:253],  # the index keeps keys apart
            path=f"{module}/{p.relative_to(folder).as_posix()}",
            content=read_without_waiting(p, what),
        )
        for index, p in enumerate(paths)
    ]
