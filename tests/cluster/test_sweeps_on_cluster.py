"""Sweeps against the real API server: all runs or none, resumable, on one connection."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from cw_cli import api
from cw_cli.errors import Conflict
from test_cw_end_to_end import SFT_CONFIG, run_cw, write_config

SWEEP_LABEL = "cw-cli.dev/sweep"


@pytest.fixture
def session(kube_cluster, namespace):
    return api.Session(context=kube_cluster.context, namespace=namespace, kubeconfig=kube_cluster.kubeconfig)


def _jobs(kube_api, namespace: str, sweep: str) -> list[str]:
    items = client.BatchV1Api(kube_api).list_namespaced_job(namespace, label_selector=f"{SWEEP_LABEL}={sweep}").items
    return sorted(job.metadata.name for job in items if job.metadata.deletion_timestamp is None)


def test_a_sweep_creates_every_run_with_its_label(session, kube_api, namespace, tmp_path):
    planned = session.plan_sweep(SFT_CONFIG, "trl", "sft", sweep=["learning_rate=1e-5,2e-5", "seed=1,2"], name="grid",
                                 gpu=1, base_dir=tmp_path)  # fmt: skip
    runs = session.submit_sweep(planned)
    assert [run.name for run in runs] == ["grid-0", "grid-1", "grid-2", "grid-3"]
    assert _jobs(kube_api, namespace, "grid") == [f"grid-{i}-trainer" for i in range(4)]


def test_a_failure_halfway_removes_what_the_sweep_created(session, kube_api, namespace, tmp_path):
    # Run 2 of the sweep exists already (another launch took the name): the sweep stops there.
    session.submit(session.plan(SFT_CONFIG, "trl", "sft", name="half-2", gpu=1, base_dir=tmp_path))
    planned = session.plan_sweep(SFT_CONFIG, "trl", "sft", sweep=["seed=1,2,3,4"], name="half", gpu=1, base_dir=tmp_path)
    with pytest.raises(Conflict) as caught:
        session.submit_sweep(planned)
    assert "removed the sweep's" in caught.value.hint and "run(s) it had created" in caught.value.hint
    core = client.CoreV1Api(kube_api)
    left = sorted(cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items
                  if cm.metadata.name.startswith("half-") and cm.metadata.deletion_timestamp is None)  # fmt: skip
    assert left == ["half-2-config"]  # only the other launch's run is left, untouched


def test_resume_keeps_what_exists_and_creates_the_rest(session, kube_api, namespace, tmp_path):
    session.submit(session.plan(SFT_CONFIG, "trl", "sft", name="again-1", gpu=1, base_dir=tmp_path))
    planned = session.plan_sweep(SFT_CONFIG, "trl", "sft", sweep=["seed=1,2,3"], name="again", gpu=1, base_dir=tmp_path)
    runs = session.submit_sweep(planned, resume=True)
    assert [run.name for run in runs] == ["again-0", "again-1", "again-2"]
    # again-1 was not this sweep's, so it carries no sweep label; the two created ones do.
    assert _jobs(kube_api, namespace, "again") == ["again-0-trainer", "again-2-trainer"]


def test_the_cli_submits_a_sweep_from_the_configs_block(cw_env, kube_api, namespace, tmp_path):
    data = {**SFT_CONFIG, "gpu": 1, "sweep": {"grid": {"learning_rate": [1.0e-5, 2.0e-5]}, "variants": [{"seed": 7}]}}
    started = time.monotonic()
    result = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, data)), "--name", "cli-sweep", "-n", namespace)
    assert result.returncode == 0, result.stderr
    assert "sweep cli-sweep: 3 runs" in result.stderr and "[3/3] created cli-sweep-2" in result.stderr
    assert _jobs(kube_api, namespace, "cli-sweep") == [f"cli-sweep-{i}-trainer" for i in range(3)]
    print(f"\n3-run sweep through the CLI in {time.monotonic() - started:.1f} s")
