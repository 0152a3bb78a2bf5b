"""TRL: `trl sft|dpo|grpo|kto|reward|rloo|distillation --config ...`, with a vLLM generation server and a reward
server for the types that generate online (GRPO, RLOO).

Everything cw knows of TRL is in this package, one module per part of the framework contract
(docs/plugins.md): ``framework.py`` (identity, and the class composed of the parts),
``native_config.py`` (with ``datasets.py``), ``mounted_config.py``, ``launch.py``, ``services.py``
and ``advice.py``; ``pins.py`` holds the images and the keys `trl` reads (``trl_keys.json``), and
``setup.py`` how its config reads for the memory estimate (loaded only when an estimate is made).
"""

from __future__ import annotations

from cw_cli import __version__
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.trl.advice import TRL_WORDS
from cw_cli.frameworks.trl.framework import TRLFramework
from cw_cli.frameworks.trl.pins import RENAMED_KEYS, TRL_IMAGE, VLLM_IMAGE, every_trl_key, trl_keys
from cw_cli.frameworks.trl.services import vllm_model_args, wants_vllm_server

__all__ = [
    "RENAMED_KEYS",
    "TRL_IMAGE",
    "TRL_WORDS",
    "VLLM_IMAGE",
    "TRLFramework",
    "every_trl_key",
    "get_plugin",
    "trl_keys",
    "vllm_model_args",
    "wants_vllm_server",
]


def get_plugin() -> SimplePlugin:
    """Entry point: TRL as a plugin, registered like any other."""
    return SimplePlugin(TRLFramework, __version__)
