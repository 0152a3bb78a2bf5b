"""``run:NAME`` references resolved on the cluster, at launch: the referenced run must have
succeeded, keep its outputs on this run's checkpoint volume and have the model named (its final
model, best evaluated checkpoint, or a step); the reference becomes that model's in-pod path."""

from __future__ import annotations

from pathlib import Path

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
    return f"{CHECKPOINT_MOUNT}/{source.folder}"
