"""What a config may hold, checked on the composed YAML nodes before anything is built.

Refused with the line: keys that are not strings or integers, a key given twice, tags outside
plain JSON/TOML-like values and scalars that cannot be built. Also found here: numbers written in
a form only YAML 1.1 reads as one (``0x10``, ``1_000``), which cw refuses in its own fields, and
the typing of a ``--set`` value the way the file would type it (:func:`parse_scalar`).
"""

from __future__ import annotations

import re

import yaml

from cw_cli.config.yaml_loader import TAG, ConfigLoader, LimitExceeded, compose, construct

KeyPath = tuple[str | int, ...]

#: Value types a config may hold: what JSON, TOML and the frameworks' own YAML readers share.
_PLAIN_TAGS = frozenset(TAG + name for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp"))
#: Mapping keys a config may use: strings, merge keys (``<<``), and integers, which Axolotl's
#: ``max_memory: {0: 20GiB}`` (a device index) needs. A ``yes:``, ``null:`` or ``1.5:`` key is a mistake.
_KEY_TAGS = frozenset(TAG + name for name in ("str", "int", "merge"))
#: Scalars whose construction can fail on values the resolver accepted (``2024-13-45``, 5000 digits).
_CHECKED_SCALARS = frozenset(TAG + name for name in ("int", "float", "timestamp"))
#: Numbers as YAML 1.2, JSON and TOML write them. PyYAML (YAML 1.1) also reads ``0x10``, ``010``
#: (octal: 8), ``0b1``, ``1:30`` (base 60: 90) and ``1_000`` as numbers, which YAML 1.2 readers
#: take as strings or other numbers. Compiled on first use (by ``re``'s own cache).
_DECIMAL_INT = r"[-+]?(?:0|[1-9][0-9]*)"
_DECIMAL_FLOAT = r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"


def _key_name(node: yaml.Node) -> str:
    return node.value if isinstance(node, yaml.ScalarNode) else f"<{getattr(node, 'id', 'node')}>"


def _at(path: KeyPath) -> str:
    """``"`a.b.0`: "`` for a key path, nothing for the top (a ``--set`` value itself)."""
    return f"`{'.'.join(str(part) for part in path)}`: " if path else ""


def short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def check_nodes(loader: ConfigLoader, root: yaml.Node) -> tuple[dict[KeyPath, int], list[tuple[int, str]]]:
    """Line of every key path, and (line, problem) for what a config may not hold.

    Refused: a key that is neither a string nor an integer (``yes:``, ``null:``, ``1.5:``), a key
    given twice in one mapping, a tag outside plain JSON/TOML-like values (``!!set``, ``!!binary``,
    ``!!omap``) and a scalar that cannot be built (``2024-13-45``). An aliased node is walked once only (the
    composer shares it), so a billion-laughs file costs its size, not its expansion.
    """
    check = _NodeCheck(loader)
    check.walk(root, ())
    return check.lines, check.problems


class _KeyRefused(Exception):
    """A mapping key a config may not use; the message says why."""


class _NodeCheck:
    """One walk over a composed document, collecting key lines and problems."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader
        self.lines: dict[KeyPath, int] = {}
        self.problems: list[tuple[int, str]] = []
        self._visited: set[int] = set()

    def walk(self, node: yaml.Node, path: KeyPath) -> None:
        """Check ``node`` (at ``path``) and what it holds."""
        if id(node) in self._visited:
            return
        self._visited.add(id(node))
        line = node.start_mark.line + 1
        if node.tag not in _PLAIN_TAGS:
            self.problems.append((line, _at(path) + self._tag_problem(node)))
        elif isinstance(node, yaml.ScalarNode):
            why = self._scalar_problem(node)
            if why:
                self.problems.append((line, _at(path) + why))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                key = (*path, index)
                self.lines[key] = item.start_mark.line + 1
                self.walk(item, key)
        else:
            self._mapping(node, path)

    def _mapping(self, node: yaml.Node, path: KeyPath) -> None:
        seen: dict[tuple[str, object], int] = {}  # (tag, key) -> line
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            key_path = (*path, _key_name(key_node))
            try:
                identity = self._key_identity(key_node)
                if identity in seen:
                    raise _KeyRefused(f"the key is given twice, at lines {seen[identity]} and {key_line} "
                                      "(YAML would keep the last); keep one")
            except _KeyRefused as refused:
                self.problems.append((key_line, _at(key_path) + str(refused)))
                continue
            seen[identity] = key_line
            is_merge = key_node.tag == TAG + "merge"
            if not is_merge:
                self.lines[key_path] = key_line
            self.walk(value_node, path if is_merge else key_path)

    def _key_identity(self, key_node: yaml.Node) -> tuple[str, object]:
        """The key as YAML builds it: ``0x10:`` and ``16:`` are the same key.

        Raises:
            _KeyRefused: Not a string or integer key, or an integer that cannot be built.
        """
        name = _key_name(key_node)
        if not (isinstance(key_node, yaml.ScalarNode) and key_node.tag in _KEY_TAGS):
            if isinstance(key_node, yaml.ScalarNode):
                kind = key_node.tag.replace(TAG, "")
                shown = short(name)
                raise _KeyRefused(f"the key {shown!r} is read as a {kind}, not a string; quote it ('{shown}': ...)")
            raise _KeyRefused(f"a key must be a string, not a {getattr(key_node, 'id', 'node')}")
        if key_node.tag != TAG + "int":
            return (key_node.tag, name)
        try:
            return (key_node.tag, self.loader.construct_yaml_int(key_node))
        except (ValueError, yaml.YAMLError):
            raise _KeyRefused(f"the key {short(name)!r} cannot be read; quote it") from None

    def _tag_problem(self, node: yaml.Node) -> str:
        tag = short(node.tag.replace(TAG, "!!"))
        if node.tag in self.loader.yaml_constructors:  # !!set, !!binary, !!omap, !!pairs: YAML, not config values
            return f"a {tag} value cannot be passed on to the framework's config; write a plain value, list or map"
        return f"not valid YAML: unknown tag {tag}; remove it"  # !!python/object and other tags a safe loader does not build

    def _scalar_problem(self, node: yaml.ScalarNode) -> str | None:
        if node.tag not in _CHECKED_SCALARS:
            return None
        try:
            self.loader.yaml_constructors[node.tag](self.loader, node)
        except (ValueError, OverflowError, yaml.YAMLError) as exc:
            return f"{short(node.value)!r} cannot be read ({short(str(exc), 80)}); quote it to keep a string"
        return None


def yaml11_only(node: yaml.ScalarNode) -> bool:
    """Whether a scalar is a number written in a form only YAML 1.1 reads as one (``0x10``, ``1_000``)."""
    if node.tag == TAG + "int":
        return not re.fullmatch(_DECIMAL_INT, node.value)
    if node.tag == TAG + "float":
        return not re.fullmatch(_DECIMAL_FLOAT, node.value)
    return False


def yaml11_numbers(loader: ConfigLoader, root: yaml.Node) -> dict[KeyPath, tuple[str, object]]:
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
            if yaml11_only(node):
                if id(node) not in values:
                    values[id(node)] = loader.yaml_constructors[node.tag](loader, node)
                found[path] = (node.value, values[id(node)])
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, index)) for index, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.tag != TAG + "merge":
                    stack.append((value_node, (*path, _key_name(key_node))))
                    continue
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                stack.extend((item, path) for item in merged)
    return found


def value_at(data: object, path: KeyPath) -> object:
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
        _, nodes = compose(text)
    except yaml.YAMLError:
        return False
    node = nodes[0] if len(nodes) == 1 else None
    return isinstance(node, yaml.ScalarNode) and yaml11_only(node)  # a quoted value resolves as a string


def parse_scalar(text: str) -> object:
    """Type a command-line value the way the config file would (``1e-5`` -> float, ``true`` -> bool).

    A value YAML reads as a string is kept exactly as typed (newlines, ``#`` and all), unless
    it is quoted: ``'0123'`` is how a number-like value is forced to be a string.

    Raises:
        ValueError: The value is YAML a config may not hold (a ``!!set``, a non-string key, too
            deep or too many aliases); the message says why.
    """
    try:
        loader, nodes = compose(text)
    except LimitExceeded as exc:
        raise ValueError(exc.problem) from None
    except yaml.YAMLError:
        return text
    if not nodes:
        return None  # empty, or only a comment: what yaml.load gives
    if len(nodes) != 1:
        return text
    try:
        value = construct(loader, nodes[0])
    except LimitExceeded as exc:
        raise ValueError(exc.problem) from None
    except (yaml.YAMLError, ValueError):
        return text  # what YAML cannot build stays the string typed
    _, problems = check_nodes(loader, nodes[0])
    if problems:  # what YAML builds but a config may not hold (a `!!set`, a `yes:` key)
        raise ValueError(problems[0][1])
    if isinstance(value, str) and not text.strip().startswith(("'", '"')):
        return text
    return value
