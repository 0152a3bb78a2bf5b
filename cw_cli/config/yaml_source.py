"""Load a config file (YAML, or verifiers' TOML) while remembering the line of every key.

A config is read as untrusted input: its size, nesting, aliases, key types and tags are bounded
(:mod:`cw_cli.config.yaml_loader`, :mod:`cw_cli.config.yaml_checks`), so a hostile file ends
with a :class:`ConfigError` rather than a traceback, a hang or all the memory.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from msgspec import Struct, field

from cw_cli.config.yaml_checks import KeyPath, check_nodes, parse_scalar, short, value_at, yaml11_number, yaml11_numbers
from cw_cli.config.yaml_loader import MAX_ALIASES, MAX_DEPTH, MAX_NODES, TAG, LimitExceeded, compose, construct
from cw_cli.errors import ConfigError

__all__ = [
    "MAX_ALIASES", "MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_NODES", "KeyPath", "YamlSource", "load_config_file",
    "load_yaml_config", "parse_scalar", "yaml11_number",
]

#: Largest config file read. A real one is a few KB, and its mounted copy must fit the run's
#: ConfigMap (1 MiB in all), so a larger file could never launch.
MAX_CONFIG_BYTES = 1024 * 1024


class YamlSource(Struct):
    """A parsed YAML mapping plus where each key came from.

    Attributes:
        path: The file it was read from.
        data: The parsed top-level mapping.
        lines: 1-based line of each key path (e.g. ``("trl", "beta")``).
        yaml11_numbers: The text of each value written as a number only YAML 1.1 reads as one
            (``0x10``, ``010``, ``0b1``, ``1:30``, ``1_000``), by key path: cw refuses them in its
            own fields, and passes the framework's keys on as PyYAML reads them.
    """

    path: Path
    data: dict[str, Any]
    lines: dict[KeyPath, int] = field(default_factory=dict)
    yaml11_numbers: dict[KeyPath, str] = field(default_factory=dict)

    def where(self, key_path: KeyPath) -> str:
        """Return ``file:line`` for a key path, falling back to its closest known parent."""
        probe = tuple(key_path)
        while probe:
            if probe in self.lines:
                return f"{self.path}:{self.lines[probe]}"
            probe = probe[:-1]
        return str(self.path)


def _read(path: Path) -> str:
    """The text of a config file, refusing what is not a small regular file before opening it."""
    try:
        info = os.stat(path)  # stat, not open: opening a FIFO would block until a writer comes
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"], hint="check the path of the config file") from None
    except (OSError, ValueError) as exc:
        raise ConfigError([f"{path}: cannot read it ({exc})"]) from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            [f"{path}: cannot read it: it is a folder, not a config file"], hint="give the path of the YAML file in it"
        )
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(
            [f"{path}: cannot read it: not a regular file (a device, FIFO or socket)"],
            hint="give the path of a YAML or TOML file",
        )
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            [
                f"{path}: is {info.st_size / 2**20:.1f} MiB; a config may be at most {MAX_CONFIG_BYTES // 2**20} MiB "
                "(its mounted copy must fit the run's 1 MiB ConfigMap)"
            ],
            hint="is this the right file? Data belongs on a volume (`volumes:`), not in the config",
        )
    try:
        with open(path, "rb") as handle:
            content = handle.read(MAX_CONFIG_BYTES + 1)  # bounded even if the file grows meanwhile
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read it ({exc})"]) from None
    if len(content) > MAX_CONFIG_BYTES:
        raise ConfigError([f"{path}: is larger than {MAX_CONFIG_BYTES // 2**20} MiB, the most a config may be"])
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: cannot read it ({exc})"], hint="save the config as UTF-8 text") from None


def load_yaml_config(path: Path) -> YamlSource:
    """Read a config file: one YAML mapping.

    Args:
        path: The user's config file.

    Returns:
        The parsed mapping with the line of each key.

    Raises:
        ConfigError: The file is missing, not a regular file, too large, unreadable, not YAML,
            not a mapping, over a limit (depth, aliases, expanded size), or holds a duplicate or
            non-string key or a non-plain value.
    """
    text = _read(path)
    try:
        loader, nodes = compose(text)
        if len(nodes) != 1 or (isinstance(nodes[0], yaml.ScalarNode) and nodes[0].tag == TAG + "null"):
            raise ConfigError([f"{path}: expected exactly one YAML document holding a mapping"])
        if not isinstance(nodes[0], yaml.MappingNode) or nodes[0].tag != TAG + "map":
            kind = {TAG + "seq": "list"}.get(nodes[0].tag, nodes[0].tag.replace(TAG, ""))
            raise ConfigError([f"{path}:1: the config must be a mapping of keys to values, not a {kind}"])
        lines, problems = check_nodes(loader, nodes[0])
        if problems:
            raise ConfigError(
                [f"{path}:{line}: {problem}" for line, problem in problems], hint="fix the YAML at those lines"
            )
        numbers = yaml11_numbers(loader, nodes[0])  # before construction flattens the merge keys
        data = construct(loader, nodes[0])
    except ValueError as exc:
        raise ConfigError([f"{path}: a value cannot be read ({short(str(exc), 80)})"]) from None
    except LimitExceeded as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(
            [f"{where}: refused: {exc.problem}"],
            hint=f"a config is at most {MAX_DEPTH} levels deep, with at most {MAX_ALIASES} aliases and "
            f"{MAX_NODES} values once they are expanded",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}: not valid YAML: {problem}"], hint="fix the YAML syntax at that line") from None
    # Only where the value is still the one written: a later key may override a merged one.
    odd = {key: text for key, (text, value) in numbers.items() if value_at(data, key) == value}
    return YamlSource(path=path, data=data, lines=lines, yaml11_numbers=odd)


def _check_toml_keys(path: Path, text: str) -> None:
    """Refuse a dotted key (``a.b.c...``) deeper than :data:`MAX_DEPTH` before tomllib sees it.

    tomllib takes quadratic time in a key's parts (5 s for 20,000). Approximate on purpose: the
    dots before a line's first ``=``, or in a ``[table]`` header; a real key has a few.
    """
    for number, line in enumerate(text.splitlines(), start=1):
        head = line.split("=", 1)[0] if "=" in line else line if line.lstrip().startswith("[") else ""
        if head.count(".") > MAX_DEPTH:
            raise ConfigError(
                [f"{path}:{number}: refused: a key nested more than {MAX_DEPTH} levels deep"],
                hint="a config is small and shallow; check the file",
            )


def _check_toml_shape(path: Path, data: dict[str, Any]) -> None:
    """TOML has no aliases, but dotted keys (``a.b.c...``) can nest as deep as the file is long."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 0
    while stack:  # iterative: the point is not to recurse
        value, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH or count > MAX_NODES:
            what = f"nested more than {MAX_DEPTH} levels deep" if depth > MAX_DEPTH else f"more than {MAX_NODES} values"
            raise ConfigError([f"{path}: refused: {what}"], hint="a config is small and shallow; check the file")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children)


