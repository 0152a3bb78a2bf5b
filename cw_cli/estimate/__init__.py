"""Pre-launch estimates (issue 13): parameter counts first, memory later.

Everything here is pure and cheap: no torch or transformers import at module level, so the
launch path can use it without slowing down.
"""

from cw_cli.estimate.params import (
    ParamCounts,
    UnknownArchitectureError,
    count_parameters,
    lora_trainable_parameters,
)

__all__ = [
    "ParamCounts",
    "UnknownArchitectureError",
    "count_parameters",
    "lora_trainable_parameters",
]
