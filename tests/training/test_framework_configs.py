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


# The names configs/verifiers_train.py uses; they came from verifiers' bundled trainer.
VERIFIERS_TRAINER_API = ("GRPOTrainer", "grpo_defaults", "get_model_and_tokenizer", "load_environment")


def test_verifiers_has_the_trainer_api_the_example_uses(render_plan):
    python = _python_with("verifiers", "CW_VERIFIERS_PYTHON")
    script = (
        "import json, importlib.metadata as m, verifiers as vf\n"
        f"names = {VERIFIERS_TRAINER_API!r}\n"
        "missing = []\n"
        "for n in names:\n"
        "    try:\n"
        "        getattr(vf, n)\n"
        "    except Exception:\n"
        "        missing.append(n)\n"
        "print(json.dumps({'version': m.version('verifiers'), 'missing': missing}))\n"
    )
    out = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **OFFLINE_ENV})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    manifests = render_plan("verifiers", "grpo", CONFIGS_DIR / "verifiers-grpo.yaml", run_name="t-vf")
    native = _config_yaml(manifests)
    assert native["output_dir"] == "/checkpoints/t-vf"
    assert not result["missing"], (
        f"verifiers {result['version']} lacks {result['missing']} used by configs/verifiers_train.py "
        "(verifiers >= 0.2 ships no trainer; 0.1.x moved it to the 'verifiers-rl' package)"
    )
