"""Facts of a run read off its trainer on the cluster: its pod template and its output folder on
the checkpoint volume (for `cw export` and `cw artifacts`, which work on what the run left)."""

from __future__ import annotations

import posixpath
from typing import Any

from cw_cli.client.connection import Kube
from cw_cli.errors import NotFound
from cw_cli.frameworks.base import CHECKPOINT_MOUNT
from cw_cli.render.workload import OWNERS


def trainer_of(kube: Kube, run_name: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(kind, owner, the trainer's pod spec) of a run.

    Raises:
        NotFound: No run of that name (or one with servers only).
    """
    for kind, strategy in OWNERS.items():  # a Job run first, the common case
        owner = kube.get(kind, strategy.name(run_name))
        template = strategy.trainer_template(owner) if owner is not None else None
        if owner is not None and template is not None:
            return kind, owner, template
    raise NotFound(f"run {run_name!r} not found in namespace {kube.namespace}: no trainer Job or JobSet of that name",
                   hint="`cw list` shows the runs (one started with --services has no trainer, so no outputs)")  # fmt: skip


def output_dir_of(kube: Kube, run_name: str, working_dir: str) -> str:
    """The trainer's output folder: the mounted config's ``output_dir`` (relative ones start at the
    trainer's working folder, the run's folder on the volume), else that working folder."""
    config_map = kube.get("ConfigMap", f"{run_name}-config")
    data = (config_map or {}).get("data") or {}
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "output_dir" and isinstance(item, str) and item:
                    found.append(item if item.startswith("/") else f"{working_dir.rstrip('/')}/{item}")
                walk(item)

    for key, text in data.items():
        try:
            if key == "config.yaml":
                import yaml

                walk(yaml.safe_load(text))
            elif key == "config.toml":
                import tomllib

                walk(tomllib.loads(text))
        except ValueError:
            continue
    on_volume = [path for path in found if path.startswith(CHECKPOINT_MOUNT + "/")]
    return posixpath.normpath(on_volume[0]) if on_volume else working_dir


def claims_of(pod: dict[str, Any]) -> dict[str, str | None]:
    """The PersistentVolumeClaim of each volume of a pod spec, by volume name (None: not a claim)."""
    return {v["name"]: (v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod.get("volumes") or []}
