"""While a helper pod (reader, server) waits, cw says why at once when another pod holds its volume:
the kubelet's Multi-Attach event of a ReadWriteOnce volume still attached to another node (which
kwok's fake kubelet cannot produce, so a recorded Kube answers here; the scheduler's words for a
ReadWriteOncePod volume are proven on the real API server in tests/cluster/
test_helper_pods_on_the_cluster.py); any other wait ends at its timeout with the reason."""

from __future__ import annotations

import time

import pytest

from cw_cli.after_training import helper_pods
from cw_cli.errors import Conflict, WaitTimeout

MULTI_ATTACH = ('Multi-Attach error for volume "pvc-1" Volume is already used by pod(s) arts-trainer-0-x7k2p')


class _Kube:
    """Answers `get` with a pod stuck in ContainerCreating on node-b, `list` with its events."""

    def __init__(self, events: list[dict], scheduled: bool = True) -> None:
        self.events, self.scheduled, self.event_reads = events, scheduled, 0

    def get(self, kind: str, name: str) -> dict:
        assert kind == "Pod"
        spec = {"nodeName": "node-b"} if self.scheduled else {}
        conditions = [] if self.scheduled else [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                 "message": "0/3 nodes are available: 3 Insufficient cpu."}]  # fmt: skip
        return {"metadata": {"name": name}, "spec": {**spec, "containers": []},
                "status": {"phase": "Pending", "conditions": conditions}}  # fmt: skip

    def list(self, kind: str, label_selector: str | None = None, field_selector: str | None = None) -> list[dict]:
        if kind == "Event":
            self.event_reads += 1
            return self.events
        return []


def test_a_volume_attached_elsewhere_is_said_at_once(monkeypatch):
    monkeypatch.setattr(helper_pods, "VOLUME_GRACE_S", 0.2)
    kube = _Kube([{"reason": "FailedAttachVolume", "message": MULTI_ATTACH}])
    started = time.monotonic()
    with pytest.raises(Conflict) as held:
        helper_pods.wait_running(kube, "arts-reader", "ckpts", timeout_s=180, poll_s=0.05)  # type: ignore[arg-type]
    assert time.monotonic() - started < 5
    assert "cannot mount the run's volume ckpts: another node has it attached" in held.value.message
    assert "arts-trainer-0-x7k2p" in held.value.message and "ReadWriteOnce" in (held.value.hint or "")


def test_other_waits_end_at_the_timeout_with_the_reason_and_read_events_once(monkeypatch):
    monkeypatch.setattr(helper_pods, "VOLUME_GRACE_S", 0.0)
    kube = _Kube([{"reason": "FailedMount", "message": "MountVolume.SetUp failed: timed out"}])
    with pytest.raises(WaitTimeout, match="is not Running after 0 s"):
        helper_pods.wait_running(kube, "arts-reader", "ckpts", timeout_s=0.3, poll_s=0.05)  # type: ignore[arg-type]
    assert kube.event_reads == 1  # events are read from etcd: once, not on every poll

    unschedulable = _Kube([], scheduled=False)
    with pytest.raises(WaitTimeout, match="cannot be scheduled: 0/3 nodes are available: 3 Insufficient cpu"):
        helper_pods.wait_running(unschedulable, "arts-serve", "ckpts", timeout_s=0.2, what="serve pod", ready=True,  # type: ignore[arg-type]
                                 poll_s=0.05)  # fmt: skip
