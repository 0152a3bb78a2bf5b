"""Finding a model's config.json without loading the model.

:func:`find_model_config` looks in a local folder, the Hugging Face caches, and the hub only
when allowed and online (one download of config.json); it never raises for a model it cannot
find: :attr:`ModelConfigLookup.note` says where it looked and why not.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from msgspec import Struct

from cw_cli.estimate.values import TRUE

#: Frameworks whose config cw reads for an estimate; any other (a plugin) gets none.
FRAMEWORKS = ("trl", "axolotl", "verifiers")
#: The native key naming the model, per framework.
MODEL_KEYS = {"trl": "model_name_or_path", "axolotl": "base_model", "verifiers": "model"}


class ModelConfigLookup(Struct, frozen=True):
    """Where a model's config.json was found (or everywhere it was looked for).

    Attributes:
        config: The parsed config.json, or None.
        source: Its path (or ``hub:<id>``), or None.
        looked: Every place looked at, in order.
        note: Why it was not found (None when found).
    """

    config: dict[str, Any] | None
    source: str | None
    looked: tuple[str, ...] = ()
    note: str | None = None


def hf_cache_dirs() -> list[Path]:
    """The Hugging Face hub caches to search: ``HF_HUB_CACHE``, ``HF_HOME``/hub, the default."""
    env = os.environ
    found: list[Path] = []
    for value in (env.get("HF_HUB_CACHE"), env.get("HUGGINGFACE_HUB_CACHE"),
                  env.get("HF_HOME") and os.path.join(env["HF_HOME"], "hub")):  # fmt: skip
        if value:
            found.append(Path(value).expanduser())
    if not found:
        xdg = env.get("XDG_CACHE_HOME")
        found.append((Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    unique: list[Path] = []
    for path in found:
        if path not in unique:
            unique.append(path)
    return unique


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _from_cache(cache: Path, repo_id: str, revision: str | None) -> Path | None:
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = folder / "refs" / (revision or "main")
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    if commit and (snapshots / commit / "config.json").is_file():
        return snapshots / commit / "config.json"
    candidates = [p / "config.json" for p in snapshots.iterdir() if (p / "config.json").is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def _offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def find_model_config(model: str, base_dir: Path | None = None, *, hub: bool = False, revision: str | None = None,
                      cache_dirs: Iterable[Path] | None = None) -> ModelConfigLookup:
    """Find and read a model's config.json without loading the model.

    Looks at, in order: ``model`` as a local folder (relative to ``base_dir``) or a config.json
    file; each Hugging Face cache (``models--org--name/snapshots/<rev>/config.json``, the
    ``refs/<revision>`` snapshot first); then, only with ``hub`` and not offline
    (``HF_HUB_OFFLINE``), ``huggingface_hub.hf_hub_download`` when that package is installed.

    Args:
        model: A hub id (``org/name``) or a path.
        base_dir: Folder a relative path is read from (the config's).
        hub: Allow one download from the hub.
        revision: The model revision (``model_revision``); ``main`` by default.
        cache_dirs: Caches to search (default :func:`hf_cache_dirs`).
    """
    looked: list[str] = []
    path = Path(model).expanduser()
    local = [path] if path.is_absolute() or base_dir is None else [base_dir / path]
    for candidate in local:
        looked.append(str(candidate))
        config = candidate if candidate.name == "config.json" else candidate / "config.json"
        if config.is_file():
            data = _load_json(config)
            if data is not None:
                return ModelConfigLookup(data, str(config), tuple(looked))
    is_repo_id = re.fullmatch(r"[\w.-]+(/[\w.-]+)?", model) is not None and not path.is_absolute()
    if is_repo_id:
        for cache in cache_dirs if cache_dirs is not None else hf_cache_dirs():
            looked.append(str(cache))
            found = _from_cache(Path(cache), model, revision)
            if found is not None and (data := _load_json(found)) is not None:
                return ModelConfigLookup(data, str(found), tuple(looked))
    why = f"config.json of {model} not found (looked in {', '.join(looked)})"
    if not is_repo_id:
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; a path inside the pods cannot be read from here")
    if not hub:
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; `cw estimate` fetches it from the hub")
    if _offline():
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; HF_HUB_OFFLINE is set, so the hub was not asked")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; install huggingface_hub to fetch it from the hub")
    looked.append(f"hub:{model}")
    try:
        downloaded = hf_hub_download(model, "config.json", revision=revision)
    except Exception as exc:  # noqa: BLE001 - any hub failure (network, gated, missing) is a skip, not a crash
        return ModelConfigLookup(None, None, tuple(looked), f"{why}; the hub said: {str(exc).splitlines()[0][:200]}")
    data = _load_json(Path(downloaded))
    if data is None:
        return ModelConfigLookup(None, None, tuple(looked), f"the hub's config.json of {model} is not a JSON object")
    return ModelConfigLookup(data, f"hub:{model} ({downloaded})", tuple(looked))
