"""TRL's advice part: its words for cw's memory suggestions and failure advice and its failure
hints are data (``advice.json``); its training setup is read by ``setup.py``.

The hint is what only TRL's log says: its vLLM client gave up on the generation server. The
trainer starts only once its servers answer (cw's init containers), so this is a server that died
or hung mid-run (TRL 1.16, ``trl/generation/vllm_client.py``).
"""

from __future__ import annotations

from pathlib import Path

from cw_cli.frameworks.base import AdviceFromFile


class TrlAdvice(AdviceFromFile):
    """trl's words and failure hints (``advice.json``) and its estimate reader (``setup.py``)."""

    advice_file = Path(__file__).with_name("advice.json")
    setup_module = "cw_cli.frameworks.trl.setup"


#: trl's keys for what cw's memory suggestions and failure advice name.
TRL_WORDS = TrlAdvice.words
