"""Whether an Axolotl GRPO run gets a vLLM server is decided as Axolotl decides it (issue 32 item 8).

Axolotl 0.19's validator sets ``trl.vllm_mode: server`` when ``trl.use_vllm`` is true and no mode
is written, so a published GRPO config with ``use_vllm: true`` alone has a trainer that waits
for a server; cw started one only for ``vllm_mode: server`` written out. Each ``trl:`` block below
goes through Axolotl's own validator (``validate_axolotl.py`` in the Axolotl venv,
``CW_AXOLOTL_PYTHON``), and cw's rule must agree with what Axolotl then hands TRL: a server
exactly when the validated config has ``use_vllm`` and ``vllm_mode: server``. The run cw renders
for ``use_vllm: true`` alone is validated too: its trainer points at cw's server.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from test_framework_configs import _config_yaml, _python_with
from training_helpers import OFFLINE_ENV

from cw_cli.frameworks.axolotl import wants_vllm_server

pytestmark = pytest.mark.training
HERE = Path(__file__).parent

BASE = {
    "base_model": "Qwen/Qwen2.5-1.5B-Instruct",
    "rl": "grpo",
    "datasets": [{"path": "openai/gsm8k", "name": "main", "type": "rewards.transform"}],
    "micro_batch_size": 2,
    "gradient_accumulation_steps": 32,
    "num_epochs": 1,
    "learning_rate": 5.0e-6,
    "output_dir": "./out",
}
UNSET = object()
USE_VLLM = [True, False, "true", "yes", "false", 1, 0, UNSET]
MODES = ["server", "colocate", None, UNSET]


def _trl(use_vllm: object, mode: object) -> dict:
    block: dict = {"num_generations": 8, "reward_funcs": ["rewards.reward"]}
    if use_vllm is not UNSET:
        block["use_vllm"] = use_vllm
    if mode is not UNSET:
        block["vllm_mode"] = mode
    return block


def _validate(python: str, paths: list[Path], cwd: Path) -> list[dict]:
    out = subprocess.run([python, str(HERE / "validate_axolotl.py"), *map(str, paths)], capture_output=True, text=True,
                         timeout=900, env={**os.environ, **OFFLINE_ENV}, cwd=cwd)  # fmt: skip
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(paths), f"validator crashed ({out.returncode}):\n{out.stderr[-4000:]}"
    return results


def test_cw_starts_a_server_exactly_when_axolotls_validator_says_the_trainer_uses_one(tmp_path):
    python = _python_with("axolotl", "CW_AXOLOTL_PYTHON")
    cases = [(use, mode) for use in USE_VLLM for mode in MODES]
    paths = []
    for index, (use, mode) in enumerate(cases):
        path = tmp_path / f"grpo-{index}.yaml"
        path.write_text(yaml.safe_dump({**BASE, "trl": _trl(use, mode)}))
        paths.append(path)
    results = _validate(python, paths, tmp_path)
    disagreements = []
    for (use, mode), result in zip(cases, results):
        native = {**BASE, "trl": _trl(use, mode)}
        if not result["ok"]:
            continue  # a value Axolotl refuses: no run either way
        trl = result["checked"]["trl"]
        axolotl_serves = bool(trl["use_vllm"]) and trl["vllm_mode"] == "server"
        if wants_vllm_server(native, {}) != axolotl_serves:
            disagreements.append((native["trl"], trl))
    assert disagreements == []
    # The case of the regression: use_vllm alone is server mode for Axolotl, so for cw too.
    alone = results[cases.index((True, UNSET))]
    assert alone["ok"] and alone["checked"]["trl"]["vllm_mode"] == "server"
    assert wants_vllm_server({**BASE, "trl": _trl(True, UNSET)}, {})


def test_a_published_grpo_config_with_use_vllm_alone_gets_the_server_its_trainer_waits_for(render_plan, tmp_path):
    python = _python_with("axolotl", "CW_AXOLOTL_PYTHON")
    config = tmp_path / "grpo.yaml"
    config.write_text(yaml.safe_dump({"gpu": 4, "checkpoint_volume": "ckpts", **BASE,
                                      "vllm": {"tensor_parallel_size": 1},
                                      "trl": {**_trl(True, UNSET)}}))  # fmt: skip
    manifests = render_plan("axolotl", "grpo", config, run_name="t-axo-vllm")
    servers = [m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "t-axo-vllm-server"]
    assert len(servers) == 1
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump(_config_yaml(manifests)))
    (result,) = _validate(python, [rendered], tmp_path)
    assert result["ok"], result.get("error")
    trl = result["checked"]["trl"]
    assert trl["use_vllm"] is True and trl["vllm_mode"] == "server"
    assert trl["vllm_server_host"] == "t-axo-vllm-server"
