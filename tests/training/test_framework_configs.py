"""cw's rendered Axolotl / verifiers configs checked by the frameworks' own code.

These frameworks are heavy and often live in their own virtual environment, so the checks run
in a subprocess: ``CW_AXOLOTL_PYTHON`` / ``CW_VERIFIERS_PYTHON`` name the interpreter (default:
this one, when it can import the package). Each test is skipped, with the reason, when the
package is not available.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

pytestmark = pytest.mark.training
HERE = Path(__file__).parent


def _python_with(package: str, env_var: str) -> str:
    candidate = os.environ.get(env_var) or sys.executable
    if not Path(candidate).exists():
        pytest.skip(f"{env_var}={candidate} does not exist")
    probe = subprocess.run([candidate, "-c", f"import {package}"], capture_output=True, text=True,
                           env={**os.environ, **OFFLINE_ENV})
    if probe.returncode != 0:
        pytest.skip(f"{package} is not installed for {candidate} (set {env_var} to a python that has it, "
                    f"e.g. python -m venv /tmp/{package} && /tmp/{package}/bin/pip install {package})")
    return candidate


def _config_yaml(manifests: list[dict]) -> dict:
    config_map = next(m for m in manifests if m["kind"] == "ConfigMap")
    return yaml.safe_load(config_map["data"]["config.yaml"])


@pytest.fixture(scope="module")
def axolotl_python() -> str:
    return _python_with("axolotl", "CW_AXOLOTL_PYTHON")


@pytest.mark.parametrize("training_type,config", [("sft", "axolotl-sft.yaml"), ("grpo", "axolotl-grpo.yaml")])
def test_axolotl_accepts_rendered_config(axolotl_python, render_plan, tmp_path, training_type, config):
    manifests = render_plan("axolotl", training_type, CONFIGS_DIR / config, run_name=f"t-axo-{training_type}")
    native = _config_yaml(manifests)
    assert native["output_dir"] == f"/checkpoints/t-axo-{training_type}"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(native))
    out = subprocess.run([axolotl_python, str(HERE / "validate_axolotl.py"), str(path)], capture_output=True,
                         text=True, timeout=600, env={**os.environ, **OFFLINE_ENV}, cwd=tmp_path)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, f"validator crashed ({out.returncode}):\n{out.stderr[-4000:]}"
    result = json.loads(lines[-1])
    assert result["ok"], f"axolotl {result['axolotl']} rejects configs/{config} as rendered: {result['error']}"
    assert result["checked"]["auto_resume_from_checkpoints"] is True


def _server_argv(manifests: list[dict], role: str = "server") -> list[str]:
    deployment = next(m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"].endswith(role))
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    return command[command.index("--") + 1 :] if "--" in command else command


@pytest.fixture(scope="module")
def verifiers_check(render_plan, tmp_path_factory) -> dict:
    """configs/verifiers-grpo.yaml rendered for 4 GPUs, its ConfigMap and server argv checked by verifiers."""
    python = _python_with("verifiers", "CW_VERIFIERS_PYTHON")
    manifests = render_plan("verifiers", "grpo", CONFIGS_DIR / "verifiers-grpo.yaml", run_name="t-vf", gpu=4)
    config_dir = tmp_path_factory.mktemp("etc-cw")
    for key, text in next(m for m in manifests if m["kind"] == "ConfigMap")["data"].items():
        (config_dir / key).write_text(text, encoding="utf-8")
    server = _server_argv(manifests)
    assert server[0] == "vf-vllm"
    out = subprocess.run([python, str(HERE / "validate_verifiers.py"), str(config_dir), *server[1:]],
                         capture_output=True, text=True, timeout=600, env={**os.environ, **OFFLINE_ENV},
                         cwd=config_dir)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and lines, f"verifiers rejects the rendered run ({out.returncode}):\n{out.stderr[-4000:]}"
    return {"result": json.loads(lines[-1]), "manifests": manifests}


def test_verifiers_loads_the_mounted_environment_and_trainer_config(verifiers_check):
    result = verifiers_check["result"]
    assert result["verifiers"] == "0.1.9.post3"
    assert result["env"]["type"] == "SingleTurnEnv" and result["env"]["rows"] == 512  # environment.args
    rl = result["rl_config"]
    assert rl["output_dir"] == "/checkpoints/t-vf" and rl["run_name"] == "t-vf"
    assert rl["vllm_server_host"] == "t-vf-server" and rl["vllm_server_port"] == 8000
    assert rl["batch_size"] == 192 and rl["rollouts_per_example"] == 8 and rl["report_to"] == []


def test_verifiers_rubric_of_the_example_environment_rewards_the_right_reversal(verifiers_check):
    right, wrong = verifiers_check["result"]["right"], verifiers_check["result"]["wrong"]
    assert right["metrics"]["reversal_similarity"] == 1.0 and right["reward"] == pytest.approx(1.2)
    assert wrong["reward"] < 0.5 < right["reward"]


def test_vllm_parses_the_vf_vllm_arguments_cw_renders(verifiers_check):
    server = verifiers_check["result"]["server"]
    if not server["parsed"]:
        pytest.skip(server["why"])
    assert server["args"] == {"model": "Qwen/Qwen2.5-0.5B-Instruct", "host": "0.0.0.0", "port": 8000,
                              "data_parallel_size": 2, "tensor_parallel_size": 1, "enforce_eager": True,
                              "max_model_len": 2048}


def test_accelerate_parses_the_verifiers_trainer_launch(verifiers_check):
    launch_parser = pytest.importorskip("accelerate.commands.launch").launch_command_parser
    trainer = verifiers_check["manifests"][0]["spec"]["template"]["spec"]["containers"][0]["command"]
    launch = trainer[trainer.index("accelerate") :]  # after cw_pip's and cw_entrypoint's own arguments
    assert launch[:2] == ["accelerate", "launch"] and trainer[trainer.index("accelerate") - 1] == "--"
    args = launch_parser().parse_args(launch[2:])
    assert args.use_deepspeed and args.zero_stage == 3 and args.num_processes == 4
    assert args.module and args.training_script == "verifiers.scripts.train"
    assert args.training_script_args == ["@", "/etc/cw/config.toml"]  # vf-train's own `@ path` form
