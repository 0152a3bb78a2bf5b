"""Before a run takes GPUs: does its data have the columns its training type reads?

The framework declares what it reads (:meth:`BaseTrainingFramework.dataset_needs`); this module
finds the data where it can be read on this machine (a local file or folder, as shipped with
the run, or a dataset in the local Hugging Face hub cache), reads only the first record, header
or schema of one data file, and compares. A wrong column is an error; data that is not here (a
hub dataset not cached, a path on a volume) or in a form read here only with a missing package
is a notice that it was not checked. A data file that is there but cannot be read at all (empty,
not text, not JSON or CSV it claims to be, a corrupt Parquet file, a FIFO, a link loop) is an
error too: the trainer would fail on it after the run took its GPUs.

Nothing heavy is imported at module import (a dry run must start fast): pyarrow only for a
Parquet or Arrow file, and only if installed. Files are stat-ed before they are opened, read
non-blocking and bounded, so a FIFO, a device or a huge file costs nothing.
"""

from __future__ import annotations

import io
import os
import re
import stat
from fnmatch import fnmatch
from pathlib import Path

from cw_cli.frameworks.base import DatasetNeed
from cw_cli.render.folder_walk import FolderTooDeep, walk_files
from cw_cli.render.shipped_files import PSEUDO_ROOTS, read_nonblocking

#: Bytes read from a JSON, CSV or README file: the first record of a data file fits in far less.
READ_LIMIT = 1 << 20
#: A Parquet footer (the schema) larger than this is not read.
FOOTER_LIMIT = 16 << 20
#: Folder entries looked at before giving up on finding data files (`dataset_name: /`).
MAX_ENTRIES = 20_000
#: Data file suffixes -> the `datasets` builder that reads them (datasets' _EXTENSION_TO_MODULE).
FORMATS = {
    ".jsonl": "json",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".txt": "text",
}
#: `path:` values that name a `datasets` builder, whose data is in `data_files`.
BUILDERS = ("json", "csv", "parquet", "arrow", "text")
#: Words `datasets` recognises in file names for its standard splits (datasets/data_files.py).
SPLIT_WORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


class _Unchecked(Exception):
    """The columns cannot be read here; the message says why (for a notice)."""


class _Unreadable(Exception):
    """The data file is here but no reader could read it; the message says why (for an error)."""


#: The fix an unreadable data file's error gives.
_FIX = "fix or replace the file, or point the setting at the data the run should read"
#: Column names shown in a message: at most this many, each at most :data:`_NAME_SHOWN` characters.
_COLUMNS_SHOWN = 30
_NAME_SHOWN = 60


def check_datasets(needs: list[DatasetNeed], base_dir: Path) -> list[str]:
    """Check each dataset's columns against what its training type reads.

    Args:
        needs: What the framework reads, per dataset reference in the config.
        base_dir: Folder of the config file; relative paths start there.

    Returns:
        One notice per dataset whose columns were not checked, saying why.

    Raises:
        ValueError: A dataset lacks the columns its training type reads; the message names the
            key, the dataset, the file read, the columns found and the ones expected. Or its data
            file cannot be read at all (the message names the file and the fix), or its folder is
            nested deeper than :data:`~cw_cli.render.folder_walk.MAX_DEPTH`.
    """
    notices = []
    for need in needs:
        try:
            data_file = locate(need, base_dir)
            found = read_columns(data_file)
        except _Unreadable as exc:
            raise ValueError(f"`{need.key}`: {need.reference}: {exc}; {_FIX}") from None
        except FolderTooDeep as exc:
            raise ValueError(f"`{need.key}`: {need.reference}: {exc}") from None
        except _Unchecked as exc:
            notices.append(f"`{need.key}`: {need.reference} {exc}: its columns were not checked")
            continue
        except OSError as exc:  # unreadable folders on the way (permissions): never a refusal
            notices.append(f"`{need.key}`: {need.reference} cannot be read here ({exc}): its columns were not checked")
            continue
        kept = found if need.columns is None else [c for c in found if c in need.columns]
        if not any(form <= set(kept) for form in need.accepted):
            raise ValueError(_wrong_columns(need, data_file, found, kept))
    return notices


