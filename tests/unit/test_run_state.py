"""The plain state of a run, read from its Job's status only."""

from __future__ import annotations

import pytest


def test_job_state_reads_conditions_suspension_and_queue():
    from datetime import datetime, timezone

    from cw_cli.render.workload import JobOwner

    job_state = JobOwner().state

    def job(spec=None, status=None, labels=None):
        return {"metadata": {"labels": labels or {}}, "spec": spec or {}, "status": status or {}}

    assert job_state(job(status={"conditions": [{"type": "Complete", "status": "True"}]})) == "Succeeded"
    assert job_state(job(status={"conditions": [{"type": "Failed", "status": "True"}]})) == "Failed"
    fresh = {"creationTimestamp": "2026-01-01T00:00:00Z"}
    soon, later = datetime(2026, 1, 1, 0, 0, 5, tzinfo=timezone.utc), datetime(2026, 1, 1, 0, 5, tzinfo=timezone.utc)
    suspended = dict(job(spec={"suspend": True}), metadata={"labels": {}, **fresh})
    assert job_state(suspended, now=soon) == "Starting"
    # cw releases its Job within seconds: still suspended minutes later, its launcher died half-way.
    assert job_state(suspended, now=later) == "Half-made (launcher stopped)"
    assert job_state(job(spec={"suspend": True}, labels={"kueue.x-k8s.io/queue-name": "q"})) == "Queued (Kueue)"
    assert job_state(job(status={"active": 1, "ready": 1})) == "Running"
    assert job_state(job(status={"active": 1})) == "Pending"


class _Pods:
    """Just enough of cw_cli.client.connection.Kube for find_pod: a fixed pod list."""

    def __init__(self, pods):
        self.pods = pods

    def list(self, kind, label_selector=None, field_selector=None):
        assert kind == "Pod" and "app.kubernetes.io/component=trainer" in label_selector
        return self.pods


def _pod(name, index=None, created="2026-01-01T00:00:00Z"):
    annotations = {"batch.kubernetes.io/job-completion-index": index} if index is not None else {}
    return {"metadata": {"name": name, "annotations": annotations, "creationTimestamp": created}}


def test_logs_of_a_multi_node_trainer_default_to_rank_0():
    from cw_cli.k8s.queries import find_pod

    pods = [_pod("r-1", "1", "2026-01-01T00:00:09Z"), _pod("r-0", "0", "2026-01-01T00:00:01Z")]
    assert find_pod(_Pods(pods), "r", "trainer", None)["metadata"]["name"] == "r-0"
    assert find_pod(_Pods(pods), "r", "trainer", 1)["metadata"]["name"] == "r-1"
    single = [_pod("old", created="2026-01-01T00:00:01Z"), _pod("new", created="2026-01-01T00:00:05Z")]
    assert find_pod(_Pods(single), "r", "trainer", None)["metadata"]["name"] == "new"


def test_a_crafted_or_empty_run_name_never_widens_the_selector():
    import pytest

    from cw_cli.errors import ConfigError
    from cw_cli.k8s.queries import run_selector

    assert run_selector("my-run") == "app.kubernetes.io/managed-by=cw,cw-cli.dev/run=my-run"
    for bad in ("", "a,b", "x!=y", "A", "a b"):
        with pytest.raises(ConfigError):
            run_selector(bad)


@pytest.mark.parametrize(
    ("job", "may_lack"),
    [
        ({"spec": {}, "status": {}}, True),  # resumed, no pod yet: creation may be refused
        ({"spec": {"suspend": False}, "status": {"failed": 1}}, True),
        ({"spec": {}, "status": {"active": 1}}, False),  # a pod exists: creation works
        ({"spec": {"suspend": True}, "status": {}}, False),  # queued by Kueue: no pods by design
        ({"spec": {}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}, False),
        ({"spec": {}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}, False),
        ({"spec": {}, "status": {"conditions": [{"type": "Failed", "status": "False"}]}}, True),
    ],
)
def test_only_a_resumed_unfinished_job_without_pods_is_asked_whether_its_pods_are_refused(job, may_lack):
    from cw_cli.k8s.explanations import may_lack_pods

    assert may_lack_pods(job) is may_lack
