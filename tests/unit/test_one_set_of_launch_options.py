"""A launch's options are written once (cw_cli/config/options.py): `cw FRAMEWORK TYPE` and
`cw estimate` build their flags from one table keyed by its fields, map them into the same
`LaunchOptions`, and the API and the estimate take that structure (or its fields as keywords).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from unit_helpers import builtin_registry

from cw_cli import api
from cw_cli.cli.options import LAUNCH_FLAGS
from cw_cli.config.options import LAUNCH_ONLY_FIELDS, SIZING_FIELDS, EstimateOptions, LaunchOptions

FLAGS = ["--gpu", "2", "--cpu", "8", "--memory", "32Gi", "--image", "img:1", "--nodes", "1", "--name", "opt-run",
         "--pull", "--set", "learning_rate=1e-5", "--set", "seed=3", "-n", "team-a"]  # fmt: skip
EXPECTED = LaunchOptions(gpu=2, cpu="8", memory="32Gi", image="img:1", nodes=1, name="opt-run", pull=True,
                         set=["learning_rate=1e-5", "seed=3"], namespace="team-a")  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model_name_or_path": "m", "dataset_name": "d", "checkpoint_volume": "none"}))
    return path


def _invoke(*args: str):
    from cw_cli.cli.app import build_app

    return CliRunner().invoke(build_app(builtin_registry()), list(args))


def test_every_launch_option_has_one_flag_and_both_commands_are_built_from_them():
    from cw_cli.cli.estimate import estimate_command
    from cw_cli.cli.run import make_run_command

    fields = set(LaunchOptions.__struct_fields__)
    assert set(LAUNCH_FLAGS) == fields == set(SIZING_FIELDS) | set(LAUNCH_ONLY_FIELDS)
    launch = {p.name for p in make_run_command(builtin_registry(), "trl", "sft", "").params}
    estimate = {p.name for p in estimate_command.params}
    assert fields <= launch and set(SIZING_FIELDS) <= estimate and not (set(LAUNCH_ONLY_FIELDS) & estimate)


def test_the_launch_command_maps_its_flags_into_the_options_the_api_plans_with(config, monkeypatch):
    seen: list[LaunchOptions] = []
    real = api.Session.plan

    def plan(self, source, framework, training_type, options=None, **flags):
        seen.append(options)
        return real(self, source, framework, training_type, options, **flags)

    monkeypatch.setattr(api.Session, "plan", plan)
    monkeypatch.setenv("KUBECONFIG", str(config.parent / "none"))  # the dry run of a plain run asks nothing
    result = _invoke("trl", "sft", str(config), "--dry-run", *FLAGS)
    assert result.exit_code == 0, result.output
    assert seen == [EXPECTED]
    assert "name: opt-run-trainer" in result.output and "image: img:1" in result.output


def test_cw_estimate_maps_the_same_flags_into_the_same_options(config, monkeypatch):
    seen: list[tuple[LaunchOptions, EstimateOptions]] = []

    def estimate(source, framework, training_type, options=None, how=None, **_):
        seen.append((options, how))
        raise SystemExit(0)

    monkeypatch.setattr(api, "estimate", estimate)
    result = _invoke("estimate", "trl", "sft", str(config), *FLAGS, "--gpu-memory", "80GB", "--no-hub")
    assert result.exit_code == 0, result.output
    assert seen == [(EXPECTED, EstimateOptions(gpu_memory="80GB", hub=False))]


def test_the_api_takes_the_structure_or_its_fields_as_keywords(config):
    registry = builtin_registry()
    options = LaunchOptions(gpu=2, name="same", set={"learning_rate": 2e-5})
    as_struct = api.plan(config, "trl", "sft", options, registry=registry)
    as_keywords = api.plan(config, "trl", "sft", gpu=2, name="same", set={"learning_rate": 2e-5}, registry=registry)
    over = api.plan(config, "trl", "sft", options, gpu=4, registry=registry)
    assert as_struct.to_yaml() == as_keywords.to_yaml() and over.request.config.cluster.gpu == 4
    with pytest.raises(TypeError, match="gpus"):
        api.plan(config, "trl", "sft", gpus=2, registry=registry)


def test_the_estimate_takes_the_same_options(config):
    registry = builtin_registry()
    launch, how = LaunchOptions(gpu=0), EstimateOptions(gpu_memory="80GB", suggest=False)
    assert api.estimate(config, "trl", "sft", launch, how, registry=registry).skipped == "the trainer has no GPU (gpu: 0)"
    assert api.estimate(config, "trl", "sft", gpu=0, gpu_memory="80GB", registry=registry).skipped == (
        "the trainer has no GPU (gpu: 0)")  # fmt: skip