#: Columns in the order people write them (`prompt` before `completion`), for messages.
_ORDER = ("prompt", "messages", "text", "chosen", "rejected", "completion", "label", "solution")


def _in_order(form: frozenset[str]) -> list[str]:
    return sorted(form, key=lambda c: (_ORDER.index(c) if c in _ORDER else len(_ORDER), c))


def _wrong_columns(need: DatasetNeed, data_file: Path, found: list[str], kept: list[str]) -> str:
    expected = "; or ".join(" and ".join(_in_order(form)) for form in need.accepted)
    lines = [
        f"`{need.key}`: {need.reference} does not have the columns its training reads",
        f"  file: {data_file}",
        f"  columns found: {_shown_columns(found)}",
    ]
    if kept != found:
        lines.append(f"  columns kept by `columns`: {_shown_columns(kept)}")
    lines += [f"  columns expected: {expected}", f"  ({need.description}; rename the columns to match)"]
    return "\n".join(lines)


def _shown_columns(columns: list[str]) -> str:
    """Column names as a message lists them: escaped, each and their number bounded (a header
    field may be 128 KiB of one name)."""
    shown = []
    for column in columns[:_COLUMNS_SHOWN]:
        name = column if column.isprintable() else repr(column)[1:-1]
        shown.append(name if len(name) <= _NAME_SHOWN else f"{name[:_NAME_SHOWN - 3]}... ({len(column):,} characters)")
    more = len(columns) - len(shown)
    return ", ".join(shown) + (f" and {more:,} more" if more > 0 else "") if shown else "(none)"


def locate(need: DatasetNeed, base_dir: Path) -> Path:
    """The data file whose columns stand for the dataset's training split.

    Raises:
        _Unchecked: The data is not on this machine, or cw cannot tell which file it is.
        _Unreadable: The path is here but not a file or folder (a FIFO, a device, a link loop).
    """
    reference = need.reference
    _refuse_broken(base_dir / reference)
    local = _existing(base_dir / reference)
    if local is None and reference in BUILDERS:
        return _pick(base_dir, need, builder=True)
    if local is not None and local.is_file():
        return local
    if local is not None and local.is_dir():
        return _pick(local, need)
    if local is not None:
        raise _Unreadable(f"{local} is not a regular file or folder (a FIFO, a device or a socket)")
    if not _HUB_ID.match(reference) or Path(reference).suffix.lower() in FORMATS:
        raise _Unchecked("is not on this machine (a path in the image or on a volume)")
    snapshot = cached_snapshot(reference)
    if snapshot is None:
        raise _Unchecked("is not in the local Hugging Face cache")
    return _pick(snapshot, need)


def _refuse_broken(path: Path) -> None:
    """Refuse a path that is here as a link but leads nowhere readable (a loop, a dangling link):
    it is neither shipped nor found in the pods.

    Raises:
        _Unreadable: The link cannot be followed.
    """
    try:
        path = path.expanduser()
        if not os.path.islink(path):
            return
        os.stat(path)
    except FileNotFoundError:
        raise _Unreadable(f"{path} is a link to {_link_target(path)}, which does not exist") from None
    except OSError as exc:
        raise _Unreadable(f"{path} cannot be read ({exc.strerror or exc})") from None
    except ValueError:
        return  # not a path (a NUL): left to the lookup, which says it is not here


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "a missing path"


def _existing(path: Path) -> Path | None:
    try:
        return path.expanduser() if path.expanduser().exists() else None
    except (OSError, ValueError):
        return None  # not a path (too long, odd characters)


