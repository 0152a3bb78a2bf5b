"""A verifiers run's `eval:` block gives verifiers' own vf-eval scores of the environment the run
trains on (the block names none: the run's own is taken, with the trainer's environment.args, which
reach load_environment: the saved prompts are one word, the environment's default three): the exact
command of the rendered evaluation Job (cw's package step, then cw_eval.py, which starts
`transformers serve` on the checkpoint, runs vf-eval against it and stops it) on a tiny local
Llama and the example environment shipped with the run (configs/cw_reverse_text.py) writes
scores.json with exactly the averages of vf-eval run by hand against the same server, with the
same arguments (2 examples, 1 rollout, greedy, 8 tokens, the same --env-args). Offline, on CPU, ~1 minute.

It needs a Python with verifiers 0.1.9.post3 and transformers[serving] 5.x, whose `transformers
serve` answers a non-streaming chat completion with one JSON object (4.57, which verifiers' trainer
stack pins, answers with an SSE stream that vf-eval's OpenAI client cannot read): CW_VF_EVAL_PYTHON,
else CW_VERIFIERS_PYTHON. One over the verifiers venv, without a second torch::

    python3.11 -m venv ~/.cache/cw/venvs/verifiers-eval
    echo ~/.cache/cw/venvs/verifiers-0.1.9.post3/lib/python3.11/site-packages \\
        > ~/.cache/cw/venvs/verifiers-eval/lib/python3.11/site-packages/cw-verifiers.pth
    ~/.cache/cw/venvs/verifiers-eval/bin/pip install "transformers[serving]==5.24.0" "huggingface-hub>=1.3,<2"
    ~/.cache/cw/venvs/verifiers-eval/bin/pip install --no-deps --force-reinstall verifiers==0.1.9.post3  # vf-eval here
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

from cw_cli.localrun.pod_view import configmap_files, map_paths

pytestmark = pytest.mark.training

ENV_ID = "cw-reverse-text"
#: No environments and no metric: a verifiers run's block scores the environment it trains on, by <env>/reward.
BLOCK = {"limit": 2, "rollouts_per_example": 1, "gpu": 0, "generation": {"temperature": 0, "max_tokens": 8}}
#: The trainer's load_environment arguments (environment.args), which the evaluation must pass too:
#: one-word phrases, where the environment's default is three.
ENV_ARGS = {"num_examples": 8, "words_per_example": 1, "seed": 3}


def _vf_eval_python() -> Path:
    """A Python with verifiers and a `transformers serve` that answers vf-eval, or a skip saying why."""
    candidate = os.environ.get("CW_VF_EVAL_PYTHON") or os.environ.get("CW_VERIFIERS_PYTHON")
    if not candidate or not Path(candidate).exists():
        pytest.skip("set CW_VF_EVAL_PYTHON to a Python with verifiers 0.1.9.post3 and transformers[serving] 5.x "
                    "(how: this file's docstring)")  # fmt: skip
    probe = subprocess.run([candidate, "-c", "import verifiers, fastapi, transformers; print(transformers.__version__)"],
                           capture_output=True, text=True, env={**os.environ, **OFFLINE_ENV})  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"{candidate} lacks verifiers or transformers[serving]: {probe.stderr.strip()[-200:]}")
    if int(probe.stdout.strip().split(".")[0]) < 5:
        pytest.skip(f"{candidate} has transformers {probe.stdout.strip()}, whose `transformers serve` answers every "
                    "request as an SSE stream vf-eval cannot read; set CW_VF_EVAL_PYTHON (this file's docstring)")  # fmt: skip
    bin_dir = Path(candidate).parent
    for script in ("vf-eval", "transformers", "python3"):
        if not (bin_dir / script).exists():
            pytest.skip(f"{bin_dir} has no {script} (the pod runs them from its PATH)")
    return Path(candidate)


def _config(folder: Path) -> Path:
    """configs/verifiers-grpo.yaml (its environment module beside it) with an `eval:` block that names
    no environment, and environment.args the evaluation must pass on."""
    import yaml

    folder.mkdir(parents=True)
    shutil.copy(CONFIGS_DIR / "cw_reverse_text.py", folder / "cw_reverse_text.py")
    data = yaml.safe_load((CONFIGS_DIR / "verifiers-grpo.yaml").read_text())
    config = folder / "verifiers-grpo.yaml"
    config.write_text(yaml.safe_dump({**data, "environment": {**data["environment"], "args": ENV_ARGS}, "eval": BLOCK}))
    return config


def _env(python: Path, home: Path) -> dict[str, str]:
    return {**OFFLINE_ENV, "PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(home), "VF_LOG_LEVEL": "WARNING"}


def _by_hand(python: Path, model: Path, modules: Path, workdir: Path) -> dict:
    """vf-eval run by hand against `transformers serve` on ``model``, with the same arguments."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**_env(python, workdir), "PYTHONPATH": str(modules), "OPENAI_API_KEY": "local"}
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "server.log", "wb") as log:
        server = subprocess.Popen([str(python.parent / "transformers"), "serve", str(model), "--host", "127.0.0.1",
                                   "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)  # fmt: skip
    try:
        for _ in range(180):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                    break
            except OSError:
                assert server.poll() is None, (workdir / "server.log").read_text()[-3000:]
                time.sleep(1)
        done = subprocess.run([str(python.parent / "vf-eval"), ENV_ID, "--model", str(model), "--api-base-url",
                               f"http://127.0.0.1:{port}/v1", "--api-key-var", "OPENAI_API_KEY", "-n", "2", "-r", "1",
                               "--sampling-args", json.dumps(BLOCK["generation"]), "--env-args", json.dumps(ENV_ARGS),
                               "--save-results"],
                              cwd=workdir, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    (metadata,) = workdir.glob("outputs/evals/*/*/metadata.json")
    return json.loads(metadata.read_text())


def _question(row: dict) -> str:
    """The user's message of one of vf-eval's saved rollouts (the phrase to reverse)."""
    prompt = row["prompt"]
    messages = json.loads(prompt) if isinstance(prompt, str) else prompt
    return next(m["content"] for m in messages if m["role"] == "user")


def test_the_rendered_evaluation_of_an_environment_scores_as_vf_eval_by_hand(request, tmp_path):
    python = _vf_eval_python()  # before the model is built: a skip costs nothing
    tiny_model = request.getfixturevalue("tiny_model")
    from cw_cli.config.loader import load_run_config
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.render.evaluation import EvalResources, eval_manifests, eval_requirements, settings_of, target
    from cw_cli.render.export import ExportFacts

    config_path = _config(tmp_path / "user")
    registry = FrameworkRegistry().load_all(include_plugins=False)
    loaded, ttype = registry.resolve_type("verifiers", "grpo")
    config = load_run_config(config_path, loaded.framework, ttype)
    assert config.cluster.eval is not None
    settings = settings_of(config.cluster.eval, config.path.parent, config.cluster.gpu, list(config.cluster.files))
    facts = ExportFacts(run_name="vfe", run_dir="/checkpoints/vfe", claim="model-checkpoints", image="trainer:1",
                        labels={"cw-cli.dev/run": "vfe"})  # fmt: skip
    job, config_map = eval_manifests(facts, settings, target(facts.run_dir, "2"), EvalResources(),
                                     requirements=eval_requirements(settings))  # fmt: skip

    # The run's folder on the volume: the tiny model as checkpoint 2.
    checkpoints = tmp_path / "checkpoints"
    checkpoint = checkpoints / "vfe" / "checkpoint-2"
    shutil.copytree(tiny_model, checkpoint)
    etc = tmp_path / "etc-cw"
    etc.mkdir()
    for key, text in configmap_files(config_map).items():
        (etc / key).write_text(str(text))
    command = [map_paths(part, {"/etc/cw": etc, "/checkpoints": checkpoints})
               for part in job["spec"]["template"]["spec"]["containers"][0]["command"]]  # fmt: skip
    assert command[:2] == ["python3", f"{etc}/cw_pip.py"], command  # cw's package step, then cw_eval.py
    # CW_PIP_CHECK: the package step checks, offline, that the image (this Python) has what it would install.
    env = {**_env(python, tmp_path / "home"), "CW_PIP_CHECK": "1"}
    started = time.monotonic()
    done = subprocess.run([str(python), *command[1:]], env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    scores = json.loads((checkpoint / "cw-eval" / "scores.json").read_text())
    assert (scores["checkpoint"], scores["step"], scores["metric"]) == ("checkpoint-2", 2, f"{ENV_ID}/reward")
    assert scores["harness"] == "vf-eval 0.1.9.post3"
    (results,) = (checkpoint / "cw-eval" / "vf-eval" / ENV_ID).glob("outputs/evals/*/*/results.jsonl")  # vf-eval's own output, kept
    questions = [_question(json.loads(line)) for line in results.read_text().splitlines() if line.strip()]
    assert len(questions) == 2 and all(len(q.split()) == 1 for q in questions), questions  # environment.args reached load_environment
    assert "transformers serve" in done.stdout and "vf-eval --model" in done.stdout and "-- cw-reverse-text" in done.stdout
    port = int(re.search(r"--port (\d+)", done.stdout).group(1))  # type: ignore[union-attr]
    with pytest.raises(OSError):  # the server was stopped with the evaluation
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5)

    modules = tmp_path / "modules"
    modules.mkdir()
    shutil.copy(CONFIGS_DIR / "cw_reverse_text.py", modules / "cw_reverse_text.py")
    by_hand = _by_hand(python, checkpoint, modules, tmp_path / "by-hand")
    expected = {f"{ENV_ID}/reward": by_hand["avg_reward"], **{f"{ENV_ID}/{k}": v for k, v in by_hand["avg_metrics"].items()}}
    assert scores["scores"] == expected
    assert set(expected) >= {f"{ENV_ID}/reward", f"{ENV_ID}/reversal_similarity", f"{ENV_ID}/format_reward_func"}
    print(f"\nscores of checkpoint-2 ({took:.0f} s through cw): {scores['scores']}")


def test_the_gpu_servers_command_is_one_vllm_takes(tmp_path):
    """The GPU path's `vllm serve` argv (a full model on 2 GPUs; a LoRA checkpoint on its base) goes
    through vLLM 0.10.2's own serve parser and checks (the verifiers image's vLLM; no GPU here)."""
    from test_framework_configs import _python_with

    python = _python_with("vllm", "CW_VERIFIERS_PYTHON")
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-0.5B", "r": 12}))
    script = f"""
import json, sys
sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).resolve().parents[2] / "cw_cli" / "runtime")!r}]
import cw_vf_eval
from validate_verifiers import parse_server_args
for model, gpu in (("/checkpoints/run/checkpoint-4", 2), ({str(tmp_path)!r}, 1)):
    argv = cw_vf_eval.server_command({{"serve_with": "vllm", "gpu": gpu}}, model, 8123)
    assert argv[:2] == ["vllm", "serve"], argv
    print(json.dumps(parse_server_args(["--model", argv[2], *argv[3:]])))  # `vllm serve M` is --model M
"""
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=300, env={**os.environ, **OFFLINE_ENV})
    assert done.returncode == 0, done.stderr[-3000:]
    full, lora = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert full["parsed"] and full["args"]["tensor_parallel_size"] == 2 and full["args"]["port"] == 8123
    assert lora["parsed"] and lora["args"]["model"] == "Qwen/Qwen2.5-0.5B"
