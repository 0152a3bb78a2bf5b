"""cw writes manifests and the trainer's config with libyaml's dumper (10x faster than PyYAML's
pure-Python one): what it writes must read back as the same data, and with the keys real configs have it is the
same text as the pure-Python dumper's."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

OPTIONS = dict(sort_keys=False, default_flow_style=False, width=1000)
scalars = st.one_of(
    st.text(max_size=20), st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
    st.sampled_from(["yes", "no", "on", "1e5", "0x1f", "- x", "a: b", "#c", "  lead", "x\u0085y", "\u2028", "ü", "\t"]),
)  # fmt: skip


def documents(keys: st.SearchStrategy) -> st.SearchStrategy:
    """Lists of top-level mappings (as manifests and configs are) with these keys; values anything."""
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=20)
    return st.lists(st.dictionaries(keys, values, max_size=5), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(docs=documents(st.text(max_size=8)))
def test_libyaml_output_reads_back_as_the_same_data(docs):
    assert list(yaml.safe_load_all(yaml.dump_all(docs, Dumper=yaml.CSafeDumper, **OPTIONS))) == docs


@settings(max_examples=300, deadline=None)
@given(docs=documents(st.from_regex(r"[A-Za-z_][A-Za-z0-9_./-]{0,12}", fullmatch=True)))
def test_libyaml_writes_the_same_text_as_pure_python(docs):
    # Keys as configs and manifests have them; for odd keys (empty, control characters) the two
    # choose different but equivalent forms (`'': x` vs `? ''`), which the test above covers.
    assert yaml.dump_all(docs, Dumper=yaml.CSafeDumper, **OPTIONS) == yaml.dump_all(docs, Dumper=yaml.SafeDumper, **OPTIONS)
