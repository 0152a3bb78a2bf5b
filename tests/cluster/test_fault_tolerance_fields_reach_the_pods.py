"""`grace_period` and `stall_timeout` reach the trainer pods the cluster itself creates: the Job
controller copies terminationGracePeriodSeconds and CW_STALL_TIMEOUT into the pod (real API server
and controller-manager of the test cluster), so the kubelet gives the ranks that long to save."""

from __future__ import annotations

import pytest
from test_cw_end_to_end import SFT_CONFIG

from cw_cli import api


@pytest.fixture
def session(kube_cluster, namespace):
    return api.Session(context=kube_cluster.context, namespace=namespace, kubeconfig=kube_cluster.kubeconfig)


def test_the_trainer_pod_gets_the_grace_period_and_the_stall_timeout(session, tmp_path, wait_for):
    config = {**SFT_CONFIG, "grace_period": 120, "stall_timeout": 900}
    planned = session.plan(config, "trl", "sft", name="graceful", gpu=1, base_dir=tmp_path)
    session.submit(planned)
    pods = wait_for(lambda: session.kube.list("Pod", "cw-cli.dev/run=graceful"), timeout=60, what="the trainer pod")
    spec = pods[0]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 120
    trainer = next(c for c in spec["containers"] if c["name"] == "trainer")
    assert {e["name"]: e.get("value") for e in trainer["env"]}["CW_STALL_TIMEOUT"] == "900"
    data = session.kube.get("ConfigMap", "graceful-config")["data"]
    assert {"cw_entrypoint.py", "cw_fault.py"} <= set(data)
