"""Score verifiers environments on one model with verifiers' own ``vf-eval``, for cw_eval.py.

Runs in the evaluation pod beside cw_eval.py (shipped in its ConfigMap; standard library only).
vf-eval talks to an OpenAI-compatible server, so this starts a maintained one on the model folder
as a child process, on a free local port: ``vllm serve`` on a GPU (as `cw serve` runs it; a LoRA
checkpoint is served on its base with the adapter as a LoRA module), ``transformers serve`` on CPU.
Once it answers, each environment is scored by ``vf-eval --model cw-eval --api-base-url
http://127.0.0.1:PORT/v1 [-n N] [-r R] [--sampling-args JSON] [--env-args JSON] --save-results -- ENV``, run in
``<out>/vf-eval/<env>/`` where vf-eval saves its results (``outputs/evals/.../metadata.json``,
``results.jsonl``), which are kept. The server is stopped by its process group (its PID) at the end.

The scores are vf-eval's own averages from its saved metadata: ``avg_reward`` as ``<env>/reward``
and each of ``avg_metrics`` (one per reward function of the rubric) as ``<env>/<name>``, where
``<env>`` is the environment as named in ``eval.environments`` without a hub owner. Settings
(``cw-eval.json``, cw_cli/render/eval_environments.py)::

    {"harness": "vf-eval", "environments": ["my-env"], "environment_files": {"my_env.py": "..."},
     "install": [["prime", "env", "install", "owner/env", "--with", "pip"]], "num_examples": 20,
     "rollouts_per_example": 1, "sampling_args": {"temperature": 0}, "environment_args": {"my-env": {"n": 8}},
     "serve_with": "vllm", "gpu": 1, ...}
"""

from __future__ import annotations

import glob
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

#: The name vLLM serves the model under (vf-eval's --model); ``transformers serve`` takes only the
#: path it was started on.
SERVED_NAME = "cw-eval"
#: Where vf-eval runs and saves, under the evaluation's output folder.
RESULTS_DIR = "vf-eval"
#: The environment variable vf-eval reads the server's key from (a local server takes any).
API_KEY_ENV = "CW_EVAL_API_KEY"
#: vLLM's accepted --max-lora-rank values (vllm/config/lora.py), as render/helper_pods.py reads them.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: How long the server may take to load the model and answer (a large model on a slow volume).
SERVER_WAIT_S = float(os.environ.get("CW_EVAL_SERVER_WAIT_S", "1800"))


def score_prefix(environment: str) -> str:
    """An environment's name in score names: its id without a hub owner."""
    return environment.rsplit("/", 1)[-1]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def scores_of(environment: str, metadata: Any) -> dict[str, float]:
    """The scores of vf-eval's saved metadata (``avg_reward``, ``avg_metrics``) by score name.

    Raises:
        ValueError: Not vf-eval's metadata: not an object, or no finite ``avg_reward``.
    """
    if not isinstance(metadata, dict):
        raise ValueError("vf-eval's metadata.json is not a JSON object")
    prefix = score_prefix(environment)
    reward = _number(metadata.get("avg_reward"))
    if reward is None:
        raise ValueError(f"vf-eval's metadata.json has no finite avg_reward (it has {sorted(map(str, metadata))[:12]})")
    scores = {f"{prefix}/reward": reward}
    metrics = metadata.get("avg_metrics")
    for name, value in sorted((metrics if isinstance(metrics, dict) else {}).items(), key=lambda kv: str(kv[0])):
        number = _number(value)
        if isinstance(name, str) and name.strip() and number is not None and f"{prefix}/{name}" not in scores:
            scores[f"{prefix}/{name}"] = number
    return scores


