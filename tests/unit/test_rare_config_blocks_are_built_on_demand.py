"""The `eval:`, `notify:` and `gate:` blocks are validated by their own models, imported and built
only when a config has the block (a plain dry run paid 69 M instructions, 8%, for them): a config
without them loads none of their modules; with them, they are the same models as before, their
errors keep their place and their "did you mean", and `cw schema` still describes them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from unit_helpers import REPO, load, write_config

from cw_cli.errors import ConfigError

BASE = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara", "checkpoint_volume": "none"}
BLOCK_MODULES = ("cw_cli.config.evaluation", "cw_cli.config.gate", "cw_cli.features.notify.config")


def _modules_after_loading(config_path) -> list[str]:
    code = (
        "import sys\n"
        "from unit_helpers import load\n"
        f"load('trl', 'sft', __import__('pathlib').Path({str(config_path)!r}))\n"
        f"print([m for m in {BLOCK_MODULES!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO / "tests" / "unit", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_a_config_without_the_blocks_loads_none_of_their_models(tmp_path):
    assert _modules_after_loading(write_config(tmp_path, BASE)) == []
    with_eval = write_config(tmp_path, {**BASE, "eval": {"tasks": ["hellaswag"], "metric": "hellaswag/acc_norm"}}, "e.yaml")
    assert _modules_after_loading(with_eval) == ["cw_cli.config.evaluation"]


def test_the_blocks_are_their_models_and_null_is_no_block(tmp_path):
    from cw_cli.config.evaluation import EvalSpec
    from cw_cli.config.gate import GateSpec
    from cw_cli.features.notify.config import NotifySpec

    config = load("trl", "sft", write_config(tmp_path, {
        **BASE, "eval": {"tasks": ["hellaswag"], "metric": "hellaswag/acc_norm", "limit": 5},
        "gate": {"metric": "hellaswag/acc_norm", "max_drop": 0.01}, "notify": {"urls": ["json://hooks.example.com/cw"]},
    }))  # fmt: skip
    assert isinstance(config.cluster.eval, EvalSpec) and config.cluster.eval.limit == 5
    assert isinstance(config.cluster.gate, GateSpec) and isinstance(config.cluster.notify, NotifySpec)
    assert load("trl", "sft", write_config(tmp_path, {**BASE, "eval": None}, "n.yaml")).cluster.eval is None


@pytest.mark.parametrize(("block", "said"), [
    ({"eval": {"tasks": [], "metric": "hellaswag/acc_norm"}}, "`eval.tasks`"),
    ({"eval": {"tasks": ["hellaswag"], "metric": "hellaswag/acc_norm", "limt": 3}}, "did you mean `limit`"),
    ({"gate": {"metric": "hellaswag/acc_norm", "max_drop": -1}}, "`gate.max_drop`"),
    ({"notify": {"urls": ["json://h.example.com"], "evnts": ["failed"]}}, "did you mean `events`"),
    ({"eval": "hellaswag"}, "`eval`"),
])  # fmt: skip
def test_errors_in_a_block_name_the_field_inside_it(tmp_path, block, said):
    with pytest.raises(ConfigError) as caught:
        load("trl", "sft", write_config(tmp_path, {**BASE, **block}))
    assert said in "\n".join(caught.value.issues)


def test_cw_schema_describes_the_blocks_fields():
    from cw_cli.config.models import ClusterSpec

    schema = ClusterSpec.model_json_schema()
    for block, field in (("eval", "tasks"), ("gate", "max_drop"), ("notify", "urls")):
        options = schema["properties"][block]["anyOf"]
        assert {"type": "null"} in options
        assert field in next(option for option in options if option.get("type") == "object")["properties"]
