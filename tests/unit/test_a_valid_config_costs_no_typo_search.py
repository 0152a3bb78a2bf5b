"""The "did you mean" search runs only for a key nobody knows; a valid TRL config never pays for it.

A key `trl` reads (any training type, or `accelerate launch`) is no misspelt cw field, so it is
not compared with cw's fields: the comparison imported difflib for every key of every config.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from unit_helpers import REPO, builtin_registry, write_config

from cw_cli.config.loader import load_run_config
from cw_cli.config.models import CLUSTER_FIELDS
from cw_cli.errors import ConfigError
from cw_cli.frameworks.trl import every_trl_key
from cw_cli.types import TrainingType

#: Plans a config in a fresh interpreter; prints whether difflib was imported, then the error if any.
PROBE = """
import sys
from pathlib import Path
from cw_cli import api
from cw_cli.errors import ConfigError
try:
    api.plan(api.read_config(Path(sys.argv[1])), "trl", "sft", name="probe")
    outcome = "planned"
except ConfigError as exc:
    outcome = " ".join(exc.issues)
print("difflib" in sys.modules, outcome)
"""


def _probe(config) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, str(config)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_valid_trl_config_is_planned_without_the_typo_search(tmp_path):
    config = write_config(tmp_path, {"model_name_or_path": "m", "dataset_name": "d", "learning_rate": 1e-5, "gpu": 1})
    assert _probe(config) == "False planned"


def test_a_misspelt_cw_field_is_still_found(tmp_path):
    config = write_config(tmp_path, {"model_name_or_path": "m", "dataset_name": "d", "gpus": 8})
    seen = _probe(config)
    assert seen.startswith("True ") and "`gpus`: unknown field; did you mean `gpu`?" in seen


@pytest.mark.parametrize("training_type", list(TrainingType))
def test_no_key_trl_reads_is_taken_for_a_misspelt_cw_field(tmp_path, training_type):
    registry = builtin_registry()
    framework = registry.get("trl").framework
    keys = sorted(every_trl_key() - CLUSTER_FIELDS)  # cw's own fields are claimed or cw's, not typos
    config = write_config(tmp_path, {key: None for key in keys})
    try:
        load_run_config(config, framework, training_type)
    except ConfigError as exc:
        assert not [issue for issue in exc.issues if "unknown field; did you mean" in issue]
