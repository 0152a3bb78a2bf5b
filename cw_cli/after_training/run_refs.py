"""``run:NAME`` references resolved on the cluster, at launch: the referenced run must have
succeeded, keep its outputs on this run's checkpoint volume and have the model named (its final
model, best evaluated checkpoint, or a step); the reference becomes that model's in-pod path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli.after_training.artifacts import read_artifacts
from cw_cli.client.connection import Kube
from cw_cli.errors import ConfigError, NotFound
from cw_cli.frameworks.base import CHECKPOINT_MOUNT
from cw_cli.k8s.run_facts import claims_of, output_dir_of, trainer_of
from cw_cli.labels import TRAINER
from cw_cli.render.artifact_choice import choose_source
from cw_cli.render.run_refs import RunRef, check_finished, check_volume
from cw_cli.render.workload import owner_kind


def resolve_ref(kube: Kube, path: Path, ref: RunRef, volume: str | None, *, look: bool = True) -> str:
    """The in-pod path of the model ``ref`` names (``/checkpoints/<folder>``).

    Args:
        path: The config file (messages name it).
        ref: The reference.
        volume: This run's checkpoint volume.
        look: Read the run's folder in a reader pod (a launch); False (a dry run, which creates
            nothing) checks the run only and names the folder the choice would be in.

    Raises:
        ConfigError: No such run, not succeeded, another volume, or no such model (the message
            names the file, the key and what the run has).
    """
    try:
        kind, owner, template = trainer_of(kube, ref.run)
    except NotFound:
        raise ConfigError([f"{path}: {ref.key}: {ref.text}: no run {ref.run!r} in namespace {kube.namespace}"],
                          hint="`cw list` shows the runs; a run started with --services has no model") from None  # fmt: skip
    check_finished(path, ref, owner_kind(kind).state(owner))
    check_volume(path, ref, claims_of(template["spec"]).get("checkpoints"), volume)
    if not look:
        container = next(c for c in template["spec"]["containers"] if c["name"] == TRAINER)
        run_dir = output_dir_of(kube, ref.run, container.get("workingDir") or f"{CHECKPOINT_MOUNT}/{ref.run}")
        return run_dir if ref.which == "final" else f"{run_dir}/checkpoint-<{ref.which}>"
    listing = read_artifacts(kube, ref.run)
    try:
        source = choose_source(listing, ref.which)
    except ConfigError as exc:
        raise ConfigError([f"{path}: {ref.key}: {ref.text}: {issue.replace(' to download', '')}" for issue in exc.issues],
                          hint=exc.hint or f"`cw artifacts {ref.run}` lists what it has") from None  # fmt: skip
    if _is_adapter(listing, source.folder):
        return _merged_model(path, ref, listing, source.label)
    return f"{CHECKPOINT_MOUNT}/{source.folder}"


def _is_adapter(listing: dict[str, Any], folder: str) -> bool:
    entry = next((a for a in listing.get("artifacts") or []
                  if str(a["path"]).removeprefix(CHECKPOINT_MOUNT + "/") == folder), None)  # fmt: skip
    return bool(entry and entry.get("adapter"))


def _merged_model(path: Path, ref: RunRef, listing: dict[str, Any], label: str) -> str:
    """The merged export of a LoRA adapter ``ref`` names: the frameworks start from a whole model
    (TRL's and Axolotl's loaders read the folder's config.json, which an adapter lacks).

    Raises:
        ConfigError: The adapter has no merged export yet (the hint is the command that makes it).
    """
    merged = f"{label}-merged"
    try:
        return f"{CHECKPOINT_MOUNT}/{choose_source(listing, f'export:{merged}').folder}"
    except ConfigError:
        step = "" if label == "final" else f" --checkpoint {label.removeprefix('checkpoint-')}"
        raise ConfigError([f"{path}: {ref.key}: {ref.text}: run {ref.run!r} left a LoRA adapter there, and a run starts "
                           "from a whole model, which it has no merged export of yet"],
                          hint=f"merge it first: cw export {ref.run}{step} --merge --wait (then launch again: "
                               f"the reference takes exported/{merged})") from None  # fmt: skip
