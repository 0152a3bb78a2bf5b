"""Axolotl: `axolotl train` for SFT, preference tuning (DPO, IPO, KTO, ORPO, SimPO) and GRPO,
`axolotl vllm-serve` as GRPO's generation server.

Everything cw knows of Axolotl is in this package, one module per part of the framework contract
(docs/plugins.md): ``framework.py`` (identity, and the class composed of the parts),
``native_config.py``, ``mounted_config.py`` (with ``sizes.py``, its GPU arithmetic),
``launch.py``, ``services.py`` and ``advice.py``; ``pins.py`` holds the image and the keys of its
schema (``axolotl_keys.txt``), and ``setup.py`` how its config reads for the memory estimate
(loaded only when an estimate is made).
"""

from __future__ import annotations

from cw_cli import __version__
from cw_cli.frameworks.axolotl.advice import AXOLOTL_WORDS
from cw_cli.frameworks.axolotl.framework import AxolotlFramework
from cw_cli.frameworks.axolotl.pins import AXOLOTL_IMAGE, axolotl_bool, axolotl_keys
from cw_cli.frameworks.axolotl.services import wants_vllm_server
from cw_cli.frameworks.plugin import SimplePlugin

__all__ = [
    "AXOLOTL_IMAGE",
    "AXOLOTL_WORDS",
    "AxolotlFramework",
    "axolotl_bool",
    "axolotl_keys",
    "get_plugin",
    "wants_vllm_server",
]


def get_plugin() -> SimplePlugin:
    """Entry point: Axolotl as a plugin, registered like any other."""
    return SimplePlugin(AxolotlFramework, __version__)
