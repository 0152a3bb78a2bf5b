"""Sweeps against the real API server: all runs or none, resumable, on one connection."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw, write_config

from cw_cli import api
from cw_cli.errors import Conflict

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


def test_list_and_delete_act_on_a_whole_sweep(cw_env, kube_api, namespace, tmp_path, wait_for):
    data = {**SFT_CONFIG, "gpu": 1}
    config = str(write_config(tmp_path, data))
    for args in (("--sweep", "seed=1,2", "--name", "mine"), ("--sweep", "seed=3", "--name", "theirs"), ("--name", "single")):
        result = run_cw(cw_env, "trl", "sft", config, *args, "-n", namespace)
        assert result.returncode == 0, result.stderr
    listed = run_cw(cw_env, "list", "--sweep", "mine", "-n", namespace, "-o", "json")
    items = json.loads(listed.stdout)["items"]
    assert sorted(item["name"] for item in items) == ["mine-0", "mine-1"] and {i["sweep"] for i in items} == {"mine"}
    deleted = run_cw(cw_env, "delete", "--sweep", "mine", "-n", namespace)
    assert deleted.returncode == 0 and "deleted the 2 run(s) of sweep mine" in deleted.stderr, deleted.stderr
    wait_for(lambda: _jobs(kube_api, namespace, "mine") == [], 30, what="the sweep's Jobs to go")
    assert _jobs(kube_api, namespace, "theirs") == ["theirs-0-trainer"]  # another sweep is untouched
    left = json.loads(run_cw(cw_env, "list", "-n", namespace, "-o", "json").stdout)["items"]
    assert sorted(item["name"] for item in left) == ["single", "theirs-0"]
    refused = run_cw(cw_env, "delete", "--sweep", "mine,theirs", "-n", namespace)
    assert refused.returncode == 2  # a crafted name never widens the selector


def test_status_links_the_wandb_run(cw_env, kube_api, namespace, tmp_path):
    client.CoreV1Api(kube_api).create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="wandb"), string_data={"WANDB_API_KEY": "x"})
    )
    data = {**SFT_CONFIG, "gpu": 1, "report_to": "wandb", "secrets": {"WANDB_API_KEY": "wandb"},
            "env": {"WANDB_ENTITY": "lab", "WANDB_PROJECT": "sft"}}  # fmt: skip
    result = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, data)), "--name", "tracked", "-n", namespace)
    assert result.returncode == 0, result.stderr
    status = run_cw(cw_env, "status", "tracked", "-n", namespace)
    assert "W&B: https://wandb.ai/lab/sft/runs/tracked" in status.stdout, status.stdout
