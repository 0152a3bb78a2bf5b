"""Which folder of a run's outputs a user means by ``final``, ``latest``, ``best``, a step number or
``export:NAME``, read off the listing cw_artifacts.py gives (for a run on the cluster and for a
``--local`` run alike): `cw download`, `cw serve`, `cw try` choose the same way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from msgspec import Struct

from cw_cli.errors import ConfigError
from cw_cli.render.scores import best_checkpoint


class Source(Struct, frozen=True):
    """A folder of the run's outputs.

    Attributes:
        folder: The folder: relative to the volume's root for a run on the cluster, as listed for
            a ``--local`` run.
        label: How the user named it.
        top: Only the files directly in the folder (the final model sits beside its checkpoints).
    """

    folder: str
    label: str
    top: bool = False


def choose_source(listing: dict[str, Any], which: str) -> Source:
    """The folder ``which`` names: ``final``, ``latest``, ``best`` (the best scored checkpoint,
    render/scores.py), a step number or ``export:NAME``.

    Raises:
        ConfigError: Not there (the message lists what is), a checkpoint still being written, or
            ``best`` of a run without scores.
    """
    items = listing.get("artifacts") or []
    checkpoints = [a for a in items if a["kind"] == "checkpoint"]
    complete = [a for a in checkpoints if a["complete"]]
    there = ", ".join([*(f"checkpoint {a['step']}" for a in complete), *(a["kind"] for a in items if a["kind"] == "final"),
                       *(f"export:{Path(a['path']).name}" for a in items if a["kind"] == "export")]) or "nothing yet"  # fmt: skip
    chosen: dict[str, Any] | None = None
    if which == "final":
        chosen = next((a for a in items if a["kind"] == "final"), None)
    elif which == "latest":
        chosen = complete[-1] if complete else None
    elif which == "best":
        chosen = best_checkpoint(listing)
    elif which.startswith("export:"):
        chosen = next((a for a in items if a["kind"] == "export" and Path(a["path"]).name == which[7:]), None)
    elif re.fullmatch(r"[0-9]{1,11}", which):
        chosen = next((a for a in checkpoints if a["step"] == int(which)), None)
        if chosen is not None and not chosen["complete"]:
            raise ConfigError([f"checkpoint {which} is being written (no trainer_state.json yet): never half a checkpoint"],
                              hint="download --checkpoint latest, or wait until it is complete")  # fmt: skip
    else:
        raise ConfigError([f"--checkpoint {which[:40]!r}: expected final, latest, best, a step number or export:NAME"])
    if chosen is None:
        raise ConfigError([f"the run has no {which} to download; there: {there}"])
    path = str(chosen["path"])
    label = f"checkpoint-{which}" if which.isdecimal() and which.isascii() else which
    if which == "best":
        label = f"checkpoint-{chosen['step']}"
    return Source(folder=path.removeprefix("/checkpoints/") if path.startswith("/") else path, label=label,
                  top=chosen["kind"] == "final")  # fmt: skip