def hub_cache() -> Path:
    """The Hugging Face hub cache folder, as huggingface_hub finds it."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(cache).expanduser() / "huggingface" / "hub"


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot of a hub dataset (the one `main` points at, else the newest), or None."""
    folder = hub_cache() / f"datasets--{repo_id.replace('/', '--')}"
    snapshots = folder / "snapshots"
    try:
        if not snapshots.is_dir():
            return None
        ref = folder / "refs" / "main"
        if ref.is_file():
            commit = read_nonblocking(ref, 256).decode("ascii", errors="replace").strip()
            if commit and "/" not in commit and (snapshots / commit).is_dir():
                return snapshots / commit
        candidates = [entry for entry in snapshots.iterdir() if entry.is_dir()]
        return max(candidates, key=lambda entry: entry.stat().st_mtime) if candidates else None
    except OSError:
        return None


def _pick(root: Path, need: DatasetNeed, builder: bool = False) -> Path:
    """One data file of the need's configuration and split under ``root``, of the format
    `datasets` would read there (the most common one).

    Raises:
        _Unchecked: No such file is here, or the layout leaves the choice open.
    """
    patterns = list(need.data_files)
    if builder and not patterns:
        raise _Unchecked("names no `data_files` here")
    if not patterns and not builder:
        patterns = _readme_patterns(root, need)
    base = root / need.data_dir if need.data_dir else root
    if patterns:
        files = [f for f in _data_files(base) if any(fnmatch(f, p.removeprefix("./")) for p in patterns)]
        for pattern in patterns:  # a pattern may be a file of its own (`data_files: ./train.jsonl`)
            single = _existing(base / pattern)
            if single is not None and single.is_file() and Path(pattern).suffix.lower() in FORMATS:
                files.append(str(single.relative_to(base)) if single.is_relative_to(base) else str(single))
    else:
        if need.config_name not in (None, "default"):
            raise _Unchecked(f"has no configuration `{need.config_name}` that cw can find here")
        files = _in_split(_data_files(base), need.split)
    if not files:
        raise _Unchecked(f"has no data files of the `{need.split}` split here")
    counts: dict[str, int] = {}
    for name in files:
        kind = FORMATS[Path(name).suffix.lower()]
        counts[kind] = counts.get(kind, 0) + 1
    common = max(counts, key=lambda kind: counts[kind])
    chosen = sorted(name for name in files if FORMATS[Path(name).suffix.lower()] == common)[0]
    return base / chosen


def _data_files(root: Path) -> list[str]:
    """Data files under ``root`` (paths relative to it), hidden folders left out, bounded in
    entries and depth (:func:`walk_files` enters no link to a folder and opens nothing).

    Raises:
        FolderTooDeep: ``root`` is nested deeper than a dataset is.
    """
    found: list[str] = []
    seen = 0
    try:
        for relative, path, _ in walk_files(root, skip_folder=lambda name: name.startswith((".", "__"))):
            seen += 1
            if seen > MAX_ENTRIES:
                return found
            if not path.name.startswith(".") and path.suffix.lower() in FORMATS:
                found.append(relative)
    except FileNotFoundError:
        return found
    return found


def _in_split(files: list[str], split: str) -> list[str]:
    """The files `datasets` assigns to a split by their names; all of them for `train` when no
    name says a split (datasets' default)."""
    words = SPLIT_WORDS.get(split, (split,))
    every = [word for group in SPLIT_WORDS.values() for word in group]
    matched = [name for name in files if any(_names(name, word) for word in words)]
    if matched:
        return matched
    if split == "train" and not any(_names(name, word) for name in files for word in every):
        return files
    return []


def _names(path: str, word: str) -> bool:
    return re.search(rf"(^|[-._ 0-9/]){re.escape(word)}($|[-._ 0-9/])", path) is not None


