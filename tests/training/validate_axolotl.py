"""Validate an Axolotl config.yaml with Axolotl's own schema; run with an interpreter that has axolotl.

    python validate_axolotl.py CONFIG.yaml   -> prints one JSON line {"ok": bool, ...}; exit 0 either way
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

with open(sys.argv[1], encoding="utf-8") as fh:
    raw = yaml.safe_load(fh)
try:
    # Validate as on an 8x H100 node: the capabilities only gate GPU-specific options.
    cfg = validate_config(
        DictDefault(raw),
        capabilities={"bf16": True, "fp8": True, "n_gpu": 8, "compute_capability": "sm_90"},
        env_capabilities={"torch_version": "2.7.0"},
    )
    print(json.dumps({"ok": True, "axolotl": axolotl_version,
                      "checked": {k: cfg.get(k) for k in ("base_model", "rl", "output_dir",
                                                          "auto_resume_from_checkpoints")}}, default=str))
except Exception as exc:  # noqa: BLE001 - report any validation error
    print(json.dumps({"ok": False, "axolotl": axolotl_version, "error": f"{type(exc).__name__}: {exc}"}))
