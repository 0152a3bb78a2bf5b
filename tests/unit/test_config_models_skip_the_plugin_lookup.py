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


#: Imports cw's models in a fresh interpreter and reports whether pydantic's plugin loader (and
#: the importlib.metadata it imports) were imported, then builds a model of the user's.
LOADER_PROBE = """
import json, sys
before = "importlib.metadata" in sys.modules
from cw_cli.config.models import ClusterSpec
spec = ClusterSpec.model_validate({"gpu": 2, "secrets": {"HF_TOKEN": "hf"}, "volumes": {"data-pvc": "/data"}})
assert spec.gpu == 2 and spec.secret_refs()["HF_TOKEN"].key == "HF_TOKEN"
after_cw = {"metadata": "importlib.metadata" in sys.modules, "loader": "pydantic.plugin._loader" in sys.modules}
import pydantic
class Users(pydantic.BaseModel):
    x: int = 0
loader = sys.modules["pydantic.plugin._loader"]
print(json.dumps({"before": before, "after_cw": after_cw, "real_loader": hasattr(loader, "entry_points"),
                  "looked_up": loader._plugins is not None}))
"""

#: The same, with a pydantic that asks its loader for more than get_plugins while building.
WANTS_MORE_PROBE = """
import json, sys
import pydantic._internal._model_construction as construction
original = construction.create_schema_validator
def wanting_more(*args, **kwargs):
    from pydantic.plugin._loader import entry_points, get_plugins  # the stand-in has no entry_points
    return original(*args, **kwargs)
construction.create_schema_validator = wanting_more
from cw_cli.config.models import ClusterSpec
spec = ClusterSpec.model_validate({"gpu": 3})
print(json.dumps({"gpu": spec.gpu, "real_loader": hasattr(sys.modules["pydantic.plugin._loader"], "entry_points")}))
"""


def _run(probe: str) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=environment, check=True)
    return json.loads(done.stdout)


def test_building_cws_models_imports_neither_the_plugin_loader_nor_importlib_metadata():
    seen = _run(LOADER_PROBE)
    assert seen["before"] is False  # else this interpreter could not tell
    assert seen["after_cw"] == {"metadata": False, "loader": False}
    assert seen["real_loader"] is True and seen["looked_up"] is True  # the user's model gets the real lookup


def test_a_pydantic_that_wants_more_of_its_loader_gets_the_real_one_and_the_models_still_build():
    assert _run(WANTS_MORE_PROBE) == {"gpu": 3, "real_loader": True}
