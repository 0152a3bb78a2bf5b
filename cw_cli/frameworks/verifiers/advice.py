"""verifiers' advice part: its words for cw's memory suggestions and failure advice and its
failure hints are data (``advice.json``); its training setup is read by ``setup.py``.

RLConfig has no gradient accumulation, no QLoRA and no CPU offload: the words name none, so the
estimate suggests none of them. The hint is what only verifiers' log says: the environment cannot
be imported in the pod (verifiers 0.1.9, ``verifiers/utils/env_utils.py``). cw installs a hub
environment with ``prime env install`` first, which needs the network; a module next to the config
is shipped instead.
"""

from __future__ import annotations

from pathlib import Path

from cw_cli.frameworks.base import AdviceFromFile


class VerifiersAdvice(AdviceFromFile):
    """verifiers's words and failure hints (``advice.json``) and its estimate reader (``setup.py``)."""

    advice_file = Path(__file__).with_name("advice.json")
    setup_module = "cw_cli.frameworks.verifiers.setup"


#: verifiers's keys for what cw's memory suggestions and failure advice name.
VERIFIERS_WORDS = VerifiersAdvice.words
