"""Property test of the vf-rl TOML path: any TOML a user may write (counts from the whole integer
range, floats, booleans, strings with control characters, nested tables) is either refused with
a ConfigError or planned into a run whose counts are ones a run can have and whose mounted TOML
reads back; never another exception."""

from __future__ import annotations

import shutil
import string
from pathlib import Path

import tomli_w
import tomllib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit_helpers import CONFIGS, obj, plan_for

from cw_cli.errors import ConfigError
from cw_cli.frameworks.verifiers import MAX_COUNT

scalars = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(alphabet=string.printable + "\x00\x1b\u202e\u2066", max_size=12),
)
counts = st.one_of(st.integers(min_value=-(2**80), max_value=2**80), st.integers(min_value=1, max_value=8), scalars)
extra_tables = st.dictionaries(st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=8),
                               st.one_of(scalars, st.dictionaries(st.sampled_from(["a", "b"]), scalars, max_size=2)),
                               max_size=3)  # fmt: skip


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inference=counts, trainer=counts, batch=counts, micro=counts, args=extra_tables, env_args=extra_tables)
def test_any_vf_rl_toml_is_refused_or_planned_with_counts_a_run_can_have(tmp_path_factory, inference, trainer, batch,
                                                                         micro, args, env_args):  # fmt: skip
    folder: Path = tmp_path_factory.mktemp("toml")
    shutil.copy(CONFIGS / "cw_reverse_text.py", folder)
    document = {
        "checkpoint_volume": "ckpts",
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "files": ["cw_reverse_text.py"],
        "env": {"id": "cw-reverse-text", "args": env_args},
        "inference": {"gpus": inference},
        "trainer": {"gpus": trainer, "args": {**args, "batch_size": batch, "micro_batch_size": micro,
                                               "rollouts_per_example": 8}},
    }  # fmt: skip
    path = folder / "config.toml"
    path.write_text(tomli_w.dumps(document))
    try:
        plan = plan_for("verifiers", "grpo", path)
    except ConfigError as refused:
        assert refused.issues and all(issue.strip() for issue in refused.issues)
        return
    mounted = tomllib.loads(obj(plan, "ConfigMap", "golden-run-config")["data"]["config.toml"])
    for value in (mounted["inference"]["gpus"], mounted["trainer"]["gpus"]):
        assert isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 64
    for key in ("batch_size", "micro_batch_size"):
        value = mounted["trainer"]["args"][key]
        assert isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_COUNT
