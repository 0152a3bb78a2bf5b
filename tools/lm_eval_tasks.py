"""Print lm-evaluation-harness's task names and the scores each reports, as JSON (run with an
environment that has lm-eval).

cw checks an `eval:` block's task names and its deciding metric before anything is created, on
the laptop that launches the run, where importing lm-eval and indexing its 14,000 task files
takes a minute. cw ships this list as cw_cli/config/lm_eval_tasks.json.gz instead:
    python tools/lm_eval_tasks.py | gzip -9n > cw_cli/config/lm_eval_tasks.json.gz

For each task: the metrics of its ``metric_list`` (or lm-eval's default metrics for its output
type) and the names of its filters (``none`` without a ``filter_list``), which lm-eval joins into
the keys of its results (``acc,none``, ``exact_match,strict-match``). For each group: its
aggregate metrics. Tags are names only: a tag has no score of its own.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from typing import Any


def _metrics(cfg: dict[str, Any], defaults: dict[str, list[str]]) -> list[str]:
    listed = cfg.get("metric_list")
    if isinstance(listed, list) and listed:
        return sorted({str(m["metric"]) for m in listed if isinstance(m, dict) and isinstance(m.get("metric"), str)})
    return sorted(defaults.get(str(cfg.get("output_type", "generate_until")), []))


def _filters(cfg: dict[str, Any]) -> list[str]:
    listed = cfg.get("filter_list")
    if isinstance(listed, list) and listed:
        return [str(f.get("name", "none")) for f in listed if isinstance(f, dict)]
    return ["none"]


def main() -> int:
    from lm_eval.api.registry import DEFAULT_METRIC_REGISTRY
    from lm_eval.tasks import TaskManager

    manager = TaskManager()
    tasks: dict[str, Any] = {}
    groups: dict[str, list[str]] = {}
    for name, entry in sorted(manager.task_index.items()):
        cfg = entry.cfg if isinstance(entry.cfg, dict) else {}
        kind = str(getattr(entry.kind, "name", entry.kind)).upper()
        if kind == "TAG":
            continue
        if kind == "GROUP":
            aggregate = cfg.get("aggregate_metric_list") or []
            if isinstance(aggregate, dict):
                aggregate = [aggregate]
            groups[name] = sorted({f"{m['metric']},{m.get('filter_list', 'none')}" for m in aggregate
                                   if isinstance(m, dict) and "metric" in m})  # fmt: skip
        else:
            tasks[name] = {"metrics": _metrics(cfg, DEFAULT_METRIC_REGISTRY), "filters": _filters(cfg)}
    json.dump({"lm_eval": importlib.metadata.version("lm_eval"), "tasks": tasks, "groups": groups,
               "tags": sorted(manager.all_tags)}, sys.stdout, separators=(",", ":"), sort_keys=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
