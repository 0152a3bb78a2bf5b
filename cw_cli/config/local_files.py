"""Whether a local file a config lists (``files:``) can travel with a run: checked from its
metadata alone, never opened, so a launch, a dry run and an estimate refuse the same files.

A FIFO would block the reader, a device never ends, and the "regular files" of ``/proc`` and
``/sys`` report size 0 and may block (``/proc/kmsg``) or describe this machine: none of them is a
file to ship.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cw_cli.plain_files import pseudo_file

#: The API server refuses a ConfigMap whose keys plus values exceed this (data and binaryData).
CONFIGMAP_LIMIT = 1024 * 1024
#: Kernel pseudo-filesystems and devices: their files look regular but are not files a user keeps data in.
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def volume_hint(setting: str) -> str:
    """The way round a file too large for a ConfigMap."""
    return (
        "put it on a volume (`volumes: {my-data: /data}`, a PersistentVolumeClaim) and "
        f"{setting} its path under /data"
    )


def check_shippable(path: Path, what: str) -> os.stat_result:
    """Refuse, without opening it, a file that cannot travel in the run's ConfigMap.

    Args:
        path: The file (relative paths already joined to the config's folder).
        what: The setting that names it, for the message (```files```).

    Returns:
        Its ``stat``, for the reader.

    Raises:
        ValueError: Missing, a folder, not a regular file, a file of the operating system, or
            over :data:`CONFIGMAP_LIMIT`; one line naming ``what``, the path and the fix.
    """
    try:
        info = os.stat(path)  # stat, not open: opening a FIFO blocks
    except FileNotFoundError:
        raise ValueError(f"{what}: {path} does not exist (paths are relative to the config file)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what}: {path} cannot be read ({exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{what}: {path} is a folder; list its files")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{what}: {path} is not a regular file (a device, FIFO or socket)")
    resolved = pseudo_file(path, PSEUDO_ROOTS)
    if resolved is not None:
        raise ValueError(f"{what}: {path} is a file of the operating system ({resolved}), not one to ship with a run")
    if info.st_size > CONFIGMAP_LIMIT:
        raise ValueError(
            f"{what}: {path} is {info.st_size / 2**20:.2f} MiB, over the 1 MiB a ConfigMap holds; {volume_hint('use')}"
        )
    return info
