"""cw's artifact lister: what a run left on its checkpoint volume, as one JSON document.

Run by ``cw artifacts`` in a short-lived pod that mounts the volume read-only, from the volume's
root (the pod's working folder)::

    python3 -c "$(cat cw_artifacts.py)" RUN-DIR

``RUN-DIR`` is the run's output folder relative to the volume's root. Standard library only, no
cw imports. For each ``checkpoint-N``: its step, size, time, whether it is complete (its
``trainer_state.json`` reads: the Trainer writes it last) and the metrics logged at that step;
the final model the Trainer saved in the folder itself; and each ``exported/`` folder. Each says
whether it is a LoRA adapter, and what a server needs to know of the model (``model``): an
adapter's base and rank, the attention heads and the longest context, read from
``adapter_config.json`` and ``config.json`` (an adapter's base's, where it is a folder here).
Where the evaluation scored a model (``checkpoint-N/cw-eval/scores.json``, ``cw-eval/final/`` and
``cw-eval/base/scores.json`` in the run's folder), its scores document is its ``scores`` (the base
model's is the listing's ``base_scores``): ``--checkpoint best`` and the export gate read them.
"""

from __future__ import annotations

import json
import os
import re
import sys

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
COMPLETE_MARKER = ".cw-complete"  # cw_fault.COMPLETE_MARKER: every rank finished the checkpoint
#: The largest config file read (a model's config.json is a few KB).
_CONFIG_MAX = 1 << 20
#: Where the evaluation writes a model's scores, in its folder (the final and base models': in the run's).
SCORES = os.path.join("cw-eval", "scores.json")
_WEIGHTS = re.compile(r"^(model.*\.safetensors|pytorch_model.*\.bin|adapter_model\.(safetensors|bin))$")


def _size_and_time(folder: str, recursive: bool = True) -> tuple[int, float, int]:
    size, newest, count = 0, 0.0, 0
    for root, folders, names in os.walk(folder):
        if not recursive:
            folders.clear()  # the final model: the files beside its checkpoints, not theirs
        for name in names:
            try:
                info = os.stat(os.path.join(root, name))
            except OSError:
                continue
            size, newest, count = size + info.st_size, max(newest, info.st_mtime), count + 1
    return size, newest, count


def _metrics(state: dict, step: int) -> dict:
    found: dict = {}
    history = state.get("log_history")
    for entry in history if isinstance(history, list) else []:
        if isinstance(entry, dict) and entry.get("step") == step:
            found.update({k: v for k, v in entry.items() if isinstance(v, (int, float)) and k not in ("step", "epoch")})
    return found


def _json(path: str) -> dict:
    """A small JSON object file (a model's config); anything else (a device, a huge or broken file) is {}."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > _CONFIG_MAX:
            return {}
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _model_facts(folder: str) -> dict:
    """What a server needs to know of the model in ``folder``: an adapter's base and rank, the
    attention heads and the longest context (from the adapter's base where it has no config)."""
    facts: dict = {}
    adapter = _json(os.path.join(folder, "adapter_config.json"))
    config = _json(os.path.join(folder, "config.json"))
    if adapter:
        base = adapter.get("base_model_name_or_path")
        facts["base"] = base if isinstance(base, str) and base else None
        facts["lora_rank"] = _positive(adapter.get("r"))
        if not config and facts["base"] and os.path.isabs(facts["base"]):
            config = _json(os.path.join(facts["base"], "config.json"))
    nested = config.get("text_config")  # a multimodal model's language part
    text: dict = nested if isinstance(nested, dict) else {}
    for key, name in (("heads", "num_attention_heads"), ("kv_heads", "num_key_value_heads"),
                      ("max_positions", "max_position_embeddings")):  # fmt: skip
        facts[key] = _positive(config.get(name)) or _positive(text.get(name))
    return facts


def _scores(path: str) -> dict | None:
    """A scores document the evaluation wrote, or None (none there, or not a JSON object)."""
    return _json(path) or None


def _entry(folder: str, kind: str, step: int | None, complete: bool, metrics: dict) -> dict:
    size, newest, count = _size_and_time(folder, recursive=kind != "final")
    adapter = os.path.isfile(os.path.join(folder, "adapter_config.json"))
    scores = os.path.join(folder, "cw-eval", "final", "scores.json") if kind == "final" else os.path.join(folder, SCORES)
    return {"kind": kind, "path": folder, "step": step, "complete": complete, "size": size, "files": count,
            "modified": newest, "adapter": adapter, "model": _model_facts(folder), "metrics": metrics,
            "scores": _scores(scores)}  # fmt: skip


def list_artifacts(run_dir: str) -> dict:
    """Everything worth downloading in ``run_dir``."""
    if not os.path.isdir(run_dir):
        return {"run_dir": run_dir, "exists": False, "artifacts": []}
    artifacts: list[dict] = []
    last_state: dict = {}
    names = sorted(os.listdir(run_dir), key=lambda n: int(m.group(1)) if (m := _CHECKPOINT.match(n)) else -1)
    # cw_fault marks each checkpoint all ranks finished (cw_entrypoint's rule): where any is marked, all must be.
    marked = any(_CHECKPOINT.match(n) and os.path.isfile(os.path.join(run_dir, n, COMPLETE_MARKER)) for n in names)
    for name in names:
        match = _CHECKPOINT.match(name)
        folder = os.path.join(run_dir, name)
        if not (match and os.path.isdir(folder)):
            continue
        try:
            with open(os.path.join(folder, "trainer_state.json"), encoding="utf-8") as handle:
                state = json.load(handle)
        except (OSError, ValueError, RecursionError):  # one unreadable checkpoint never hides the others
            state = None
        complete = isinstance(state, dict) and (not marked or os.path.isfile(os.path.join(folder, COMPLETE_MARKER)))
        state = state if complete else {}
        last_state = state or last_state
        artifacts.append(_entry(folder, "checkpoint", int(match.group(1)), complete, _metrics(state, int(match.group(1)))))
    if any(_WEIGHTS.match(name) for name in os.listdir(run_dir)):
        step = last_state.get("global_step")
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
        artifacts.append(_entry(run_dir, "final", step, True, _metrics(last_state, step) if step else {}))
    exported = os.path.join(run_dir, "exported")
    for name in sorted(os.listdir(exported)) if os.path.isdir(exported) else []:
        if not name.startswith("."):  # a partial export is not one
            artifacts.append(_entry(os.path.join(exported, name), "export", None, True, {}))
    base = _scores(os.path.join(run_dir, "cw-eval", "base", "scores.json"))
    return {"run_dir": run_dir, "exists": True, "artifacts": artifacts, "base_scores": base}


if __name__ == "__main__":
    print(json.dumps(list_artifacts(sys.argv[1] if len(sys.argv) > 1 else ".")))