def _readme_patterns(root: Path, need: DatasetNeed) -> list[str]:
    """The data file patterns a dataset card's `configs:` gives the need's configuration and
    split (empty when the card has none: the layout decides).

    Raises:
        _Unchecked: The card has configurations but none that is the need's, or it has no such split.
    """
    configs = _card_configs(root / "README.md")
    if not configs:
        return []
    wanted = need.config_name
    chosen = None
    for config in configs:
        name = config.get("config_name", "default")
        if name == wanted or (wanted is None and (config.get("default") is True or name == "default")):
            chosen = config
            break
    if chosen is None and wanted is None and len(configs) == 1:
        chosen = configs[0]
    if chosen is None:
        raise _Unchecked(f"has no configuration `{wanted or 'default'}` that cw can find here")
    files = chosen.get("data_files")
    prefix = f"{chosen['data_dir'].strip('/')}/" if isinstance(chosen.get("data_dir"), str) else ""
    if files is None and prefix:
        files = "**"  # a configuration that is a folder: all of its files
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list):
        raise _Unchecked("has a dataset card cw cannot read")
    patterns: list[str] = []
    for entry in files:
        if isinstance(entry, str) and need.split == "train":
            patterns.append(entry)
        elif isinstance(entry, dict) and entry.get("split") == need.split:
            paths = entry.get("path")
            patterns += [paths] if isinstance(paths, str) else [p for p in paths or [] if isinstance(p, str)]
    if not patterns:
        raise _Unchecked(f"has no `{need.split}` split in its dataset card")
    return [prefix + pattern for pattern in patterns]


