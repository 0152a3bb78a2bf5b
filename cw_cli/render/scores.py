"""What a run's evaluation scores decide: which checkpoint is ``best``, and whether the export gate
lets a checkpoint out.

The scores are the evaluation's files (one per evaluated model, see docs/evaluation.md), read by
cw_artifacts.py into the listing: each checkpoint's ``scores``, the final model's, and the base
model's as ``base_scores``. A scores document::

    {"checkpoint": "checkpoint-40", "step": 40, "metric": "gsm8k/exact_match",
     "higher_is_better": true, "scores": {"gsm8k/exact_match": 0.41, ...}, ...}

Pure functions of the listing: no cluster, no printing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from msgspec import Struct

from cw_cli.errors import ConfigError

#: The annotation on a run's owner that records its config's export gate (JSON).
GATE_ANNOTATION = "cw-cli.dev/export-gate"
#: What to do when a run has no scores: run the evaluation.
NO_SCORES_HINT = "evaluate its checkpoints first: cw eval RUN, or add an `eval:` block to the config before launching"


class Gate(Struct, frozen=True):
    """The export gate a run was launched with (its config's ``gate:``).

    Attributes:
        metric: The deciding ``task/metric`` of the scores files.
        max_drop: How much worse than the base model a checkpoint may score on it (absolute).
        higher_is_better: Whether a higher value of ``metric`` is better.
    """

    metric: str
    max_drop: float
    higher_is_better: bool = True


def gate_settings(path: Path, gate: Any, evaluation: Any) -> Gate:
    """The gate a config declares (``gate:``), its metric and direction taken from the ``eval:``
    block where the gate names none.

    Raises:
        ConfigError: No metric in either (naming the file and ``gate.metric``).
    """
    metric = gate.metric or (evaluation.metric if evaluation is not None else None)
    if not metric:
        raise ConfigError([f"{path}: gate.metric: the gate needs the task/metric it compares, and the config has no `eval:` "
                           "block to take it from"], hint="gate: {metric: gsm8k/exact_match, max_drop: 0.02}")  # fmt: skip
    higher = gate.higher_is_better
    if higher is None:
        higher = evaluation.higher_is_better if evaluation is not None and metric == evaluation.metric else True
    return Gate(str(metric), float(gate.max_drop), bool(higher))


def record_gate(owner: dict[str, Any], metric: str, max_drop: float, higher_is_better: bool) -> None:
    """Record the export gate on the run's owner manifest (an annotation: `cw export` reads it)."""
    text = json.dumps({"metric": metric, "max_drop": max_drop, "higher_is_better": higher_is_better}, sort_keys=True)
    metadata = owner["metadata"]
    metadata["annotations"] = {**(metadata.get("annotations") or {}), GATE_ANNOTATION: text}


def gate_of(owner: dict[str, Any]) -> Gate | None:
    """The export gate recorded on a run's owner, or None (none declared, or not readable as one)."""
    text = ((owner.get("metadata") or {}).get("annotations") or {}).get(GATE_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
        gate = Gate(str(value["metric"]), float(value["max_drop"]), value.get("higher_is_better", True) is not False)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    # A margin that compares as nothing (NaN, infinite, negative) is no gate cw recorded.
    return gate if math.isfinite(gate.max_drop) and gate.max_drop >= 0 else None


def _value(scores: Any, metric: str) -> float | None:
    """``metric``'s value in a scores document, or None where it has none (or not a number)."""
    if not isinstance(scores, dict) or not isinstance(scores.get("scores"), dict):
        return None
    value = scores["scores"].get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def best_checkpoint(listing: dict[str, Any]) -> dict[str, Any]:
    """The complete checkpoint whose scores are best on their deciding metric.

    The deciding metric (and its direction) is the newest scored checkpoint's ``metric``; only
    checkpoints scored on it compete. A tie goes to the earlier step.

    Raises:
        ConfigError: No checkpoint has scores (the message says how to get them).
    """
    listed = listing.get("artifacts")
    items = [a for a in listed if isinstance(a, dict)] if isinstance(listed, list) else []
    # Only a checkpoint with a step can be named (`checkpoint-N`); a listing is read from a pod.
    scored = [a for a in items if a.get("kind") == "checkpoint" and a.get("complete") and isinstance(a.get("scores"), dict)
              and isinstance(a.get("step"), int) and not isinstance(a.get("step"), bool)]  # fmt: skip
    deciding = next((a["scores"] for a in reversed(scored) if isinstance(a["scores"].get("metric"), str)), None)
    if deciding is None:
        run_dir = listing.get("run_dir", "the run's folder")
        raise ConfigError([f"--checkpoint best: no checkpoint in {run_dir} has evaluation scores (checkpoint-N/cw-eval/scores.json)"],
                          hint=NO_SCORES_HINT)  # fmt: skip
    metric, higher = str(deciding["metric"]), deciding.get("higher_is_better", True) is not False
    candidates = [(value, a) for a in scored if (value := _value(a["scores"], metric)) is not None]
    if not candidates:
        raise ConfigError([f"--checkpoint best: no checkpoint has a number for {metric}"], hint=NO_SCORES_HINT)
    if higher:
        return max(candidates, key=lambda pair: (pair[0], -int(pair[1]["step"])))[1]
    return min(candidates, key=lambda pair: (pair[0], int(pair[1]["step"])))[1]


def gate_refusal(gate: Gate, chosen: dict[str, Any], base_scores: Any) -> str | None:
    """Why the gate refuses ``chosen`` (an artifact of the listing), or None when it lets it out.

    A checkpoint passes when it scores no worse than the base model by more than ``max_drop`` on
    ``gate.metric``. Without a score for either, the gate cannot judge and refuses (the
    message says which is missing).
    """
    label = _label(chosen)
    mine, base = _value(chosen.get("scores"), gate.metric), _value(base_scores, gate.metric)
    compares = f"the export gate compares {gate.metric} with the base model's"
    if base is None:
        return f"{compares}, and the run has no base model score for it (cw-eval/base/scores.json)"
    if mine is None:
        return f"{compares}, and {label} has no score for it (cw-eval/scores.json)"
    drop = base - mine if gate.higher_is_better else mine - base
    if drop > gate.max_drop + 1e-12:
        return (f"{label} scores {gate.metric} {mine:.4g}, worse than the base model's {base:.4g} by {drop:.4g}: "
                f"more than the gate's max_drop {gate.max_drop:g}")  # fmt: skip
    return None


def _label(artifact: dict[str, Any]) -> str:
    if artifact.get("kind") == "checkpoint":
        return f"checkpoint-{artifact.get('step')}"
    return str(artifact.get("kind", "the model"))
