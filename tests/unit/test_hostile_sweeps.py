"""A sweep of 10^10 runs is refused from its axes' lengths, before one point is made.

Also: a hostile ``--sweep`` value is a one-line refusal, and a property fuzzes sweep blocks and
flags: each is planned with at most ``MAX_RUNS`` points, or refused with a ConfigError, and no
oversized grid is ever materialised.
"""

from __future__ import annotations

import math

import pytest
import yaml
from click.testing import CliRunner
from unit_helpers import builtin_registry

from cw_cli import sweep
from cw_cli.errors import ConfigError
from cw_cli.sweep import MAX_RUNS, SweepSpec, check_size, combine, from_config, parse_flag

pytest.importorskip("hypothesis")  # the `test` extra; skipped, not failed, without it
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BASE = {"model_name_or_path": "m", "dataset_name": "d", "checkpoint_volume": "ckpt", "gpu": 1}
TEN_TO_THE_TEN = {"grid": {f"k{i}": list(range(10)) for i in range(10)}}


def _count(spec: SweepSpec) -> int:
    """The runs of a sweep, counted here independently of cw's own count."""
    return (math.prod(len(values) for values in spec.grid.values()) if spec.grid else 0) + len(spec.variants)


def _guard(patch: pytest.MonkeyPatch) -> None:
    """Make :meth:`SweepSpec.points` fail for a sweep over the cap: the count must come first."""
    points = SweepSpec.points

    def guarded(self: SweepSpec) -> list:
        if _count(self) > MAX_RUNS:
            raise AssertionError(f"a sweep of {_count(self):,} runs was materialised")
        return points(self)

    patch.setattr(SweepSpec, "points", guarded)


@pytest.fixture
def never_materialised(monkeypatch):
    _guard(monkeypatch)


def test_a_grid_of_ten_billion_runs_is_refused_from_the_cli(tmp_path, never_materialised):
    from cw_cli.cli.app import build_app

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**BASE, "sweep": TEN_TO_THE_TEN}, sort_keys=False))
    result = CliRunner().invoke(build_app(builtin_registry()), ["trl", "sft", str(path), "--dry-run"])
    assert result.exit_code == 2, (result.exception, result.output)
    assert "Traceback" not in result.output
    assert f"{path}:5: `sweep` has 10,000,000,000 runs (grid 10 k0 x 10 k1 x 10 k2 x 10 k3 x 10 k4 x 10 k5 x ...), " \
           f"more than the {MAX_RUNS:,} a sweep may have" in result.stderr, result.stderr  # fmt: skip
    assert "hint: drop values or axes, or split it into several sweeps" in result.stderr


def test_flags_count_with_the_file_and_may_bring_it_under_the_cap(never_materialised):
    spec = from_config({"grid": {"lr": list(range(2000)), "r": [8, 16]}}, "s.yaml:3")
    with pytest.raises(ConfigError, match=r"s\.yaml:3: `sweep` has 4,000 runs \(grid 2000 lr x 2 r\)"):
        check_size(spec, "s")
    assert len(check_size(combine(spec, ["lr=1,2"]), "s")) == 4  # a flag replaces the file's 2000 values
    with pytest.raises(ConfigError, match=r"s\.yaml:3: `sweep` with --sweep has 1,002 runs \(grid 2 lr x 501 r\)"):
        check_size(combine(spec, ["lr=1,2", "r=" + ",".join(map(str, range(501)))]), "s")


def test_variants_count_too(never_materialised):
    spec = SweepSpec(grid={"a": list(range(1000))}, variants=[{"a": -1}], where="x.yaml:2: `sweep`")
    with pytest.raises(ConfigError, match=r"x\.yaml:2: `sweep` has 1,001 runs \(grid 1000 a \+ 1 variants\)"):
        check_size(spec, "s")
    assert len(check_size(SweepSpec(grid={"a": list(range(1000))}), "s")) == MAX_RUNS


