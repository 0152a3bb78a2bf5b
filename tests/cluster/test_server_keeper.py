"""A run's servers stop themselves once its trainer has finished, with cw no longer running.

KWOK runs no containers, so the keeper container of a server pod never executes here. Each test
runs the exact ``cw_keeper.py`` of the run's ConfigMap as a local process instead, with the
environment of the rendered keeper container and a real token of the run's keeper
ServiceAccount (TokenRequest), against the real API server: the Role cw created is what allows,
or refuses, each of its calls.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from test_cw_end_to_end import GRPO_CONFIG, run_cw, write_config

TWO_MINUTES = 120


def keeper_env(api: client.ApiClient, namespace: str, deployment: str, tmp_path: Path) -> dict[str, str]:
    """The keeper container's environment, plus where to reach the API server from here."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    template = apps.read_namespaced_deployment(deployment, namespace).spec.template.spec
    keeper = next(c for c in template.containers if c.name == "keeper")
    token = core.create_namespaced_service_account_token(
        template.service_account_name, namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    (tmp_path / "token").write_text(token)
    return {
        **{e.name: e.value for e in keeper.env},
        "CW_KEEPER_API": api.configuration.host,
        "CW_KEEPER_CA_FILE": api.configuration.ssl_ca_cert,
        "CW_KEEPER_TOKEN_FILE": str(tmp_path / "token"),
        "CW_KEEPER_NAMESPACE": namespace,
        "CW_KEEPER_POLL_S": "1",
        "PATH": os.environ.get("PATH", ""),
    }


def keeper_script(api: client.ApiClient, namespace: str, run: str, tmp_path: Path) -> Path:
    """cw_keeper.py exactly as the run's ConfigMap ships it (with cw_pod_api.py beside it, as mounted)."""
    data = client.CoreV1Api(api).read_namespaced_config_map(f"{run}-config", namespace).data
    (tmp_path / "cw_pod_api.py").write_text(data["cw_pod_api.py"])
    path = tmp_path / "cw_keeper.py"
    path.write_text(data["cw_keeper.py"])
    return path


def start_keeper(script: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(script), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.terminate()  # by its own PID
    out, _ = process.communicate(timeout=30)
    return out


def test_servers_scale_to_zero_once_the_trainer_has_finished_and_the_keeper_may_do_nothing_else(
    kube_api, namespace, cw_env, tmp_path, wait_for
):
    config = write_config(tmp_path, {**GRPO_CONFIG, "services": {"server": {"gpu": 1, "cpu": "4", "memory": "16Gi"}}})
    result = run_cw(cw_env, "trl", "grpo", str(config), "--name", "keep", "-n", namespace, timeout=180)
    assert result.returncode == 0, result.stderr
    batch, apps, core = client.BatchV1Api(kube_api), client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    script = keeper_script(kube_api, namespace, "keep", tmp_path)
    env = keeper_env(kube_api, namespace, "keep-server", tmp_path)
    assert env["CW_TRAINER_JOB"] == "keep-trainer" and env["CW_KEEPER_DEPLOYMENT"] == "keep-server"

    # The keeper's token opens nothing but its Role: no Secrets, no other Deployment.
    context = ssl.create_default_context(cafile=env["CW_KEEPER_CA_FILE"])
    for path in (f"/api/v1/namespaces/{namespace}/secrets", f"/apis/apps/v1/namespaces/{namespace}/deployments"):
        request = urllib.request.Request(env["CW_KEEPER_API"] + path,
                                         headers={"Authorization": f"Bearer {(tmp_path / 'token').read_text()}"})  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, context=context, timeout=10)
        assert refused.value.code == 403

    def job_finished():
        job = batch.read_namespaced_job("keep-trainer", namespace)
        return next((c for c in job.status.conditions or [] if c.type == "Complete" and c.status == "True"), None)

    done = wait_for(job_finished, 90, what="the trainer Job to complete")
    assert apps.read_namespaced_deployment("keep-server", namespace).spec.replicas == 1  # cw is not running now
    keeper = start_keeper(script, env)
    try:
        def servers_gone():
            replicas = apps.read_namespaced_deployment("keep-server", namespace).spec.replicas
            pods = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=server").items
            return replicas == 0 and not pods

        wait_for(servers_gone, TWO_MINUTES, interval=0.5, what="the servers to be gone")
        gone_after = (time.time() - done.last_transition_time.timestamp())
        assert keeper.wait(timeout=30) == 0
    finally:
        log = stop(keeper)
    assert "the trainer Job is Complete: scaling keep-server to 0 replicas" in log
    assert batch.read_namespaced_job("keep-trainer", namespace).status.succeeded == 1  # the record stays
    print(f"\nserver keeper: servers gone {gone_after:.1f} s after the trainer Job completed (poll 1 s)")
    assert gone_after < TWO_MINUTES


def test_a_keeper_leaves_the_servers_of_a_running_trainer_alone(kube_api, namespace, cw_env, tmp_path, wait_for):
    # 16 GPUs on one node never schedule: the trainer stays unfinished for the whole test.
    data = {**GRPO_CONFIG, "gpu": 16, "services": {"server": {"gpu": 1, "cpu": "4", "memory": "16Gi"}}}
    result = run_cw(cw_env, "trl", "grpo", str(write_config(tmp_path, data)), "--name", "busy", "-n", namespace,
                    timeout=180)  # fmt: skip
    assert result.returncode == 0, result.stderr
    script = keeper_script(kube_api, namespace, "busy", tmp_path)
    env = keeper_env(kube_api, namespace, "busy-server", tmp_path)
    once = subprocess.run([sys.executable, str(script), "--once"], env=env, capture_output=True, text=True, timeout=60)
    assert once.returncode == 3, once.stderr  # checked the Job (allowed), found it running
    assert client.AppsV1Api(kube_api).read_namespaced_deployment("busy-server", namespace).spec.replicas == 1


def test_services_alone_live_for_their_ttl_shown_in_status(kube_api, namespace, cw_env, tmp_path, wait_for):
    config = write_config(tmp_path, {**GRPO_CONFIG, "services": {"server": {"gpu": 1, "cpu": "4", "memory": "16Gi"}}})
    refused = run_cw(cw_env, "trl", "grpo", str(config), "--services", "--name", "svc", "-n", namespace)
    assert refused.returncode == 2 and "--ttl" in refused.stderr
    result = run_cw(cw_env, "trl", "grpo", str(config), "--services", "--ttl", "3s", "--name", "svc", "-n", namespace,
                    "--wait", timeout=180)  # fmt: skip
    assert result.returncode == 0, result.stderr
    status = run_cw(cw_env, "status", "svc", "-n", namespace)
    assert "stops at" in status.stdout and "(--ttl 3 s)" in status.stdout, status.stdout
    apps = client.AppsV1Api(kube_api)
    script = keeper_script(kube_api, namespace, "svc", tmp_path)
    env = keeper_env(kube_api, namespace, "svc-server", tmp_path)
    assert "CW_TRAINER_JOB" not in env and env["CW_LIFETIME_S"] == "3"
    keeper = start_keeper(script, env)
    try:
        wait_for(lambda: apps.read_namespaced_deployment("svc-server", namespace).spec.replicas == 0, 60,
                 what="the servers' lifetime to end")  # fmt: skip
    finally:
        log = stop(keeper)
    assert "its lifetime of 3 s is over" in log, log
