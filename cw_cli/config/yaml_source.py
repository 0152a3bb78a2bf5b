"""Load a YAML config while remembering the line of every key, for error messages.

A config is read as untrusted input: its size, nesting, aliases, key types and tags are bounded
here, so a hostile file ends with a :class:`ConfigError` rather than a traceback, a hang or all
the memory.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from msgspec import Struct, field
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from cw_cli.errors import ConfigError

KeyPath = tuple[str | int, ...]

#: Largest config file read. A real one is a few KB, and its mounted copy must fit the run's
#: ConfigMap (1 MiB in all), so a larger file could never launch.
MAX_CONFIG_BYTES = 1024 * 1024
#: Deepest nesting of mappings and lists (real configs: under 10; Python's recursion limit: ~1000).
MAX_DEPTH = 64
#: Alias uses (``*name``) in one document; a real config has a handful.
MAX_ALIASES = 1000
#: Values in a document once every alias is expanded: the "billion laughs" guard.
MAX_NODES = 100_000

#: libyaml's own refusal of a document deeper than its limit (1000 levels, from libyaml 0.2.6 on).
_LIBYAML_DEPTH_PROBLEM = "exceeded maximum nesting depth"

_TAG = "tag:yaml.org,2002:"
#: Value types a config may hold: what JSON, TOML and the frameworks' own YAML readers share.
_PLAIN_TAGS = frozenset(_TAG + name for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp"))
#: Mapping keys a config may use: strings, merge keys (``<<``), and integers, which Axolotl's
#: ``max_memory: {0: 20GiB}`` (a device index) needs. A ``yes:``, ``null:`` or ``1.5:`` key is a mistake.
_KEY_TAGS = frozenset(_TAG + name for name in ("str", "int", "merge"))
#: Scalars whose construction can fail on values the resolver accepted (``2024-13-45``, 5000 digits).
_CHECKED_SCALARS = frozenset(_TAG + name for name in ("int", "float", "timestamp"))
#: Numbers as YAML 1.2, JSON and TOML write them. PyYAML (YAML 1.1) also reads ``0x10``, ``010``
#: (octal: 8), ``0b1``, ``1:30`` (base 60: 90) and ``1_000`` as numbers, which YAML 1.2 readers
#: take as strings or other numbers. Compiled on first use (by ``re``'s own cache).
_DECIMAL_INT = r"[-+]?(?:0|[1-9][0-9]*)"
_DECIMAL_FLOAT = r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"


def _mark(event: yaml.Event) -> yaml.error.Mark:
    """Where an event starts (libyaml's C loader gives its own Mark type, with the same fields)."""
    return event.start_mark  # type: ignore[return-value]


class LimitExceeded(yaml.MarkedYAMLError):
    """A document over one of the limits above (deep, aliased, large or self-referencing)."""


def _safe_base() -> type:
    """SafeLoader, with libyaml's event parser (~5x faster) under Python's composer when built with it.

    Composing stays in Python, in :class:`ConfigLoader`, where the limits are enforced.
    """
    try:
        from yaml._yaml import CParser
    except ImportError:  # PyYAML built without libyaml
        return yaml.SafeLoader

    class LibyamlSafeLoader(Composer, CParser, SafeConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return LibyamlSafeLoader


class ConfigLoader(_safe_base()):  # type: ignore[misc]
    """A safe loader that reads ``1e-5`` as a float (YAML 1.2), as ML configs expect.

    It also bounds nesting depth, alias uses and the expanded size of what it composes, while
    composing: a billion-laughs file is refused after a few dozen nodes, not after it has filled
    the memory.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        #: id(node) -> its size once aliases are expanded; only for fully composed nodes.
        self._sizes: dict[int, int] = {}
        #: Values composed so far, each alias counted at its expanded size: refuses a long flat list early.
        self._total = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise LimitExceeded(problem=f"more than {MAX_ALIASES} aliases (*name)", problem_mark=_mark(event))
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:  # `&a [*a]`: a value that contains itself
                raise LimitExceeded(
                    problem=f"alias *{event.anchor} is used inside its own anchor", problem_mark=_mark(event)
                )
            self._count(self._sizes[id(node)], _mark(event))
            return node
        self._count(1, _mark(event))
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise LimitExceeded(problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=_mark(event))
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        # Children (aliases included) are composed already: their sizes are known, so this is linear.
        if isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._sizes[id(item)] for item in node.value)
        else:
            size = 1
        self._sizes[id(node)] = size
        return node

    def _count(self, values: int, mark: yaml.Mark) -> None:
        self._total += values
        if self._total > MAX_NODES:
            raise LimitExceeded(
                problem=f"more than {MAX_NODES} values (an alias counts as all it stands for)", problem_mark=mark
            )


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


def _compose(text: str) -> tuple[ConfigLoader, list[yaml.Node]]:
    """Every document of ``text`` as nodes, within the limits.

    Raises:
        yaml.YAMLError: Not YAML (or :class:`LimitExceeded`).
    """
    loader = ConfigLoader(text)
    nodes = []
    try:
        while loader.check_node():
            nodes.append(loader.get_node())
    except RecursionError:  # defence in depth: MAX_DEPTH keeps the composer far from the limit
        raise LimitExceeded(problem="nested too deeply") from None
    except yaml.MarkedYAMLError as exc:
        # libyaml >= 0.2.6 (PyYAML 6.0.4's wheels) stops at 1000 levels while scanning ahead in a
        # flow collection (`[[[[...`), before the composer reaches MAX_DEPTH: the same refusal.
        if exc.problem != _LIBYAML_DEPTH_PROBLEM:
            raise
        raise LimitExceeded(problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=exc.problem_mark) from None
    return loader, nodes


def _construct(loader: ConfigLoader, node: yaml.Node) -> Any:
    """Python data of a composed node.

    Raises:
        yaml.YAMLError: YAML's own refusal (an unhashable key), or :class:`LimitExceeded`.
        ValueError: A scalar that cannot be built (``2024-13-45``; the checks catch these first).
    """
    try:
        return loader.construct_document(node)
    except RecursionError:  # chains of merge keys (`<<: *a`) recurse once per link
        raise LimitExceeded(problem="too many nested merge keys (<<)") from None
    except OverflowError as exc:
        raise ValueError(str(exc)) from None


def _key_name(node: yaml.Node) -> str:
    return node.value if isinstance(node, yaml.ScalarNode) else f"<{getattr(node, 'id', 'node')}>"


def _at(path: KeyPath) -> str:
    """``"`a.b.0`: "`` for a key path, nothing for the top (a ``--set`` value itself)."""
    return f"`{'.'.join(str(part) for part in path)}`: " if path else ""


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _check_nodes(loader: ConfigLoader, root: yaml.Node) -> tuple[dict[KeyPath, int], list[tuple[int, str]]]:
    """Line of every key path, and (line, problem) for what a config may not hold.

    Refused: a key that is neither a string nor an integer (``yes:``, ``null:``, ``1.5:``), a key
    given twice in one mapping, a tag outside plain JSON/TOML-like values (``!!set``, ``!!binary``,
    ``!!omap``) and a scalar that cannot be built (``2024-13-45``). An aliased node is walked once only (the
    composer shares it), so a billion-laughs file costs its size, not its expansion.
    """
    lines: dict[KeyPath, int] = {}
    problems: list[tuple[int, str]] = []
    visited: set[int] = set()

    def walk(node: yaml.Node, path: KeyPath) -> None:
        if id(node) in visited:
            return
        visited.add(id(node))
        line = node.start_mark.line + 1
        if node.tag not in _PLAIN_TAGS:
            tag = _short(node.tag.replace(_TAG, "!!"))
            if node.tag in loader.yaml_constructors:  # !!set, !!binary, !!omap, !!pairs: YAML, not config values
                why = f"a {tag} value cannot be passed on to the framework's config; write a plain value, list or map"
            else:  # !!python/object and other tags a safe loader does not build
                why = f"not valid YAML: unknown tag {tag}; remove it"
            problems.append((line, _at(path) + why))
            return
        if isinstance(node, yaml.ScalarNode):
            if node.tag in _CHECKED_SCALARS:
                try:
                    loader.yaml_constructors[node.tag](loader, node)
                except (ValueError, OverflowError, yaml.YAMLError) as exc:
                    why = f"{_short(node.value)!r} cannot be read ({_short(str(exc), 80)}); quote it to keep a string"
                    problems.append((line, _at(path) + why))
            return
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                key = (*path, index)
                lines[key] = item.start_mark.line + 1
                walk(item, key)
            return
        seen: dict[tuple[str, object], int] = {}  # (tag, key) -> line
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            name = _key_name(key_node)
            key_path = (*path, name)
            is_merge = key_node.tag == _TAG + "merge"
            if not (isinstance(key_node, yaml.ScalarNode) and key_node.tag in _KEY_TAGS):
                if isinstance(key_node, yaml.ScalarNode):
                    kind = key_node.tag.replace(_TAG, "")
                    shown = _short(name)
                    why = f"the key {shown!r} is read as a {kind}, not a string; quote it ('{shown}': ...)"
                else:
                    why = f"a key must be a string, not a {key_node.id}"
                problems.append((key_line, _at(key_path) + why))
                continue
            identity: tuple[str, object] = (key_node.tag, name)
            if key_node.tag == _TAG + "int":  # `0x10:` and `16:` are the same key once built
                try:
                    identity = (key_node.tag, loader.construct_yaml_int(key_node))
                except (ValueError, yaml.YAMLError):
                    problems.append((key_line, f"{_at(key_path)}the key {_short(name)!r} cannot be read; quote it"))
                    continue
            if identity in seen:
                first = seen[identity]
                why = f"the key is given twice, at lines {first} and {key_line} (YAML would keep the last); keep one"
                problems.append((key_line, _at(key_path) + why))
                continue
            seen[identity] = key_line
            if not is_merge:
                lines[key_path] = key_line
            walk(value_node, path if is_merge else key_path)

    walk(root, ())
    return lines, problems


def _yaml11_only(node: yaml.ScalarNode) -> bool:
    """Whether a scalar is a number written in a form only YAML 1.1 reads as one (``0x10``, ``1_000``)."""
    if node.tag == _TAG + "int":
        return not re.fullmatch(_DECIMAL_INT, node.value)
    if node.tag == _TAG + "float":
        return not re.fullmatch(_DECIMAL_FLOAT, node.value)
    return False


def _yaml11_numbers(loader: ConfigLoader, root: yaml.Node) -> dict[KeyPath, tuple[str, object]]:
    """Key path -> (text, value) of each number written in a YAML-1.1-only form, aliases and merges expanded.

    Walks the composed nodes, before construction flattens the merge keys. Expanding aliases is
    bounded: the composer refused a document over :data:`MAX_NODES` values, aliases counted at
    their expanded size.
    """
    found: dict[KeyPath, tuple[str, object]] = {}
    values: dict[int, object] = {}  # id(node) -> its value: an aliased number is built once
    stack: list[tuple[yaml.Node, KeyPath]] = [(root, ())]
    while stack:  # iterative: the depth is bounded, but a merge chain need not be
        node, path = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if _yaml11_only(node):
                if id(node) not in values:
                    values[id(node)] = loader.yaml_constructors[node.tag](loader, node)
                found[path] = (node.value, values[id(node)])
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, index)) for index, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.tag != _TAG + "merge":
                    stack.append((value_node, (*path, _key_name(key_node))))
                    continue
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                stack.extend((item, path) for item in merged)
    return found


def _value_at(data: object, path: KeyPath) -> object:
    for part in path:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def yaml11_number(text: str) -> bool:
    """Whether a command-line value is a number only YAML 1.1 reads as one (``0x10``, ``010``, ``1:30``, ``1_000``).

    A quoted value is a string, never such a number.
    """
    try:
        _, nodes = _compose(text)
    except yaml.YAMLError:
        return False
    node = nodes[0] if len(nodes) == 1 else None
    return isinstance(node, yaml.ScalarNode) and _yaml11_only(node)  # a quoted value resolves as a string


def parse_scalar(text: str) -> object:
    """Type a command-line value the way the config file would (``1e-5`` -> float, ``true`` -> bool).

    A value YAML reads as a string is kept exactly as typed (newlines, ``#`` and all), unless
    it is quoted: ``'0123'`` is how a number-like value is forced to be a string.

    Raises:
        ValueError: The value is YAML a config may not hold (a ``!!set``, a non-string key, too
            deep or too many aliases); the message says why.
    """
    try:
        loader, nodes = _compose(text)
    except LimitExceeded as exc:
        raise ValueError(exc.problem) from None
    except yaml.YAMLError:
        return text
    if not nodes:
        return None  # empty, or only a comment: what yaml.load gives
    if len(nodes) != 1:
        return text
    try:
        value = _construct(loader, nodes[0])
    except LimitExceeded as exc:
        raise ValueError(exc.problem) from None
    except (yaml.YAMLError, ValueError):
        return text  # what YAML cannot build stays the string typed
    _, problems = _check_nodes(loader, nodes[0])
    if problems:  # what YAML builds but a config may not hold (a `!!set`, a `yes:` key)
        raise ValueError(problems[0][1])
    if isinstance(value, str) and not text.strip().startswith(("'", '"')):
        return text
    return value


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
        loader, nodes = _compose(text)
        if len(nodes) != 1 or (isinstance(nodes[0], yaml.ScalarNode) and nodes[0].tag == _TAG + "null"):
            raise ConfigError([f"{path}: expected exactly one YAML document holding a mapping"])
        if not isinstance(nodes[0], yaml.MappingNode) or nodes[0].tag != _TAG + "map":
            kind = {_TAG + "seq": "list"}.get(nodes[0].tag, nodes[0].tag.replace(_TAG, ""))
            raise ConfigError([f"{path}:1: the config must be a mapping of keys to values, not a {kind}"])
        lines, problems = _check_nodes(loader, nodes[0])
        if problems:
            raise ConfigError(
                [f"{path}:{line}: {problem}" for line, problem in problems], hint="fix the YAML at those lines"
            )
        numbers = _yaml11_numbers(loader, nodes[0])  # before construction flattens the merge keys
        data = _construct(loader, nodes[0])
    except ValueError as exc:
        raise ConfigError([f"{path}: a value cannot be read ({_short(str(exc), 80)})"]) from None
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
    odd = {key: text for key, (text, value) in numbers.items() if _value_at(data, key) == value}
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
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    text = _read(path)
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
    return YamlSource(path=path, data=data, lines=_toml_lines(text))
