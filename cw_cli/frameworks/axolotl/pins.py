"""What cw pins of Axolotl and how its schema reads values: the image, its methods and parallel
sizes, the keys of its schema (``axolotl_keys.txt``), and its lax booleans and counts."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from cw_cli.types import TrainingType

AXOLOTL_IMAGE = "axolotlai/axolotl:0.21.0"
VLLM_PORT = 8000
#: Where the Axolotl image keeps its repository (its working directory, with deepspeed_configs/).
AXOLOTL_HOME = "/workspace/axolotl"
BUNDLED_DEEPSPEED = ("deepspeed_configs/", "./deepspeed_configs/")
PREFERENCE_METHODS = ("dpo", "ipo", "kto", "orpo", "simpo")
#: `rl:` methods that generate completions while training (Axolotl's RLType): GRPO, GDPO
#: (GRPO with per-reward normalisation) and EBFT.
ONLINE_METHODS = ("grpo", "gdpo", "ebft")
#: Online methods not scored by `trl.reward_funcs` (EBFT matches features of reference completions).
UNREWARDED_METHODS = ("ebft",)
#: Axolotl's N-D parallelism sizes: their product is the run's GPU count (`dp_shard_size` x
#: `dp_replicate_size` x `tensor_parallel_size` x `context_parallel_size`, and x
#: `expert_parallel_size` with its expert-parallel plugin: "world size = ep x dp_shard_size").
PARALLEL_KEYS = ("dp_shard_size", "dp_replicate_size", "tensor_parallel_size", "context_parallel_size",
                 "sequence_parallel_degree", "expert_parallel_size")
#: GPUs per node cw sizes multi-node Axolotl runs with (its 8-GPU nodes).
GPUS_PER_NODE = 8
KEYS_FILE = Path(__file__).with_name("axolotl_keys.txt")


@lru_cache(maxsize=1)
def axolotl_keys() -> frozenset[str]:
    """Top-level keys of Axolotl's own config schema (generated from its pinned release)."""
    lines = KEYS_FILE.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def count(value: object) -> int | None:
    """A whole number of at least 1 (not a boolean), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def command_for(method: object) -> TrainingType | None:
    """The command (training type) that runs an `rl:` method, None for an unknown one."""
    if method in ONLINE_METHODS:
        return TrainingType.GRPO
    if method in PREFERENCE_METHODS:
        return TrainingType.DPO
    return None


#: Strings pydantic's lax ``bool`` (Axolotl's ``trl.use_vllm: bool``) reads as true or false.
_TRUE_WORDS = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE_WORDS = frozenset({"0", "off", "f", "false", "n", "no"})


def axolotl_bool(value: object) -> bool | None:
    """A boolean as Axolotl's schema (pydantic, lax mode) reads it; None when unset or not one
    (Axolotl then refuses the config, or keeps its default)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, float) and value in (0.0, 1.0):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        return True if word in _TRUE_WORDS else False if word in _FALSE_WORDS else None
    return None
