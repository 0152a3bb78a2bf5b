"""Fuzzing what the evaluation pod reads back from verifiers' vf-eval: its saved metadata.json (any
JSON value, as a broken or other release of vf-eval may write) gives finite scores named
`<env>/...` or a ValueError saying why, never another exception; its results.jsonl (any bytes)
gives counts of failed rollouts, never an exception; and any environment id given in `eval:` is
taken or refused naming `eval.environments`."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cw_cli" / "runtime"))
import cw_vf_eval  # noqa: E402

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
numbers = st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.booleans()
json_values = st.recursive(
    st.none() | numbers | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
metadata = st.fixed_dictionaries(
    {}, optional={"avg_reward": numbers | json_values, "avg_metrics": st.dictionaries(st.text(max_size=12), numbers | json_values, max_size=5) | json_values,
                  "env_id": json_values}  # fmt: skip
) | json_values
environment_ids = st.text(max_size=30) | st.from_regex(r"([a-z0-9]{1,8}/)?[a-z_][a-z0-9_\-]{0,12}", fullmatch=True)


@SETTINGS
@given(environment_ids, metadata)
def test_any_saved_metadata_gives_finite_scores_or_says_why(environment, data):
    try:
        scores = cw_vf_eval.scores_of(environment, data)
    except ValueError as exc:
        assert "metadata.json" in str(exc)
        return
    prefix = cw_vf_eval.score_prefix(environment)
    assert f"{prefix}/reward" in scores
    assert all(name.startswith(f"{prefix}/") and isinstance(v, float) and math.isfinite(v) for name, v in scores.items())
    json.dumps(scores, allow_nan=False)  # scores.json stays strict JSON


@SETTINGS
@given(st.binary(max_size=400) | st.lists(json_values, max_size=5).map(lambda rows: "\n".join(json.dumps(r) for r in rows).encode()))
def test_any_results_file_gives_counts_of_failed_rollouts(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("vf") / "results.jsonl"
    path.write_bytes(content)
    try:
        failed, total, first = cw_vf_eval.rollout_errors(str(path))
    except UnicodeDecodeError:
        raise AssertionError("a results file that is not UTF-8 must not crash the pod") from None
    assert 0 <= failed <= total and isinstance(first, str)


@settings(max_examples=150, deadline=None)
@given(st.lists(environment_ids, min_size=1, max_size=3))
def test_any_environment_ids_are_taken_or_refused_naming_the_field(environments):
    from pydantic import ValidationError

    from cw_cli.config.evaluation import EvalSpec

    metric = f"{cw_vf_eval.score_prefix(environments[0]).strip() or 'x'}/reward"
    try:
        spec = EvalSpec(environments=environments, metric=metric)
    except ValidationError as exc:
        assert all(error["loc"][:1] in (("environments",), ("metric",)) for error in exc.errors())
        return
    assert spec.environments == environments
