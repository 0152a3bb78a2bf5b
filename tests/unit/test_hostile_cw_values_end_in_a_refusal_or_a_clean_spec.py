"""Property: any value for one of cw's fields, in the file or by ``--set``, ends in a refusal naming it or a clean spec.

Hypothesis writes hostile scalars (random Unicode with control and bidirectional-formatting
characters, integers up to 2^70, floats, YAML 1.1 forms such as ``0x10`` and ``1:30``, nulls and
booleans) into one cw field of an otherwise valid config, and loads it as ``cw trl grpo`` does.
The load either raises :class:`ConfigError` (exit code 2) with a message naming the field, or
returns a :class:`ClusterSpec` whose strings hold none of the characters that field refuses.
Any other exception fails the test. Derandomized, so CI is stable.
"""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hypothesis")  # the `test` extra; skipped, not failed, without it
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from unit_helpers import load  # noqa: E402

from cw_cli.config.yaml_source import yaml11_number  # noqa: E402
from cw_cli.errors import ConfigError  # noqa: E402

#: cw fields the values go into (key paths), one per example.
PATHS = [
    ("gpu",), ("nodes",), ("ttl_hours",), ("backoff_limit",), ("max_restarts",), ("gpu_type",), ("gpu_memory",),
    ("image",), ("cpu",), ("memory",), ("shm_size",), ("queue",), ("env", "HOSTILE_VAR"), ("node_selector", "pool_key"),
    ("annotations", "note_key"), ("services", "server", "gpu"), ("services", "server", "model"),
    ("services", "server", "port"),
]  # fmt: skip
#: Written as they are (plain YAML scalars): YAML 1.1 forms, YAML's special values, plausible values.
TOKENS = [
    "0x10", "010", "0b1", "1:30", "1_000", "0o10", "1_0.5", "+0x1", "-0b11", "190:20:30", "yes", "no", "on", "off",
    "~", "null", "", ".inf", "-.inf", ".nan", "1e400", "0", "-1", "8", "1.5", "64Gi", "80GB", "2024-01-01", "H100",
]  # fmt: skip
HIDDEN = ["\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9b", "\u061c", "\u200e", "\u200f",
          "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]  # fmt: skip
BIDI = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
#: What a loaded spec may not hold, by where the string is (see cw_cli.config.models).
IN_PROCESS_TEXT = r"[\x00-\x08\x0b\x0c\x0e-\x1f]"
IN_LABEL = rf"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{BIDI}]"
IN_NAME = rf"[\x00-\x1f\x7f-\x9f{BIDI}]"

characters = st.characters(exclude_categories=("Cs",)) | st.sampled_from(HIDDEN)
#: (YAML text of the value, whether it is written plain: only a plain scalar can be a YAML 1.1 number)
hostile = (
    st.sampled_from(TOKENS).map(lambda token: (token, True))
    | st.integers(min_value=-(2**70), max_value=2**70).map(lambda number: (str(number), True))
    | st.floats().map(lambda number: (_float_text(number), True))
    | st.booleans().map(lambda flag: (str(flag).lower(), True))
    | st.text(characters, max_size=16).map(lambda text: (_quoted(text), False))
)
BASE: dict[str, Any] = {
    "checkpoint_volume": "ckpts", "model_name_or_path": "m", "dataset_name": "d", "services": {"server": {"gpu": "1"}},
}  # fmt: skip


def _float_text(number: float) -> str:
    if math.isnan(number):
        return ".nan"
    return (".inf" if number > 0 else "-.inf") if math.isinf(number) else repr(number)


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar of ``text``, every character outside printable ASCII escaped."""
    return '"' + "".join(ch if " " <= ch <= "~" and ch not in '"\\' else f"\\U{ord(ch):08x}" for ch in text) + '"'


def _yaml(tree: dict[str, Any], indent: int = 0) -> str:
    pad = " " * indent
    return "".join(
        f"{pad}{key}:\n{_yaml(value, indent + 2)}" if isinstance(value, dict) else f"{pad}{key}: {value}\n"
        for key, value in tree.items()
    )


def _with(path: tuple[str, ...], text: str) -> dict[str, Any]:
    tree = {key: dict(value) if isinstance(value, dict) else value for key, value in BASE.items()}
    tree["services"] = {"server": dict(BASE["services"]["server"])}
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = text
    return tree


def _strings(value: Any, where: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    """(path, string) of every string in a dumped spec, keys marked with a trailing "[key]"."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, dict):
        found = [((*where, "[key]"), key) for key in value if isinstance(key, str)]
        return found + [item for key, child in value.items() for item in _strings(child, (*where, key))]
    if isinstance(value, list):
        return [item for index, child in enumerate(value) for item in _strings(child, (*where, index))]
    return []


def _refused_characters(where: tuple[Any, ...]) -> str:
    if where[0] in ("env", "annotations") and where[-1] != "[key]" or where[:3] == ("services", "server", "args"):
        return IN_PROCESS_TEXT
    return IN_LABEL if where[0] in ("node_selector", "annotations", "tolerations", "secrets") else IN_NAME


@settings(max_examples=200, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=hostile, by_set=st.booleans())
def test_a_hostile_value_in_a_cw_field_is_refused_naming_it_or_loads_clean(path, value, by_set):
    text, plain = value
    dotted = ".".join(path)
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(_yaml(BASE if by_set else _with(path, text)), encoding="utf-8")
        sets = [f"{dotted}={text}"] if by_set else []
        try:
            loaded = load("trl", "grpo", config, sets)
        except ConfigError as error:
            issues = "\n".join(error.issues)
            assert path[-1] in issues, issues  # the field (or the --set that wrote it) is named
            assert error.exit_code == 2
            event("refused")  # shown by --hypothesis-show-statistics
            return
    event("loaded")
    assert not (yaml11_number(text) if by_set else plain and yaml11_number(text)), f"{dotted}: {text} was taken"
    for where, string in _strings(loaded.cluster.model_dump(exclude_none=True)):
        assert not re.search(_refused_characters(where), string), (where, string)
