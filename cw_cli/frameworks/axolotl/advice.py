"""Axolotl's advice part: its words for cw's memory suggestions and failure advice and its failure
hints are data (``advice.json``); its training setup is read by ``setup.py``.

The hint is what only Axolotl's log says: a dataset ``type`` it has no strategy for (Axolotl 0.19,
``axolotl/utils/data/wrappers.py``). cw checks the data's columns before launch, but not a type
naming the user's own loader, which only Axolotl can resolve.
"""

from __future__ import annotations

from pathlib import Path

from cw_cli.frameworks.base import AdviceFromFile


class AxolotlAdvice(AdviceFromFile):
    """axolotl's words and failure hints (``advice.json``) and its estimate reader (``setup.py``)."""

    advice_file = Path(__file__).with_name("advice.json")
    setup_module = "cw_cli.frameworks.axolotl.setup"


#: axolotl's keys for what cw's memory suggestions and failure advice name.
AXOLOTL_WORDS = AxolotlAdvice.words
