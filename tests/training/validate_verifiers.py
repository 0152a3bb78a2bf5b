"""Check a rendered verifiers run with verifiers' own code; run with an interpreter that has verifiers 0.1.9.

    python validate_verifiers.py CONFIG_DIR [SERVER_ARGV...]   -> one JSON line on stdout

CONFIG_DIR holds the run's ConfigMap files, as /etc/cw does in the pod, and goes on sys.path as
PYTHONPATH=/etc/cw does there. The check does what ``verifiers.scripts.train`` (vf-train) does
before it builds RLTrainer, which needs CUDA, NCCL and a live vLLM server: read config.toml with
tomllib, load the environment by its id, build RLConfig from ``trainer.args`` (with
``use_cpu``, as this machine has no GPU). It then scores a
right and a wrong handmade rollout with the environment's own rubric. SERVER_ARGV, when given, is
the server container's vf-vllm arguments, parsed by vLLM's own serve parser as vf-vllm does (only
when vLLM is installed).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from contextlib import nullcontext
from importlib.metadata import version
from pathlib import Path

import tomllib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("VF_LOG_LEVEL", "WARNING")

import verifiers as vf  # noqa: E402


def rl_config_class():
    """verifiers' RLConfig, loaded from its file: the package's __init__ imports deepspeed and vLLM."""
    path = Path(vf.__file__).parent / "rl" / "trainer" / "config.py"
    spec = importlib.util.spec_from_file_location("vf_rl_trainer_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RLConfig


async def score(env, row: dict, reply: str) -> dict:
    state = await env.init_state(row, client=None, model="cw-check")
    state["completion"] = [{"role": "assistant", "content": reply}]
    await env.rubric.score_rollout(state, nullcontext())
    return {"reward": state["reward"], "metrics": state["metrics"]}


def parse_server_args(argv: list[str]) -> dict:
    """vf-vllm's own argument handling (verifiers.rl.inference.server.main), without serving."""
    try:
        import vllm.platforms
        from vllm.platforms.cpu import CpuPlatform
    except ImportError as exc:
        return {"parsed": False, "why": f"vLLM not importable: {exc}"}
    # The CUDA build finds no GPU here and no platform at all; the parser's defaults need one.
    vllm.platforms._current_platform = CpuPlatform()
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="vf-vllm"))
    args = parser.parse_args(argv)
    validate_parsed_serve_args(args)
    keys = ("model", "host", "port", "data_parallel_size", "tensor_parallel_size", "enforce_eager", "max_model_len")
    return {"parsed": True, "vllm": version("vllm"), "args": {k: getattr(args, k) for k in keys}}


def main() -> None:
    config_dir = Path(sys.argv[1])
    sys.path.insert(0, str(config_dir))
    with (config_dir / "config.toml").open("rb") as fh:
        config = tomllib.load(fh)
    env = vf.load_environment(env_id=config["env"]["id"], **config["env"].get("args", {}))
    # The one change for this machine: CPU, where the pod has GPUs (RLConfig defaults to bf16).
    rl = rl_config_class()(**config["trainer"].get("args", {}), use_cpu=True)
    row = env.get_dataset()[0]
    right = asyncio.run(score(env, row, f"<answer>{row['answer']}</answer>"))
    wrong = asyncio.run(score(env, row, "no idea"))
    result = {
        "verifiers": version("verifiers"),
        "model": config["model"],
        "env": {"type": type(env).__name__, "rows": len(env.get_dataset()), "prompt": row["prompt"]},
        "rl_config": {k: getattr(rl, k) for k in ("output_dir", "run_name", "batch_size", "micro_batch_size",
                                                   "rollouts_per_example", "max_steps", "vllm_server_host",
                                                   "vllm_server_port", "report_to", "learning_rate")},
        "right": right,
        "wrong": wrong,
        "server": parse_server_args(sys.argv[2:]) if len(sys.argv) > 2 else None,
    }
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
