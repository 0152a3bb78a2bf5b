"""Validate an Axolotl config.yaml with Axolotl's own schema; run with an interpreter that has axolotl.

    python validate_axolotl.py [--gpus N] CONFIG.yaml [[--gpus N] CONFIG.yaml ...]
        -> one JSON line {"ok": bool, "path": ..., ...} per config (Axolotl is imported once); exit 0 either way
    --gpus: the trainer's world size for the configs after it (default 8, one 8-GPU node).
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import yaml  # noqa: E402
from axolotl.utils.config import validate_config  # noqa: E402
from axolotl.utils.dict import DictDefault  # noqa: E402

try:
    from importlib.metadata import version

    axolotl_version = version("axolotl")
except Exception:  # noqa: BLE001
    axolotl_version = "unknown"



def validate(path: str, gpus: int) -> dict:
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    try:
        # Validate as on an 8x H100 node: the capabilities only gate GPU-specific options.
        cfg = validate_config(
            DictDefault(raw),
            capabilities={"bf16": True, "fp8": True, "n_gpu": gpus, "compute_capability": "sm_90"},
            env_capabilities={"torch_version": "2.7.0"},
        )
        checked = {k: cfg.get(k) for k in ("base_model", "rl", "output_dir", "auto_resume_from_checkpoints")}
        trl = cfg.get("trl")  # after Axolotl's validators: its defaults filled in (vllm_mode)
        if trl is not None:
            checked["trl"] = {k: getattr(trl, k, None) if not isinstance(trl, dict) else trl.get(k)
                              for k in ("use_vllm", "vllm_mode", "vllm_server_host", "vllm_server_port")}
        return {"ok": True, "path": path, "axolotl": axolotl_version, "checked": checked}
    except Exception as exc:  # noqa: BLE001 - report any validation error
        return {"ok": False, "path": path, "axolotl": axolotl_version, "error": f"{type(exc).__name__}: {exc}"}


world_size, args = 8, sys.argv[1:]
while args:
    arg = args.pop(0)
    if arg == "--gpus":
        world_size = int(args.pop(0))
        continue
    print(json.dumps(validate(arg, world_size), default=str), flush=True)
