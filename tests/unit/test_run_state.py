"""The plain state of a run, read from its Job's status only."""

from __future__ import annotations


def test_job_state_reads_conditions_suspension_and_queue():
    from cw_cli.k8s.inspect import job_state

    def job(spec=None, status=None, labels=None):
        return {"metadata": {"labels": labels or {}}, "spec": spec or {}, "status": status or {}}

    assert job_state(job(status={"conditions": [{"type": "Complete", "status": "True"}]})) == "Succeeded"
    assert job_state(job(status={"conditions": [{"type": "Failed", "status": "True"}]})) == "Failed"
    assert job_state(job(spec={"suspend": True})) == "Waiting for services"
    assert job_state(job(spec={"suspend": True}, labels={"kueue.x-k8s.io/queue-name": "q"})) == "Queued (Kueue)"
    assert job_state(job(status={"active": 1, "ready": 1})) == "Running"
    assert job_state(job(status={"active": 1})) == "Pending"
