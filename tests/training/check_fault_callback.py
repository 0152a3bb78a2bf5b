"""Run with a framework's own interpreter: does cw_fault's callback reach that framework's Trainers?

Usage: python check_fault_callback.py RUNTIME_DIR MODULE:CLASS [MODULE:CLASS ...]

Prints one JSON object: whether ``transformers.Trainer`` was patched at import (cw_fault.activate,
as the pod's sitecustomize shim calls it), whether a real ``Trainer`` built in that environment
carries the callback, and for each named subclass whether its ``__init__`` chain reaches
``Trainer.__init__`` (every ``__init__`` on the way calls ``super().__init__``).
"""

import importlib
import inspect
import json
import os
import sys
import tempfile

sys.path.insert(0, sys.argv[1])
os.environ["CW_FT_DIR"] = tempfile.mkdtemp(prefix="cw-ft-check-")
import cw_fault  # noqa: E402

cw_fault.activate()
import torch  # noqa: E402
from transformers import Trainer, TrainingArguments  # noqa: E402

result = {"transformers_patched": bool(getattr(Trainer.__init__, "_cw_patched", False)), "classes": {}}
args = TrainingArguments(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[])
trainer = Trainer(model=torch.nn.Linear(2, 2), args=args)
result["callback_on_a_trainer"] = any(type(cb).__name__ == "CwFaultCallback" for cb in trainer.callback_handler.callbacks)

def _by_reading(module: str, name: str) -> dict:
    """The class's source, read without importing it (its module needs a package this environment
    lacks, e.g. deepspeed on a CPU machine): does it subclass Trainer and call super().__init__?"""
    import ast
    import importlib.util

    top, *rest = module.split(".")
    root = importlib.util.find_spec(top).submodule_search_locations[0]
    path = os.path.join(root, *rest) + ".py"
    tree = ast.parse(open(path, encoding="utf-8").read())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    bases = [ast.unparse(b) for b in cls.bases]
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    calls_super = init is None or "super().__init__(" in ast.unparse(init)
    return {"read_from": path, "bases": bases, "init_chain": [{"class": name, "calls_super": calls_super}],
            "reaches_trainer_init": "Trainer" in bases and calls_super}


for spec in sys.argv[2:]:
    module, name = spec.split(":")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        result["classes"][spec] = {**_by_reading(module, name), "import_error": str(exc)}
        continue
    chain = []
    for klass in cls.__mro__:
        if klass is Trainer:
            break
        init = vars(klass).get("__init__")
        if init is None:
            continue
        source = inspect.getsource(init)
        chain.append({"class": klass.__qualname__, "calls_super": "super().__init__(" in source or "super(" in source})
    result["classes"][spec] = {
        "subclasses_trainer": issubclass(cls, Trainer),
        "init_chain": chain,
        "reaches_trainer_init": issubclass(cls, Trainer) and all(step["calls_super"] for step in chain),
    }
print(json.dumps(result))