def _card_configs(readme: Path) -> list[dict]:
    """The `configs:` of a dataset card's YAML header, or none."""
    try:
        if not readme.is_file():
            return []
        text = read_nonblocking(readme, READ_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return []
    if not text.startswith("---"):
        return []
    end = text.find("\n---", 3)
    if end < 0:
        return []
    import yaml  # lazily: only a dataset card needs it

    try:
        header = yaml.safe_load(text[3:end])
    except yaml.YAMLError:
        return []
    configs = header.get("configs") if isinstance(header, dict) else None
    return [c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else []


def read_columns(path: Path) -> list[str]:
    """The column names of a data file, from its first record, header or schema.

    Raises:
        _Unchecked: A format that cannot be read here (compressed, Parquet without pyarrow), or a
            first record larger than cw reads.
        _Unreadable: Not a regular file, a file that cannot be opened, empty, not text, or not
            the JSON, CSV or Parquet its name says.
    """
    try:
        info = os.stat(path)  # stat first: opening a FIFO blocks
        resolved = os.path.realpath(path)
    except (OSError, ValueError) as exc:
        raise _Unreadable(f"{path} cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    if not stat.S_ISREG(info.st_mode) or any(resolved == r or resolved.startswith(r + "/") for r in PSEUDO_ROOTS):
        raise _Unreadable(f"{path} is not a regular file (a FIFO, a device, a socket or a file of the operating system)")
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise _Unchecked(f"is read from {path.name}, a format cw does not read")
    if kind in ("parquet", "arrow"):
        return _arrow_columns(path, kind, info.st_size)
    try:
        data = read_nonblocking(path, READ_LIMIT)
    except OSError as exc:
        raise _Unreadable(f"{path} cannot be read ({exc.strerror or exc})") from None
    if not data.strip():
        raise _Unreadable(f"{path} is empty")
    truncated = len(data) == READ_LIMIT
    _refuse_binary(data, truncated, path)
    if kind == "text":
        return ["text"]  # datasets' text builder: one `text` column
    if kind == "json":
        return _json_columns(data, truncated, path)
    return _csv_columns(data, "\t" if kind == "tsv" else ",", truncated, path)


def _refuse_binary(data: bytes, truncated: bool, path: Path) -> None:
    """Refuse bytes no text reader takes: a NUL, or bytes that are not UTF-8 (a character cut
    at the read bound is not counted).

    Raises:
        _Unreadable: Naming the file and where.
    """
    nul = data.find(b"\0")
    if nul >= 0:
        raise _Unreadable(f"{path} is not text (a NUL byte at byte {nul:,}): not JSON, CSV or text data")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (truncated and exc.start >= len(data) - 4):
            raise _Unreadable(f"{path} is not UTF-8 text (byte {exc.start:,}); save it as UTF-8") from None


def _json_columns(data: bytes, truncated: bool, path: Path) -> list[str]:
    """Keys of the first record: a JSON Lines file, an array of records, or an object of columns."""
    import json

    text = data.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if text.startswith("["):
        text = text[1:].lstrip()
    try:
        first, _ = json.JSONDecoder().raw_decode(text)
    except RecursionError:
        raise _Unreadable(f"{path} has JSON nested deeper than a record is") from None
    except ValueError as exc:
        if truncated:
            raise _Unchecked(f"is read from {path.name}, which has a first record over 1 MiB") from None
        raise _Unreadable(f"{path} has no JSON record at its start ({exc})") from None
    if not isinstance(first, dict):
        raise _Unreadable(f"{path} starts with a JSON {type(first).__name__}, not a record (an object of columns)")
    return [str(key) for key in first]


def _csv_columns(data: bytes, delimiter: str, truncated: bool, path: Path) -> list[str]:
    import csv

    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    if truncated and "\n" not in text:
        raise _Unchecked(f"is read from {path.name}, whose header is over 1 MiB")
    limit = csv.field_size_limit()
    csv.field_size_limit(READ_LIMIT + 1)  # a header field may be long; the bytes read are bounded anyway
    try:
        header = next(csv.reader(io.StringIO(text), delimiter=delimiter, strict=True), [])
    except csv.Error as exc:
        if truncated:
            raise _Unchecked(f"is read from {path.name}, whose header cw cannot read in its first 1 MiB") from None
        raise _Unreadable(f"{path} has a header that is not valid CSV ({exc})") from None
    finally:
        csv.field_size_limit(limit)
    if not any(column.strip() for column in header):
        raise _Unreadable(f"{path} has an empty header line")
    return list(header)


def _arrow_columns(path: Path, kind: str, size: int) -> list[str]:
    """Column names from a Parquet footer or an Arrow stream's schema, with pyarrow if installed."""
    if size == 0:
        raise _Unreadable(f"{path} is empty")
    if kind == "parquet":
        try:
            with open(path, "rb") as handle:  # a regular file, checked by the caller
                head = handle.read(4)
                handle.seek(max(0, size - 8))
                tail = handle.read(8)
        except OSError as exc:
            raise _Unreadable(f"{path} cannot be read ({exc.strerror or exc})") from None
        if head != b"PAR1" or len(tail) < 8 or tail[4:] != b"PAR1" or int.from_bytes(tail[:4], "little") > size - 12:
            raise _Unreadable(f"{path} is not a Parquet file (no Parquet header and footer)")
        if int.from_bytes(tail[:4], "little") > FOOTER_LIMIT:
            raise _Unchecked(f"is read from {path.name}, whose Parquet footer is over {FOOTER_LIMIT >> 20} MiB")
    try:
        import pyarrow as pa  # lazily and optionally: cw does not depend on it
        import pyarrow.parquet as pq
    except ImportError:
        raise _Unchecked(f"is read from {path.name}, and pyarrow (which reads {kind.title()}) is not installed here") from None
    try:
        if kind == "parquet":
            return list(pq.read_schema(path).names)
        with pa.OSFile(str(path)) as source:
            try:
                return list(pa.ipc.open_stream(source).schema.names)
            except pa.ArrowInvalid:
                return list(pa.ipc.open_file(str(path)).schema.names)
    except (OSError, ValueError, pa.ArrowException) as exc:
        why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise _Unreadable(f"{path} is not a {kind.title()} file cw can read ({why})") from None