def _adapter(model: str) -> dict[str, Any] | None:
    path = os.path.join(model, "adapter_config.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return data if isinstance(data, dict) else None


def server_command(spec: dict[str, Any], model: str, port: int) -> list[str]:
    """The server's command line: ``vllm serve`` on a GPU, ``transformers serve`` on CPU."""
    address = ["--host", "127.0.0.1", "--port", str(port)]
    if spec.get("serve_with") != "vllm":
        # transformers serve answers every request with the model it was started on.
        return ["transformers", "serve", model, *address]
    adapter = _adapter(model)
    if adapter is not None:
        rank = int(adapter.get("r") or 8)
        allowed = next((r for r in VLLM_LORA_RANKS if r >= rank), VLLM_LORA_RANKS[-1])
        command = ["vllm", "serve", str(adapter.get("base_model_name_or_path") or model), "--enable-lora",
                   "--lora-modules", f"{SERVED_NAME}={model}", "--max-lora-rank", str(allowed)]  # fmt: skip
    else:
        command = ["vllm", "serve", model, "--served-model-name", SERVED_NAME]
    if int(spec.get("gpu") or 1) > 1:
        command += ["--tensor-parallel-size", str(int(spec["gpu"]))]
    return [*command, *address]


def served_name(spec: dict[str, Any], model: str) -> str:
    """The model's name in requests to the server: vLLM's --served-model-name, the path for transformers."""
    return SERVED_NAME if spec.get("serve_with") == "vllm" else model


def vf_eval_command(spec: dict[str, Any], environment: str, model: str, port: int) -> list[str]:
    """vf-eval's command line for one environment against the local server serving ``model``: the
    environment last, after ``--``, so that no name (``--env-args``, say) is ever read as a flag."""
    command = ["vf-eval", "--model", served_name(spec, model), "--api-base-url", f"http://127.0.0.1:{port}/v1",
               "--api-key-var", API_KEY_ENV, "--save-results"]  # fmt: skip
    if spec.get("num_examples") is not None:
        command += ["--num-examples", str(int(spec["num_examples"]))]
    if spec.get("rollouts_per_example") is not None:
        command += ["--rollouts-per-example", str(int(spec["rollouts_per_example"]))]
    if spec.get("sampling_args"):
        command += ["--sampling-args", json.dumps(spec["sampling_args"], sort_keys=True)]
    arguments = spec.get("environment_args")
    arguments = arguments.get(environment) if isinstance(arguments, dict) else None
    if isinstance(arguments, dict) and arguments:  # load_environment's keyword arguments, as the trainer gives them
        command += ["--env-args", json.dumps(arguments, sort_keys=True)]
    return [*command, "--", environment]


def free_port() -> int:
    """A local port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answers(port: int, server: subprocess.Popen, timeout: float) -> bool:
    """Whether the server lists its models before ``timeout`` seconds (False once it has exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as answer:  # noqa: S310 - local
                if answer.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    return False


def stop(server: subprocess.Popen) -> None:
    """Stop the server and its children (vLLM's engine) by its process group, which is its PID."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def newest_metadata(folder: str, since: float) -> str | None:
    """vf-eval's newest ``metadata.json`` under ``folder`` written since ``since``."""
    found = [p for p in glob.glob(os.path.join(folder, "**", "metadata.json"), recursive=True) if os.path.getmtime(p) >= since]
    return max(found, key=os.path.getmtime) if found else None


def harness_version() -> str:
    """``vf-eval <verifiers version>`` for scores.json."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"vf-eval {version('verifiers')}"
    except PackageNotFoundError:
        return "vf-eval"


def _tail(path: str, size: int = 4000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - size))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _call(command: list[str], **options: Any) -> int:
    """``command``'s exit status; 127 with a line saying so where it is not installed."""
    try:
        return subprocess.call(command, **options)
    except OSError as exc:
        print(f"cw_eval: cannot run {command[0]}: {exc} (the image lacks it, and cw's package step did not install it)",
              file=sys.stderr, flush=True)  # fmt: skip
        return 127


def _write_environments(files: dict[str, str], folder: str) -> None:
    for name, text in files.items():
        if os.path.basename(name) != name or not name.endswith(".py"):
            raise SystemExit(f"cw_vf_eval: refusing environment file {name!r} (a module's file name)")
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            handle.write(text)


def rollout_errors(results_path: str) -> tuple[int, int, str]:
    """(rollouts that failed, rollouts, the first error) of vf-eval's saved ``results.jsonl``: a
    rollout whose model request failed is saved with reward 0 and its error, and vf-eval exits 0."""
    failed, total, first = 0, 0, ""
    try:
        with open(results_path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                total += 1
                if isinstance(row, dict) and row.get("error"):
                    failed += 1
                    first = first or str(row["error"])[:300]
    except OSError:
        pass
    return failed, total, first


def _score_environments(spec: dict[str, Any], model: str, port: int, out: str, env: dict[str, str]) -> tuple[int, dict[str, float]]:
    scores: dict[str, float] = {}
    for environment in spec.get("environments") or []:
        folder = os.path.join(out, RESULTS_DIR, score_prefix(environment))
        os.makedirs(folder, exist_ok=True)
        started = time.time() - 1
        command = vf_eval_command(spec, environment, model, port)
        print("cw_eval: " + " ".join(command), flush=True)
        code = _call(command, cwd=folder, env=env)
        if code != 0:
            print(f"cw_eval: vf-eval exited {code} on {environment}; no scores written", file=sys.stderr, flush=True)
            return code, {}
        found = newest_metadata(folder, started)
        if found is None:
            print(f"cw_eval: vf-eval saved no metadata.json under {folder}", file=sys.stderr, flush=True)
            return 1, {}
        failed, total, first = rollout_errors(os.path.join(os.path.dirname(found), "results.jsonl"))
        if total and failed == total:
            print(f"cw_eval: every rollout of {environment} failed ({first}); see the server's log. No scores written",
                  file=sys.stderr, flush=True)  # fmt: skip
            return 1, {}
        if failed:
            print(f"cw_eval: {failed} of {total} rollouts of {environment} failed ({first}); vf-eval scores them 0",
                  file=sys.stderr, flush=True)  # fmt: skip
        try:
            with open(found, encoding="utf-8") as handle:
                scores.update(scores_of(environment, json.load(handle)))
        except ValueError as exc:
            print(f"cw_eval: {found}: {exc}", file=sys.stderr, flush=True)
            return 1, {}
    return 0, scores


def evaluate(spec: dict[str, Any], model: str, out: str) -> tuple[int, dict[str, float]]:
    """Serve ``model``, score each environment with vf-eval, stop the server; (exit status, scores)."""
    os.makedirs(os.path.join(out, RESULTS_DIR), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cw-vf-envs-") as modules:
        _write_environments(spec.get("environment_files") or {}, modules)
        env = {**os.environ, API_KEY_ENV: os.environ.get(API_KEY_ENV) or "cw-local"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (modules, os.environ.get("PYTHONPATH")) if p)
        for install in spec.get("install") or []:  # environments from the hub, as the trainer installs them
            print("cw_eval: " + " ".join(install), flush=True)
            code = _call(install, env=env)
            if code != 0:
                print(f"cw_eval: {' '.join(install)} exited {code}; no scores written", file=sys.stderr, flush=True)
                return code, {}
        port = free_port()
        command = server_command(spec, model, port)
        log_path = os.path.join(out, RESULTS_DIR, "server.log")
        print("cw_eval: " + " ".join(command) + f" (its log: {log_path})", flush=True)
        try:
            with open(log_path, "ab") as log:
                server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            print(f"cw_eval: cannot start {command[0]}: {exc}", file=sys.stderr, flush=True)
            return 127, {}
        try:
            if not wait_until_answers(port, server, SERVER_WAIT_S):
                print(f"cw_eval: the server did not answer (exit {server.poll()}); its log ends:\n{_tail(log_path)}",
                      file=sys.stderr, flush=True)  # fmt: skip
                return 1, {}
            code, scores = _score_environments(spec, model, port, out, env)
        finally:
            stop(server)
    metric = spec.get("metric")
    if code == 0 and metric and metric not in scores:
        print(f"cw_eval: the deciding metric {metric} is not among vf-eval's scores ({', '.join(scores)}); "
              "fix eval.metric", file=sys.stderr, flush=True)  # fmt: skip
    return code, scores
