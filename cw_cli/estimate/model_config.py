"""Finding a model's config.json without loading the model.

:func:`find_model_config` looks in a local folder, the Hugging Face caches, and the hub only
when allowed and online (one download of config.json); it never raises for a model it cannot
find: :attr:`ModelConfigLookup.note` says where it looked and why not. :func:`check_model_config`
refuses a config.json whose dimensions no model has, before the estimate sizes anything from it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct

from cw_cli.errors import ConfigError
from cw_cli.estimate.values import TRUE

#: The largest config.json read: real ones are a few KiB (a long ``id2label`` a few hundred).
MAX_CONFIG_JSON_BYTES = 16 * 2**20
_WIDE = 2**24  # wider than any layer, vocabulary or context of a real model, far below a float's reach
_MANY = 2**16  # heads and experts
#: The dimensions the estimate (or transformers, on the meta device) reads: field -> (least, most).
#: Aliases of other families (``n_layer``, ``d_model``...) are checked too: the meta device builds
#: a model of whatever size the config says.
DIMENSIONS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "n_layers", "num_layers"), (1, 10_000)),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), (1, _WIDE)),
    **dict.fromkeys(("intermediate_size", "moe_intermediate_size", "n_inner", "ffn_dim", "d_ff"), (1, _WIDE)),
    "shared_expert_intermediate_size": (0, _WIDE),
    **dict.fromkeys(("num_attention_heads", "num_key_value_heads", "n_head", "n_heads", "num_heads"), (1, _MANY)),
    "head_dim": (1, _MANY),
    "vocab_size": (1, 2**28),
    **dict.fromkeys(("num_local_experts", "num_experts", "num_experts_per_tok"), (0, _MANY)),
    "decoder_sparse_step": (1, 10_000),
    **dict.fromkeys(("max_position_embeddings", "n_positions"), (1, 2**30)),
}


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


def _refuse(path: Path | str, problem: str, fix: str) -> ConfigError:
    return ConfigError([f"{path}: {problem}"], hint=fix)


#: Kernel pseudo-filesystems: their "regular files" (size 0) may block on read (/proc/kmsg).
_PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def _load_json(path: Path) -> dict[str, Any]:
    """A config.json's object.

    Raises:
        ConfigError: Not a regular file (a device, FIFO, socket or a kernel pseudo-file such as
            /proc/kmsg, which would block), over :data:`MAX_CONFIG_JSON_BYTES`, not JSON, not an
            object, or nested too deep for the parser: each names the file, never "not found".
    """
    fix = "give the model's own config.json (re-download it, or fix the model path)"
    try:
        info = os.stat(path)  # stat, not open: a FIFO would block, a device never end
        resolved = os.path.realpath(path)
    except (OSError, ValueError) as exc:
        raise _refuse(path, f"cannot be read ({getattr(exc, 'strerror', None) or exc})", fix) from None
    if not stat.S_ISREG(info.st_mode) or any(resolved == r or resolved.startswith(r + "/") for r in _PSEUDO_ROOTS):
        raise _refuse(path, "not a regular file (a device, FIFO, socket or a file of the operating system)", fix)
    if info.st_size > MAX_CONFIG_JSON_BYTES:
        raise _refuse(path, f"is {info.st_size / 2**20:,.1f} MiB, more than a config.json ever is "
                      f"({MAX_CONFIG_JSON_BYTES // 2**20} MiB)", fix)  # fmt: skip
    try:
        # Non-blocking and bounded: the file may have changed since it was looked at.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        try:
            raw = os.read(descriptor, MAX_CONFIG_JSON_BYTES + 1)
        finally:
            os.close(descriptor)
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror or exc})", fix) from None
    try:
        data = json.loads(raw)
    except RecursionError:
        raise _refuse(path, "nested too deep to be a model's config.json", fix) from None
    except UnicodeDecodeError:
        raise _refuse(path, "is not UTF-8 text, so not a config.json", fix) from None
    except ValueError as exc:
        raise _refuse(path, f"is not valid JSON ({str(exc)[:120]})", fix) from None
    if not isinstance(data, dict):
        raise _refuse(path, f"holds a JSON {type(data).__name__}, not the object a config.json is", fix)
    return data


def _dimension_problem(value: Any, least: int, most: int) -> str | None:
    """Why a dimension's value is unusable (None when it is fine or absent)."""
    if value is None:
        return None
    number = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if isinstance(value, bool) or not number or not least <= value <= most:
        return f"is {_shown(value)}; expected a whole number from {least:,} to {most:,}"
    return None