#: Compiled on first use (by ``re``'s own cache): only a TOML config is read by lines.
_TOML_KEY = r"""^\s*(\[\[?\s*(?P<table>[^\]]+?)\s*\]\]?|(?P<key>[A-Za-z0-9_.-]+|"[^"]*")\s*=)"""


def _toml_lines(text: str) -> dict[KeyPath, int]:
    """Line of each table and key of a TOML file (approximate: enough to point at a field)."""
    lines: dict[KeyPath, int] = {}
    table: KeyPath = ()
    for number, line in enumerate(text.splitlines(), start=1):
        match = re.match(_TOML_KEY, line)
        if not match:
            continue
        if match.group("table"):
            table = tuple(part.strip().strip('"') for part in match.group("table").split("."))
            lines.setdefault(table, number)
        else:
            key = tuple(part.strip('"') for part in match.group("key").split("."))
            lines.setdefault((*table, *key), number)
    return lines


def load_config_file(path: Path) -> YamlSource:
    """Read a config file: YAML, or TOML when it ends in ``.toml`` (verifiers' own vf-rl files).

    Raises:
        ConfigError: The file is missing, unreadable, not valid YAML/TOML or over a limit (see
            :func:`load_yaml_config`).
    """
    if path.suffix.lower() != ".toml":
        return load_yaml_config(path)
    text = _read(path)
    return YamlSource(path=path, data=parse_toml(path, text), lines=_toml_lines(text))


def parse_toml(path: Path, text: str) -> dict[str, Any]:
    """TOML text (a config, or one read back from a run's ConfigMap) as data, within cw's limits.

    Raises:
        ConfigError: Not valid TOML, or nested deeper or larger than a config is (naming ``path``).
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    _check_toml_keys(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"], hint="fix the TOML syntax at that line") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ConfigError(
            [f"{path}: refused: nested too deeply"], hint="a config is small and shallow; check the file"
        ) from None
    _check_toml_shape(path, data)
    return data
