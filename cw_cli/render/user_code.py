"""The run's own code (`code:` and `script:`): what ships with it and how the trainer gets it.

A local folder is packed into one compressed archive in the run's ConfigMap (so about 4 MiB of
source fits the 1 MiB a ConfigMap holds); a git repository is cloned by the pods at the commit
given. Either way ``cw_code.py`` puts it at ``/cw-code`` before the trainer's command starts, on
every node, and the trainer imports from there (and from its ``src/``). A folder too large to
ship is refused with the ways round it: a git repository or the image.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from cw_cli.config.local_files import check_shippable
from cw_cli.frameworks.base import CONFIG_MOUNT
from cw_cli.frameworks.runtime_files import CODE_FILE
from cw_cli.render.folder_walk import FolderTooDeep, walk_files
from cw_cli.render.shipped_files import CONFIGMAP_LIMIT, PSEUDO_ROOTS, ShippedFile, read_nonblocking, read_without_waiting
from cw_cli.types import CODE_MOUNT

if TYPE_CHECKING:
    from cw_cli.config.models import ClusterSpec, CodeSource

#: ConfigMap key (and file under /etc/cw) of a packed local folder.
CODE_ARCHIVE = "cw_code.tar.gz"
#: Folders that are never code: version control, caches, virtual environments, notebooks' copies.
SKIPPED_FOLDERS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".ipynb_checkpoints", "node_modules", "wandb"}
)  # fmt: skip
SKIPPED_SUFFIXES = (".pyc", ".pyo", ".egg-info")
#: Bytes read before packing stops: more source than this could never compress into a ConfigMap.
MAX_RAW_BYTES = 32 * 2**20
MAX_FILES = 20_000


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


def _too_large(folder: Path, amount: str) -> ValueError:
    return ValueError(
        f"`code`: {folder} is {amount}, too large to ship with the run (a ConfigMap holds 1 MiB); push it to a git "
        "repository and set `code: {git: <url>, commit: <full commit id>}`, or build it into the image (`image:`)"
    )


def code_files(folder: Path) -> list[tuple[str, Path, int]]:
    """The files of a code folder that ship, as (path inside it, local path, mode), sorted.

    Skips version control, caches and virtual environments (:data:`SKIPPED_FOLDERS`), compiled
    Python and anything that is not a regular file (links, devices, FIFOs).

    Raises:
        ValueError: More than :data:`MAX_RAW_BYTES` or :data:`MAX_FILES`, counted before reading.
    """
    found: list[tuple[str, Path, int]] = []
    total = 0

    def skipped(name: str) -> bool:
        return name in SKIPPED_FOLDERS or name.endswith(SKIPPED_SUFFIXES)

    try:
        # Bounded in depth, enters no link to a folder, opens nothing (folder_walk.walk_files).
        for relative, local, info in walk_files(folder, skip_folder=skipped):
            if local.name.endswith(SKIPPED_SUFFIXES) or not stat.S_ISREG(info.st_mode):
                continue  # compiled Python; links, devices, FIFOs
            total += info.st_size
            found.append((relative, local, info.st_mode))
            if total > MAX_RAW_BYTES or len(found) > MAX_FILES:
                raise _too_large(folder, f"over {_mib(MAX_RAW_BYTES)} or {MAX_FILES} files")
    except FolderTooDeep as exc:
        raise ValueError(f"`code`: {exc}") from None
    except OSError as exc:
        raise ValueError(f"`code`: {folder} cannot be read ({exc})") from None
    return sorted(found)


def _read_now(path: Path) -> bytes:
    """The whole file, opened non-blocking (its size was checked by :func:`code_files`)."""
    try:
        return read_nonblocking(path, MAX_RAW_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"`code`: {path} cannot be read ({exc})") from None


def pack_folder(folder: Path) -> bytes:
    """A gzip-compressed tar of the folder's code, the same bytes for the same files.

    Times, owners and the gzip header are fixed, so the run's config hash (and so its resume
    check) changes only when the code does.

    Raises:
        ValueError: The folder is missing, not a folder, or too large to ship.
    """
    import gzip  # only for a run with a code folder: a dry run of any other imports none of these
    import tarfile

    if not folder.is_dir():
        raise ValueError(f"`code`: {folder} is not a folder (paths are relative to the config file)")
    resolved = os.path.realpath(folder)
    if any(resolved == root or resolved.startswith(root + "/") for root in PSEUDO_ROOTS):
        raise ValueError(f"`code`: {folder} is a folder of the operating system ({resolved}), not code to ship")
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for relative, local, mode in code_files(folder):
                content = _read_now(local)
                info = tarfile.TarInfo(relative)
                info.size, info.mode, info.mtime = len(content), 0o755 if mode & 0o111 else 0o644, 0
                tar.addfile(info, io.BytesIO(content))
    packed = raw.getvalue()
    if len(packed) > CONFIGMAP_LIMIT - 64 * 1024:  # room for the config and cw's own files
        raise _too_large(folder, f"{_mib(len(packed))} compressed")
    return packed


def shipped_code(cluster: ClusterSpec, base_dir: Path) -> tuple[list[ShippedFile], list[str]]:
    """The ConfigMap files of the run's own code and script, and one notice each.

    Raises:
        ValueError: The code folder or script is missing or too large, or the script is not in
            the code folder.
    """
    code, script = cluster.code, cluster.script
    files: list[ShippedFile] = []
    notices: list[str] = []
    if code is not None and code.path is not None:
        folder = (base_dir / code.path).expanduser()
        packed = pack_folder(folder)
        files.append(ShippedFile(key=CODE_ARCHIVE, path=CODE_ARCHIVE, content=packed))
        notices.append(f"`code`: ships {code.path} with the run ({_mib(len(packed))} packed) as {CODE_MOUNT}")
        if script is not None and not (folder / script).is_file():
            raise ValueError(f"`script`: {script} is not a file in {folder} (a script path is relative to `code`)")
    elif code is not None:
        notices.append(f"`code`: the pods clone {code.git} at {code.commit} into {CODE_MOUNT}")
        if script is not None:
            notices.append(f"`script`: {script} is looked for in that commit when the pod starts (not checked here)")
    elif script is not None:
        local = base_dir / script
        if not os.path.lexists(local):
            raise ValueError(f"`script`: {local} does not exist (relative to the config file, or to `code` when set)")
        check_shippable(local, "`script`")  # never opens a FIFO, a device or /proc/kmsg
        content = read_without_waiting(local, "`script`")
        if len(content) > CONFIGMAP_LIMIT:
            raise ValueError(f"`script`: {local} is over the 1 MiB a ConfigMap holds; ship it with `code`")
        files.append(ShippedFile(key=local.name, path=local.name, content=content))
    return files, notices


def script_in_pod(cluster: ClusterSpec) -> str | None:
    """Where the trainer finds the run's own script, or None when it runs the framework's command."""
    if cluster.script is None:
        return None
    if cluster.code is not None:
        return f"{CODE_MOUNT}/{cluster.script}"
    return f"{CONFIG_MOUNT}/{Path(cluster.script).name}"


def code_setup(code: CodeSource | None) -> list[list[str]]:
    """The trainer's setup step that puts the code at /cw-code (none without `code`)."""
    if code is None:
        return []
    step = ["python3", f"{CONFIG_MOUNT}/{CODE_FILE}", "--dest", CODE_MOUNT]
    if code.git is not None:
        step += ["--git", code.git, "--commit", str(code.commit)]
    else:
        step += ["--archive", f"{CONFIG_MOUNT}/{CODE_ARCHIVE}"]
    return [[*step, "--install"] if code.install else step]


def code_pythonpath(code: CodeSource | None) -> list[str]:
    """PYTHONPATH entries for the code: its root and its ``src/`` (the src layout), when it has one."""
    return [] if code is None else [CODE_MOUNT, f"{CODE_MOUNT}/src"]
