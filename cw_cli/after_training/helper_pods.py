"""Where the after-training helper pods may run, and why one does not start, in plain words.

A reader mounts the run's checkpoint volume. A ReadWriteOnce volume is attached to one node at a
time: while a pod (the trainer, still running) has it mounted there, a reader on another node
would wait for an attachment that never comes, so the reader goes to that node (it asks for no
GPU, and takes that pod's tolerations so a tainted GPU node admits it). A ReadWriteOncePod volume
admits no second pod at all: cw says so before creating anything. And while a helper pod waits,
cw reads why (the scheduler's condition, a volume's attach or mount events) and says so at once
when it cannot start, instead of waiting out its timeout.
"""

from __future__ import annotations

import time
from typing import Any

from cw_cli.client.connection import Kube
from cw_cli.errors import Conflict, Forbidden, WaitTimeout
from cw_cli.k8s.explanations import explain_pending
from cw_cli.render.helper_pods import ReaderPlacement

#: Seconds a scheduled helper pod may wait for its volume before cw reads the pod's events.
VOLUME_GRACE_S = 10.0
#: Words of the scheduler and of the kubelet's volume events that mean "another pod holds the volume".
_HELD_ELSEWHERE = ("readwriteoncepod", "multi-attach", "already used by", "already in use", "in-use by another pod")


def _holders(kube: Kube, claim: str) -> list[dict[str, Any]]:
    """Running pods of the namespace that mount ``claim``."""
    try:
        pods = kube.list("Pod", field_selector="status.phase=Running")
    except Forbidden:  # listing pods is in every documented Role; without it, place as if free
        return []
    return [
        pod for pod in pods
        if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in pod["spec"].get("volumes") or [])
    ]  # fmt: skip


def reader_placement(kube: Kube, claim: str, volume: dict[str, Any] | None = None) -> ReaderPlacement:
    """Where a reader of ``claim`` may run: beside the running pod that has a ReadWriteOnce volume
    attached, else anywhere.

    Raises:
        Conflict: The volume is ReadWriteOncePod and a running pod has it.
    """
    volume = volume if volume is not None else kube.get("PersistentVolumeClaim", claim)
    modes = set(((volume or {}).get("spec") or {}).get("accessModes") or [])
    if not modes or modes & {"ReadWriteMany", "ReadOnlyMany"}:
        return ReaderPlacement()
    holders = _holders(kube, claim)
    if not holders:
        return ReaderPlacement()
    holder = holders[0]
    name = holder["metadata"]["name"]
    if "ReadWriteOncePod" in modes:
        raise Conflict(f"the run's volume {claim} is ReadWriteOncePod and pod {name} is using it: "
                       "no second pod may mount it until that pod ends",
                       hint="wait until the run ends (cw status), or give runs a ReadWriteMany volume")  # fmt: skip
    return ReaderPlacement(node=holder["spec"].get("nodeName"), tolerations=holder["spec"].get("tolerations") or [])


def _volume_events(kube: Kube, name: str) -> str | None:
    """The newest attach/mount failure of a pod's volumes that says another pod holds it."""
    try:
        events = kube.list("Event", field_selector=f"involvedObject.name={name},involvedObject.kind=Pod")
    except Forbidden:
        return None
    for event in reversed(events):
        message = " ".join(str(event.get("message") or "").split())
        if event.get("reason") in ("FailedAttachVolume", "FailedMount") and _held_elsewhere(message):
            return message
    return None


def _held_elsewhere(message: str) -> bool:
    lowered = message.lower()
    return any(words in lowered for words in _HELD_ELSEWHERE)


def _unschedulable(pod: dict[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return " ".join(str(condition.get("message") or "").split()) or None
    return None


def _ready(status: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def wait_running(
    kube: Kube, name: str, claim: str, timeout_s: float, what: str = "reader pod", ready: bool = False,
    poll_s: float = 0.5,
) -> None:  # fmt: skip
    """Block until the helper pod runs (or, with ``ready``, is Ready); say why at once when its
    volume is held by another pod.

    Raises:
        Conflict: Another pod holds the volume (ReadWriteOncePod, or a ReadWriteOnce volume
            attached to another node): the scheduler's or the kubelet's words, in one line.
        WaitTimeout: Not running after ``timeout_s`` (with the reason it waits), or it ended.
    """
    started = time.monotonic()
    volume_checked = False
    goal = "Ready" if ready else "Running"
    while True:
        pod = kube.get("Pod", name)
        status = (pod or {}).get("status") or {}
        phase = status.get("phase")
        if (ready and _ready(status)) or (not ready and phase == "Running"):
            return
        if pod is None or phase in ("Succeeded", "Failed"):
            raise WaitTimeout(f"the {what} {name} is {phase or 'gone'}, not {goal}",
                              hint=f"kubectl describe pod {name}; kubectl logs {name}")  # fmt: skip
        waited = time.monotonic() - started
        message = _unschedulable(pod)
        if message and _held_elsewhere(message):
            raise Conflict(f"the {what} {name} cannot start: another pod is using the run's volume {claim} "
                           f"(the scheduler: {message[:200]})",
                           hint="wait until the run ends (cw status), or give runs a ReadWriteMany volume")  # fmt: skip
        if not message and (pod.get("spec") or {}).get("nodeName") and waited > VOLUME_GRACE_S and not volume_checked:
            volume_checked = True  # events are read from etcd: once, not on every poll
            held = _volume_events(kube, name)
            if held:
                raise Conflict(f"the {what} {name} cannot mount the run's volume {claim}: another node has it "
                               f"attached ({held[:200]})",
                               hint="a ReadWriteOnce volume follows one node: wait until the run ends (cw status), "
                                    "or give runs a ReadWriteMany volume")  # fmt: skip
        if waited > timeout_s:
            why = explain_pending(pod, kube) if phase == "Pending" else "running, not Ready yet"
            raise WaitTimeout(f"the {what} {name} is not {goal} after {int(timeout_s)} s: {why}",
                              hint=f"kubectl describe pod {name}; kubectl logs {name}")  # fmt: skip
        time.sleep(poll_s)


def create_job_and_its_config_map(kube: Kube, job: dict[str, Any], config_map: dict[str, Any]) -> dict[str, Any]:
    """Create an after-training Job, then its ConfigMap owned by it (deleted with the Job, and
    never left behind by a Job that could not be created). Returns the Job as created."""
    created = kube.create(job)
    config_map["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": created["metadata"]["uid"],
         "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    kube.create(config_map)
    return created
