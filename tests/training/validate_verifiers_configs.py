"""Read rendered verifiers runs with verifiers' own code, without their environments.

    python validate_verifiers_configs.py RUNS.json   -> one JSON line per run

RUNS.json lists ``{"config": <config.toml>, "server": [vf-vllm argv...]}``. For each, the mounted
config.toml is read as vf-train reads it (tomllib), ``trainer.args`` build verifiers' own RLConfig
(with ``use_cpu``: this machine has no GPU), and the server argv goes through vLLM's serve parser
as vf-vllm does. Environments named by hub id are not installed here, so they are not loaded
(validate_verifiers.py loads and scores a local one).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_verifiers import parse_server_args, rl_config_class  # noqa: E402


def check(run: dict) -> dict:
    try:
        with open(run["config"], "rb") as fh:
            config = tomllib.load(fh)
        rl = rl_config_class()(**config["trainer"].get("args", {}), use_cpu=True)
        server = parse_server_args(run["server"])
        fields = ("output_dir", "run_name", "batch_size", "micro_batch_size", "vllm_server_host", "vllm_server_port")
        return {"ok": True, "config": run["config"], "model": config["model"], "env_id": config["env"]["id"],
                "rl_config": {k: getattr(rl, k) for k in fields}, "server": server}  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - report any rejection
        return {"ok": False, "config": run["config"], "error": f"{type(exc).__name__}: {exc}"}


for item in json.loads(Path(sys.argv[1]).read_text()):
    print(json.dumps(check(item), default=str), flush=True)
