"""Where a run's outputs land: always in its own folder on the checkpoint volume.

The trainer's working directory is ``/checkpoints/<run>``, so a relative ``output_dir`` (what
almost every public config writes: ``data/Qwen-SFT``, ``./outputs/out``) lands there as written.
An absolute path outside ``/checkpoints`` would be the container's own disk, lost with the pod:
it is moved into the run's folder, and the move is reported.
"""

from __future__ import annotations

import copy
import posixpath
from typing import Any

from cw_cli.frameworks.base import CHECKPOINT_MOUNT

KeyPath = tuple[str, ...]


def _lookup(config: dict[str, Any], path: KeyPath) -> tuple[dict[str, Any] | None, Any]:
    node: Any = config
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None, None
    return node, node.get(path[-1])


def place_outputs(
    config: dict[str, Any], output_keys: tuple[KeyPath, ...], folder: str
) -> tuple[dict[str, Any], list[str]]:
    """Keep every output path of a native config inside the checkpoint volume.

    Args:
        config: The native config (not modified; a copy is returned).
        output_keys: Key paths that name output folders, e.g. ``("trainer", "args", "output_dir")``.
        folder: The run's folder on the volume, ``/checkpoints/<run>``.

    Returns:
        (the config with moved paths, one notice per moved path).
    """

    placed = copy.deepcopy(config)
    notices: list[str] = []
    for path in output_keys:
        parent, value = _lookup(placed, path)
        if parent is None or not isinstance(value, str) or not value.startswith("/"):
            continue  # relative: lands in the run's folder, the working directory
        normal = posixpath.normpath(value)
        if normal == CHECKPOINT_MOUNT or normal.startswith(CHECKPOINT_MOUNT + "/"):
            continue
        moved = f"{folder}/{posixpath.basename(normal) or 'output'}"
        parent[path[-1]] = moved
        notices.append(
            f"`{'.'.join(path)}: {value}` is outside the checkpoint volume and would be lost with the pod; "
            f"cw writes it to {moved} instead (write a relative path to choose the folder inside the run's)"
        )
    return placed, notices
