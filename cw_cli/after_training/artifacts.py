"""`cw artifacts RUN`: what a run left on its checkpoint volume, read through the API server.

A short-lived reader pod (render/helper_pods.py: a small Python image, no GPU, Pod Security
"restricted") mounts the run's claim read-only (never assuming the volume is mounted here), cw
runs cw_artifacts.py in it by exec, and deletes the pod; the pod ends by itself after
``READER_DEADLINE_S`` should cw be stopped first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from msgspec import Struct

from cw_cli.after_training.helper_pods import reader_placement, wait_running
from cw_cli.client.channels import ExecResult, exec_in_pod
from cw_cli.client.connection import Kube
from cw_cli.errors import ConfigError, CwError, NotFound, WaitTimeout
from cw_cli.frameworks.base import CHECKPOINT_MOUNT
from cw_cli.frameworks.runtime_files import ARTIFACTS_FILE, runtime_file
from cw_cli.k8s.run_facts import claims_of, output_dir_of, trainer_of
from cw_cli.labels import READER, TRAINER
from cw_cli.render.helper_pods import READER_IMAGE, reader_manifest

#: How long cw waits for the reader pod to run.
READER_START_S = 180


def reader_pod(kube: Kube, run_name: str, owner: dict[str, Any], claim: str,
               volume: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The reader pod (render/helper_pods.py): a small image without a GPU, the run's claim read-only
    at /checkpoints, beside the running pod that has a ReadWriteOnce volume attached.

    Raises:
        Conflict: The volume is ReadWriteOncePod and a running pod has it.
    """
    placement = reader_placement(kube, claim, volume)
    image = kube.helper_image(READER, READER_IMAGE)
    return reader_manifest(run_name, owner["metadata"].get("labels") or {}, claim, placement, image=image)


def _wait_running(kube: Kube, name: str, claim: str, timeout_s: float) -> None:
    wait_running(kube, name, claim, timeout_s, what="reader pod")


def _wait_gone(kube: Kube, name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while kube.get("Pod", name) is not None:
        if time.monotonic() > deadline:
            raise WaitTimeout(f"an earlier reader pod {name} is still being deleted after {int(timeout_s)} s")
        time.sleep(0.5)


class Reader(Struct):
    """A running reader pod of a run: its output folder, and commands run in it from the volume's root."""

    kube: Kube
    pod: str
    run_dir: str

    @property
    def relative_run_dir(self) -> str:
        """The run's output folder from the volume's root (the pod's working folder)."""
        return self.run_dir.removeprefix(CHECKPOINT_MOUNT + "/")

    def python(self, script_key: str, *args: str, timeout_s: float = 3600,
               sink: Callable[[bytes], None] | None = None) -> ExecResult:  # fmt: skip
        """Run one of cw's pod-side scripts (by its runtime key) with ``args``."""
        command = ["python3", "-c", runtime_file(script_key), *args]
        return exec_in_pod(self.kube, self.pod, READER, command, timeout_s=timeout_s, sink=sink)


@contextmanager
def reader(kube: Kube, run_name: str) -> Iterator[Reader]:
    """A reader pod of the run for the duration; deleted on the way out, whatever happens.

    Raises:
        NotFound: No such run, or its volume is gone.
        ConfigError: The run kept its outputs on no volume.
        WaitTimeout: The reader pod did not start.
    """
    _, owner, template = trainer_of(kube, run_name)
    pod = template["spec"]
    claims = claims_of(pod)
    claim = claims.get("checkpoints")
    if not claim:
        raise ConfigError([f"run {run_name!r} kept its outputs on no volume (checkpoint_volume: none): nothing there"])
    volume = kube.get("PersistentVolumeClaim", claim)
    if volume is None or volume["metadata"].get("deletionTimestamp"):
        state = "is gone" if volume is None else "is being deleted"
        raise NotFound(f"run {run_name!r}'s checkpoint volume {claim} {state}: its outputs go with it")
    container = next(c for c in pod["containers"] if c["name"] == TRAINER)
    run_dir = output_dir_of(kube, run_name, container.get("workingDir") or f"{CHECKPOINT_MOUNT}/{run_name}")
    manifest = reader_pod(kube, run_name, owner, str(claim), volume)
    name = manifest["metadata"]["name"]
    if kube.delete("Pod", name):  # a reader left by an interrupted cw: gone before its name is reused
        _wait_gone(kube, name, READER_START_S)
    kube.create(manifest)
    try:
        _wait_running(kube, name, str(claim), READER_START_S)
        yield Reader(kube, name, run_dir)
    finally:
        kube.delete("Pod", name)


def read_artifacts(kube: Kube, run_name: str) -> dict[str, Any]:
    """What the run left on its volume (cw_artifacts.py's document), read in a reader pod.

    Raises:
        NotFound: No such run, or its volume is gone.
        ConfigError: The run kept its outputs on no volume.
        WaitTimeout: The reader pod did not start.
    """
    with reader(kube, run_name) as pod:
        done = pod.python(ARTIFACTS_FILE, pod.relative_run_dir, timeout_s=600)
        run_dir = pod.run_dir
    if done.exit_code != 0:
        raise CwError(f"listing {run_dir} failed (exit {done.exit_code}): {done.stderr.strip()[-300:]}")
    try:
        listing = json.loads(done.stdout)
    except ValueError:
        raise CwError(f"the reader pod answered no listing: {done.stdout[:200]!r}") from None
    listing["run_dir"] = run_dir
    return dict(listing)
