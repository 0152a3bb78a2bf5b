"""cw_cli.api against the real API server: one Session plans, submits, follows and deletes runs."""

from __future__ import annotations

import pytest
from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG

from cw_cli import api
from cw_cli.errors import Conflict, RunFailed


@pytest.fixture
def session(kube_cluster, namespace):
    return api.Session(context=kube_cluster.context, namespace=namespace, kubeconfig=kube_cluster.kubeconfig)


def test_a_session_submits_waits_reads_and_deletes_a_run(session, kube_api, namespace, tmp_path):
    lines: list[str] = []
    planned = session.plan(SFT_CONFIG, "trl", "sft", name="api-run", gpu=2, base_dir=tmp_path)
    run = session.submit(planned, progress=lines.append)
    assert "created Job api-run-trainer" in lines and run.launch.released
    assert run.wait(timeout=120) == "Succeeded"
    assert run.status().state == "Succeeded"
    assert [view.name for view in session.runs()] == ["api-run"]
    assert any(line for line in run.logs(tail=5))  # read through the API server
    with pytest.raises(Conflict):
        session.submit(session.plan(SFT_CONFIG, "trl", "sft", name="api-run", base_dir=tmp_path))
    deleted = session.run("api-run").delete()
    assert "Job/api-run-trainer" in deleted
    assert not client.BatchV1Api(kube_api).list_namespaced_job(namespace).items or all(
        job.metadata.deletion_timestamp for job in client.BatchV1Api(kube_api).list_namespaced_job(namespace).items
    )


def test_a_failed_run_raises_run_failed(session, tmp_path):
    data = {**SFT_CONFIG, "backoff_limit": 0, "annotations": {"kwok.cw/exit-code": "2"}}
    run = session.submit(session.plan(data, "trl", "sft", name="api-fails", gpu=1, base_dir=tmp_path))
    with pytest.raises(RunFailed):
        run.wait(timeout=120)


def test_many_runs_share_one_connection(session, tmp_path):
    kube = session.kube
    for index in range(3):
        session.submit(session.plan(SFT_CONFIG, "trl", "sft", name=f"api-many-{index}", gpu=1, base_dir=tmp_path))
    assert session.kube is kube and len(session.runs()) == 3
