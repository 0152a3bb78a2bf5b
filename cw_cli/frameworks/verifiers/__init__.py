"""verifiers: its own RL stack, `vf-vllm` (inference) plus `vf-train @ config.toml` under accelerate.

The native config is the TOML that verifiers' `vf-rl` reads (``model``, ``[env]``,
``[inference]``, ``[trainer]``): the published ``.toml`` file itself, or the same in YAML beside
cw's fields, mounted as ``/etc/cw/config.toml``. Its ``[env]`` section may be written ``env:``
(a mapping with ``id``) or ``environment:``; an ``env:`` without ``id`` is cw's environment
variables. ``inference.gpus`` and ``trainer.gpus`` size the server and trainer pods. verifiers
0.1.9.post3 is the newest PyPI release whose trainer and
``vf-vllm`` are in the package (later releases moved them out, and no longer publish them on PyPI), so
cw pins it and installs it over the vLLM image it was built against when the image lacks it.

Everything cw knows of verifiers is in this package, one module per part of the framework contract
(docs/plugins.md): ``framework.py`` (identity, and the class composed of the parts),
``native_config.py``, ``mounted_config.py``, ``launch.py``, ``services.py`` and ``advice.py``;
``pins.py`` holds the image, the package stack and the sections of its file, and ``setup.py`` how
its config reads for the memory estimate (loaded only when an estimate is made).
"""

from __future__ import annotations

from cw_cli import __version__
from cw_cli.frameworks.plugin import SimplePlugin
from cw_cli.frameworks.verifiers.advice import VERIFIERS_WORDS
from cw_cli.frameworks.verifiers.framework import VerifiersFramework
from cw_cli.frameworks.verifiers.native_config import MAX_COUNT
from cw_cli.frameworks.verifiers.pins import VERIFIERS_IMAGE, VERIFIERS_STACK, VERIFIERS_VERSION, WEIGHT_SYNC_PORT
from cw_cli.frameworks.verifiers.services import server_flags

__all__ = [
    "MAX_COUNT",
    "VERIFIERS_IMAGE",
    "VERIFIERS_STACK",
    "VERIFIERS_VERSION",
    "VERIFIERS_WORDS",
    "WEIGHT_SYNC_PORT",
    "VerifiersFramework",
    "get_plugin",
    "server_flags",
]


def get_plugin() -> SimplePlugin:
    """Entry point: verifiers as a plugin, registered like any other."""
    return SimplePlugin(VerifiersFramework, __version__)