@pytest.mark.parametrize(
    ("flag", "message"),
    [("x=" + "[" * 20_000, "nested more than 64 levels deep"), ("x=&a [*a]", "alias *a is used inside its own anchor")],
    ids=["deep", "recursive-alias"],
)
def test_a_hostile_flag_value_is_refused_in_one_line(flag, message):
    with pytest.raises(ConfigError) as caught:
        parse_flag(flag)
    assert caught.value.issues == [f"--sweep x=...: refused: {message}"] and caught.value.hint


# --- property -------------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
anything = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                        max_leaves=8)  # fmt: skip
grids = st.dictionaries(st.text(min_size=1, max_size=4), st.lists(scalars, min_size=1, max_size=40), max_size=9)
variants = st.lists(st.dictionaries(st.text(min_size=1, max_size=4), scalars, min_size=1, max_size=2), max_size=5)
blocks = st.one_of(
    st.fixed_dictionaries({}, optional={"grid": grids, "variants": variants}),
    st.dictionaries(st.sampled_from(["grid", "variants", "axes"]), anything, max_size=2),
    anything,
)
flags = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["lr", "r", "a", ""]), st.lists(st.text(max_size=6), min_size=1, max_size=60))
        .map(lambda kv: f"{kv[0]}={','.join(kv[1])}"),
        st.text(max_size=12),
        st.sampled_from(["x=" + "[" * 100, "x=&a [*a]", "x=" + "9" * 5000, "=1", "x="]),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(blocks, flags)
def test_any_sweep_is_planned_within_the_cap_or_refused(block, flag_values):
    with pytest.MonkeyPatch.context() as patch:
        _guard(patch)
        try:
            spec = combine(from_config(block, "s.yaml:9"), flag_values)
            if spec is None:
                return
            points = check_size(spec, "s")
        except ConfigError as error:
            assert error.message and error.hint
            return
    assert 0 < len(points) == _count(spec) <= MAX_RUNS
    assert sweep.run_names("s", len(points))[-1].startswith("s-")
    # Every run of a sweep differs from the others, as the config it gets (issue 32: `seed=1,1`).
    configs = [yaml.safe_dump(point, sort_keys=True) for point in points]
    assert len(set(configs)) == len(configs)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("seed=,,,", "--sweep 'seed=,,,': value 1, 2, 3, 4 of 4 is empty"),
        ("seed=1,", "--sweep 'seed=1,': value 2 of 2 is empty"),
        ("seed=1,1", "--sweep seed: value 2 (1) repeats value 1: two runs of the sweep would be the same"),
        ("lr=1e-5,2e-5,0.00001", "--sweep lr: value 3 (1e-05) repeats value 1"),
    ],
)
def test_empty_and_repeated_sweep_values_are_refused(flag, message):
    with pytest.raises(ConfigError) as caught:
        parse_flag(flag)
    assert caught.value.issues[0].startswith(message), caught.value.issues
    assert "null" in caught.value.hint or "once" in caught.value.hint


def test_distinct_spellings_of_different_values_are_kept():
    assert parse_flag("x=1,1.0,true,'1',null") == ("x", [1, 1.0, True, "1", None])


def test_a_repeated_grid_value_or_variant_in_a_file_is_refused():
    with pytest.raises(ConfigError, match=r"s.yaml:9: `sweep.grid.seed`: value 2 \(1\) repeats value 1"):
        from_config({"grid": {"seed": [1, 1]}}, "s.yaml:9")
    spec = from_config({"grid": {"seed": [1, 2]}, "variants": [{"seed": 2}]}, "s.yaml:9")
    with pytest.raises(ConfigError, match=r"run 2 \(\{'seed': 2\}\) is the same as run 1"):
        check_size(spec, "s")


def test_four_identical_runs_are_never_launched_from_the_cli(tmp_path):
    from cw_cli.cli.app import build_app

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    result = CliRunner().invoke(build_app(builtin_registry()), ["trl", "sft", str(path), "--sweep", "seed=,,,", "--dry-run"])
    assert result.exit_code == 2 and "is empty" in result.output and "kind: Job" not in result.output
