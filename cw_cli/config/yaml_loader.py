"""A YAML loader for untrusted config files: bounded while it composes, YAML 1.2 floats.

:class:`ConfigLoader` refuses a document deeper than :data:`MAX_DEPTH`, with more than
:data:`MAX_ALIASES` aliases or more than :data:`MAX_NODES` values once aliases are expanded,
while composing, so a hostile file costs its size, not its expansion. What a composed document
may hold is checked in :mod:`cw_cli.config.yaml_checks`.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

#: Deepest nesting of mappings and lists (real configs: under 10; Python's recursion limit: ~1000).
MAX_DEPTH = 64
#: Alias uses (``*name``) in one document; a real config has a handful.
MAX_ALIASES = 1000
#: Values in a document once every alias is expanded: the "billion laughs" guard.
MAX_NODES = 100_000

#: libyaml's own refusal of a document deeper than its limit (1000 levels, from libyaml 0.2.6 on).
_LIBYAML_DEPTH_PROBLEM = "exceeded maximum nesting depth"

#: The prefix of YAML's own tags (``!!str`` is ``tag:yaml.org,2002:str``).
TAG = "tag:yaml.org,2002:"


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


def compose(text: str) -> tuple[ConfigLoader, list[yaml.Node]]:
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


def construct(loader: ConfigLoader, node: yaml.Node) -> Any:
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
