"""cw's config models are built without pydantic's plugin lookup, and nothing else is changed by it.

The lookup reads every installed package's entry points (a tenth of a dry run in an ML
environment). Each check runs in a fresh interpreter: the models are built once, at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

#: Counts pydantic's plugin lookups (its entry-point reads), imports cw's models, then builds a
#: model of its own, and reports the counts and the switch as the process sees it afterwards.
PROBE = """
import json, os
import pydantic
import pydantic.plugin._loader as loader
lookups = []
real = loader.entry_points
loader.entry_points = lambda **kw: lookups.append(kw) or real(**kw)
from cw_cli.config.models import ClusterSpec
spec = ClusterSpec.model_validate({"gpu": 2, "queue": "team-a", "secrets": {"HF_TOKEN": "hf"}})
assert spec.secret_refs()["HF_TOKEN"].key == "HF_TOKEN"  # a nested model, built and working
after_cw = len(lookups)
class Users(pydantic.BaseModel):
    x: int = 0
print(json.dumps({"after_cw": after_cw, "after_users": len(lookups),
                  "switch": os.environ.get("PYDANTIC_DISABLE_PLUGINS")}))
"""


def _probe(**env: str) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"} | env
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=environment, check=True)
    return json.loads(done.stdout)


def test_cws_models_are_built_without_a_plugin_lookup_and_the_process_keeps_its_plugins():
    seen = _probe()
    assert seen["after_cw"] == 0  # building and using cw's models read no entry points
    assert seen["after_users"] == 1  # a model of the user's still looks its plugins up
    assert seen["switch"] is None  # the switch was set only while cw's models were built


def test_a_switch_the_user_set_is_left_as_it_was():
    seen = _probe(PYDANTIC_DISABLE_PLUGINS="logfire")  # names one plugin: others still load
    assert seen["switch"] == "logfire"
    assert seen["after_cw"] == 1  # the lookup ran once, with the user's filter, and was cached
    assert seen["after_users"] == 1