def _shown(value: Any) -> str:
    """A value as a message quotes it, short: a 400-digit integer is not printed whole."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        if abs(value) < 10**15:
            return str(value)
        # str() refuses integers of over 4,300 digits: those are only said to be long
        return f"an integer of {len(str(abs(value))):,} digits" if value.bit_length() < 14_000 else "an integer of thousands of digits"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else json.dumps(value)  # Infinity, NaN as in the file
    if isinstance(value, str):
        return json.dumps(value) if len(value) <= 40 else json.dumps(value[:37]) + "..."
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"


def check_model_config(config: Mapping[str, Any], source: str) -> None:
    """Refuse a config.json whose dimensions no model has, before anything is sized from them.

    An absent or null field is left to the estimate (which falls back to the family's default
    or says the field is missing); a present one must be a whole number in :data:`DIMENSIONS`'
    range, so no count overflows, divides by zero or builds billions of layers.

    Args:
        config: The parsed config.json.
        source: Where it was read (a path, or ``hub:<id>``), for the message.

    Raises:
        ConfigError: One line naming the file, the field and its range.
    """
    fix = "fix the field in the model's config.json (or give another model)"
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise _refuse(source, f"`model_type` is {_shown(model_type)}; expected a name such as \"llama\"", fix)
    sections: list[tuple[str, Mapping[str, Any]]] = [("", config)]
    text_config = config.get("text_config")
    if text_config is not None:
        if not isinstance(text_config, Mapping):
            raise _refuse(source, f"`text_config` is {_shown(text_config)}; expected an object", fix)
        sections.append(("text_config.", text_config))
    for prefix, section in sections:
        for key, (least, most) in DIMENSIONS.items():
            problem = _dimension_problem(section.get(key), least, most)
            if problem is not None:
                raise _refuse(source, f"`{prefix}{key}` {problem}", fix)
        layers = section.get("mlp_only_layers")
        if layers is not None and not (isinstance(layers, list) and all(type(i) is int for i in layers)):
            problem = f"is {_shown(layers)}; expected a list of layer numbers"
            raise _refuse(source, f"`{prefix}mlp_only_layers` {problem}", fix)


def _from_cache(cache: Path, repo_id: str, revision: str | None) -> Path | None:
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = folder / "refs" / (revision or "main")
    commit = _ref_commit(ref) or revision
    if commit and "/" not in commit and _present(snapshots / commit / "config.json"):
        return snapshots / commit / "config.json"
    candidates = [p / "config.json" for p in snapshots.iterdir() if (p / "config.json").is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def _ref_commit(ref: Path) -> str | None:
    """The commit a cache's ``refs/<revision>`` file names; None when it is not a small regular
    file of text (never opened when it is a FIFO or a kernel pseudo-file, which may block)."""
    try:
        info = os.stat(ref)
        resolved = os.path.realpath(ref)
        if not stat.S_ISREG(info.st_mode) or info.st_size > 4096 or resolved.startswith(_PSEUDO_ROOTS):
            return None
        descriptor = os.open(ref, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            text = os.read(descriptor, 4096).decode("utf-8", errors="replace").strip()
        finally:
            os.close(descriptor)
    except (OSError, ValueError):
        return None
    return text or None


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

    Raises:
        ConfigError: A config.json found is a device, FIFO or kernel pseudo-file, too large, not
            JSON, not an object or nested too deep: named, never reported as not found.
    """
    looked: list[str] = []
    path = Path(model).expanduser()
    local = [path] if path.is_absolute() or base_dir is None else [base_dir / path]
    for candidate in local:
        looked.append(str(candidate))
        config = candidate if candidate.name == "config.json" else candidate / "config.json"
        if _present(config):  # a FIFO, a link to /proc/kmsg or a broken file is refused, not passed over
            return ModelConfigLookup(_load_json(config), str(config), tuple(looked))
    is_repo_id = re.fullmatch(r"[\w.-]+(/[\w.-]+)?", model) is not None and not path.is_absolute()
    if is_repo_id:
        for cache in cache_dirs if cache_dirs is not None else hf_cache_dirs():
            looked.append(str(cache))
            found = _from_cache(Path(cache), model, revision)
            if found is not None:
                return ModelConfigLookup(_load_json(found), str(found), tuple(looked))
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
    return ModelConfigLookup(_load_json(Path(downloaded)), f"hub:{model} ({downloaded})", tuple(looked))


def _present(path: Path) -> bool:
    """Whether something is at ``path`` (a broken link too: it is refused rather than skipped)."""
    try:
        return os.path.lexists(path) and not os.path.isdir(path)
    except (OSError, ValueError):
        return False
