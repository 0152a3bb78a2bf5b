"""Load a YAML config while remembering the line of every key, for error messages."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cw_cli.errors import ConfigError

KeyPath = tuple[str | int, ...]


class ConfigLoader(yaml.SafeLoader):
    """A safe loader that reads ``1e-5`` as a float (YAML 1.2), as ML configs expect."""


# PyYAML follows YAML 1.1, where a float needs a dot: "1e-5" would stay a string.
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def parse_scalar(text: str) -> object:
    """Type a command-line value the way the config file would (``1e-5`` -> float, ``true`` -> bool).

    A value YAML reads as a string is kept exactly as typed (newlines, ``#`` and all), unless
    it is quoted: ``'0123'`` is how a number-like value is forced to be a string.
    """
    try:
        value = yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - ConfigLoader is a SafeLoader
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and not text.strip().startswith(("'", '"')):
        return text
    return value


@dataclass
class YamlSource:
    """A parsed YAML mapping plus where each key came from.

    Attributes:
        path: The file it was read from.
        data: The parsed top-level mapping.
        lines: 1-based line of each key path (e.g. ``("trl", "beta")``).
    """

    path: Path
    data: dict[str, Any]
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def where(self, key_path: KeyPath) -> str:
        """Return ``file:line`` for a key path, falling back to its closest known parent."""
        probe = tuple(key_path)
        while probe:
            if probe in self.lines:
                return f"{self.path}:{self.lines[probe]}"
            probe = probe[:-1]
        return str(self.path)


def _record_lines(node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            path = (*prefix, key)
            lines[path] = key_node.start_mark.line + 1
            _record_lines(value_node, path, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            path = (*prefix, index)
            lines[path] = item.start_mark.line + 1
            _record_lines(item, path, lines)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"], hint="check the path of the config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{path}: cannot read it ({exc})"]) from None


def load_yaml_config(path: Path) -> YamlSource:
    """Read a config file: one YAML mapping.

    Args:
        path: The user's config file.

    Returns:
        The parsed mapping with the line of each key.

    Raises:
        ConfigError: The file is missing, unreadable, not YAML, or not a mapping.
    """
    text = _read(path)
    try:
        documents = list(yaml.load_all(text, Loader=ConfigLoader))  # noqa: S506 - a SafeLoader
        nodes = list(yaml.compose_all(text, Loader=ConfigLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}: not valid YAML: {problem}"], hint="fix the YAML syntax at that line") from None
    if len(documents) != 1 or documents[0] is None:
        raise ConfigError([f"{path}: expected exactly one YAML document holding a mapping"])
    data = documents[0]
    if not isinstance(data, dict):
        raise ConfigError([f"{path}:1: the config must be a mapping of keys to values, not a {type(data).__name__}"])
    lines: dict[KeyPath, int] = {}
    _record_lines(nodes[0], (), lines)
    return YamlSource(path=path, data=data, lines=lines)


_TOML_KEY = re.compile(r"""^\s*(\[\[?\s*(?P<table>[^\]]+?)\s*\]\]?|(?P<key>[A-Za-z0-9_.-]+|"[^"]*")\s*=)""")


def _toml_lines(text: str) -> dict[KeyPath, int]:
    """Line of each table and key of a TOML file (approximate: enough to point at a field)."""
    lines: dict[KeyPath, int] = {}
    table: KeyPath = ()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _TOML_KEY.match(line)
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
        ConfigError: The file is missing, unreadable or not valid YAML/TOML.
    """
    if path.suffix.lower() != ".toml":
        return load_yaml_config(path)
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    text = _read(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"], hint="fix the TOML syntax at that line") from None
    return YamlSource(path=path, data=data, lines=_toml_lines(text))
