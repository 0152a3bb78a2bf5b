"""Each checkpoint is evaluated while training goes on, at a lower priority than training, proven
against a real API server.

A run launched (under the documented launch Role) with an `eval:` block gets a native sidecar in
its trainer pod that runs cw_eval_watch.py with the run's own `<run>-eval` ServiceAccount. KWOK
runs no containers, so the test runs the exact cw_eval_watch.py of the run's ConfigMap as a local
process, with the sidecar's environment (its folder mapped to a local one standing in for the
volume) and a real token of that ServiceAccount (TokenRequest): the Role cw created is what allows
each call. One evaluation Job is created per complete checkpoint, none for one still being written;
its pod gets the `cw-eval` PriorityClass's priority, below the trainer pod's; a second look
creates nothing more; once the trainer recorded a successful end, the final model's Job too; the
token can do nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, create_bound_volumes, run_cw, write_config

EVAL = {"tasks": ["hellaswag"], "metric": "hellaswag/acc_norm", "limit": 20, "gpu": 0}
KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "output_dir": "outputs/sft", "gpu": 1, "eval": EVAL}


def _checkpoints(run_dir: Path) -> None:
    for step, marked in ((5, True), (10, True), (15, False)):  # 15: its ranks are still writing it
        folder = run_dir / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        if marked:
            (folder / ".cw-complete").write_text("")


def _watch(kube_api, namespace: str, script: Path, sidecar, local_run_dir: Path, token: Path) -> str:
    env = {**{e.name: e.value for e in sidecar.env}, "CW_EVAL_RUN_DIR": str(local_run_dir),
           "CW_EVAL_API": kube_api.configuration.host, "CW_EVAL_CA_FILE": kube_api.configuration.ssl_ca_cert,
           "CW_EVAL_TOKEN_FILE": str(token), "CW_EVAL_NAMESPACE": namespace, "PATH": os.environ.get("PATH", "")}  # fmt: skip
    env["CW_EVAL_JOB_FILE"] = str(script.parent / "cw-eval-job.json")
    env["CW_EVAL_FINAL_JOB_FILE"] = str(script.parent / "cw-eval-final-job.json")
    env["CW_EVAL_FINISHED_FILE"] = str(local_run_dir.parent.parent / ".cw" / "finished.json")  # the trainer's working folder
    done = subprocess.run([sys.executable, str(script), "--once"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_one_lower_priority_evaluation_job_per_complete_checkpoint(kube_api, namespace, as_documented_roles, tmp_path, wait_for):
    # What docs/evaluation.md asks a cluster admin to apply once; cw's test cluster applies it when it starts.
    shipped = client.SchedulingV1Api(kube_api).read_priority_class("cw-eval")
    assert shipped.value == -10 and shipped.preemption_policy == "Never"
    launcher = as_documented_roles("read-only", "launch")
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "evw", "-n", namespace, timeout=180)
    assert launched.returncode == 0, launched.stderr
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    trainer = batch.read_namespaced_job("evw-trainer", namespace).spec.template.spec
    sidecar = next(c for c in trainer.init_containers if c.name == "eval-watch")
    assert sidecar.restart_policy == "Always" and trainer.service_account_name == "evw-eval"
    assert [m.mount_path for m in sidecar.volume_mounts] == ["/etc/cw", "/checkpoints", "/var/run/secrets/kubernetes.io/serviceaccount"]
    assert all(m.mount_path != "/var/run/secrets/kubernetes.io/serviceaccount" for m in trainer.containers[0].volume_mounts)
    data = core.read_namespaced_config_map("evw-config", namespace).data
    for key in ("cw_eval_watch.py", "cw_pod_api.py", "cw-eval-job.json", "cw-eval-final-job.json", "cw_eval.py"):
        (tmp_path / key).write_text(data[key])
    token = tmp_path / "token"
    token.write_text(core.create_namespaced_service_account_token(
        "evw-eval", namespace, {"spec": {"expirationSeconds": 600}}).status.token)  # fmt: skip
    run_dir = tmp_path / "volume" / "evw" / "outputs" / "sft"
    _checkpoints(run_dir)

    said = _watch(kube_api, namespace, tmp_path / "cw_eval_watch.py", sidecar, run_dir, token)
    assert "checkpoint-5: created evaluation Job evw-eval-5" in said and "checkpoint-15" not in said
    jobs = sorted(j.metadata.name for j in batch.list_namespaced_job(namespace, label_selector="app.kubernetes.io/component=eval").items)
    assert jobs == ["evw-eval-10", "evw-eval-5"]
    command = batch.read_namespaced_job("evw-eval-10", namespace).spec.template.spec.containers[0].command
    assert command[command.index("--model") + 1] == "/checkpoints/evw/outputs/sft/checkpoint-10"
    assert command[command.index("--step") + 1] == "10"

    def pods(selector: str):
        return core.list_namespaced_pod(namespace, label_selector=selector).items

    wait_for(lambda: pods("job-name=evw-eval-5") and pods("job-name=evw-trainer"), timeout=60)
    evaluation, training = pods("job-name=evw-eval-5")[0].spec, pods("job-name=evw-trainer")[0].spec
    assert evaluation.priority_class_name == "cw-eval" and evaluation.priority == -10
    assert evaluation.priority < (training.priority or 0)

    again = _watch(kube_api, namespace, tmp_path / "cw_eval_watch.py", sidecar, run_dir, token)
    assert "found evaluation Job evw-eval-5" in again  # exists already: nothing new, no error
    assert len(batch.list_namespaced_job(namespace, label_selector="app.kubernetes.io/component=eval").items) == 2

    # The trainer ended well (cw_entrypoint's record) with its model at the top: the last look scores it too.
    (run_dir / "config.json").write_text("{}")
    (run_dir.parent.parent / ".cw").mkdir()
    (run_dir.parent.parent / ".cw" / "finished.json").write_text('{"exit_code": 0}')
    final = _watch(kube_api, namespace, tmp_path / "cw_eval_watch.py", sidecar, run_dir, token)
    assert "final model: created evaluation Job evw-eval-final" in final, final
    command = batch.read_namespaced_job("evw-eval-final", namespace).spec.template.spec.containers[0].command
    assert command[command.index("--model") + 1] == "/checkpoints/evw/outputs/sft" and "--step" not in command

    # The evaluation Jobs are part of the run, not runs of their own: status and list still see one run.
    status = run_cw(launcher, "status", "evw", "-n", namespace)
    assert status.returncode == 0, status.stderr
    listed = run_cw(launcher, "list", "-o", "json", "-n", namespace)
    assert listed.returncode == 0 and [r["name"] for r in json.loads(listed.stdout)["items"]] == ["evw"], listed.stdout

    # The watcher's token opens nothing but creating and reading Jobs.
    request = urllib.request.Request(f"{kube_api.configuration.host}/api/v1/namespaces/{namespace}/secrets",
                                     headers={"Authorization": f"Bearer {token.read_text()}"})  # fmt: skip
    import ssl

    try:
        urllib.request.urlopen(request, context=ssl.create_default_context(cafile=kube_api.configuration.ssl_ca_cert))
        raise AssertionError("the watcher's token listed Secrets")
    except urllib.error.HTTPError as exc:
        assert exc.code == 403


def test_a_jobset_runs_trainer_pods_run_the_watcher_with_its_own_account(queued_namespace, tmp_path, wait_for):
    """A multi-node run is a JobSet: its layout keeps the watcher's ServiceAccount, Role and
    RoleBinding, so the JobSet controller's trainer pods are admitted under `<run>-eval` with the
    sidecar, and that account's token creates the evaluation Job of a complete checkpoint."""
    api, env, namespace = queued_namespace
    create_bound_volumes(api, namespace, "ckpts")
    config = {**KEPT, "nodes": 2, "jobset": True, "gpu": 8}
    launched = run_cw(env, "trl", "sft", str(write_config(tmp_path, config)), "--name", "gangev", "-n", namespace,
                      "--context", "cw-test", timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert "created JobSet gangev" in launched.stderr and "not evaluated" not in launched.stderr
    core = client.CoreV1Api(api)
    selector = "cw-cli.dev/run=gangev,app.kubernetes.io/component=trainer"
    pods = wait_for(lambda: len(items := core.list_namespaced_pod(namespace, label_selector=selector).items) == 2 and items,
                    90, what="the JobSet's two trainer pods")  # fmt: skip
    assert {p.spec.service_account_name for p in pods} == {"gangev-eval"}
    sidecar = next(c for c in pods[0].spec.init_containers if c.name == "eval-watch")
    data = core.read_namespaced_config_map("gangev-config", namespace).data
    for key in ("cw_eval_watch.py", "cw_pod_api.py", "cw-eval-job.json", "cw-eval-final-job.json", "cw_eval.py"):
        (tmp_path / key).write_text(data[key])
    token = tmp_path / "token"
    token.write_text(core.create_namespaced_service_account_token(
        "gangev-eval", namespace, {"spec": {"expirationSeconds": 600}}).status.token)  # fmt: skip
    run_dir = tmp_path / "volume" / "gangev" / "outputs" / "sft"
    _checkpoints(run_dir)
    # The Job controller adds JOB_COMPLETION_INDEX (a fieldRef) to each container of an Indexed Job's pods.
    sidecar.env = [e for e in sidecar.env if e.value is not None]
    said = _watch(api, namespace, tmp_path / "cw_eval_watch.py", sidecar, run_dir, token)
    assert "checkpoint-5: created evaluation Job gangev-eval-5" in said, said
    jobs = client.BatchV1Api(api).list_namespaced_job(namespace, label_selector="app.kubernetes.io/component=eval").items
    assert sorted(j.metadata.name for j in jobs) == ["gangev-eval-10", "gangev-eval-5"]


def test_a_missing_evaluation_priority_class_is_refused_before_anything_is_created(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles (read-only's optional ClusterRole reads PriorityClasses), not the admin.
    launcher = as_documented_roles("read-only", "launch")
    create_bound_volumes(kube_api, namespace, "ckpts")
    config = write_config(tmp_path, {**KEPT, "eval": {**EVAL, "priority_class": "cw-eval-nowhere"}})
    refused = run_cw(launcher, "trl", "sft", str(config), "--name", "evp", "-n", namespace, timeout=120)
    assert refused.returncode == 4, refused.stderr
    assert "PriorityClass 'cw-eval-nowhere' (the config's `eval.priority_class`) does not exist" in refused.stderr
    assert "eval.priority_class: null" in refused.stderr  # the fix a user without an admin can apply
    assert client.BatchV1Api(kube_api).list_namespaced_job(namespace).items == []
    assert client.CoreV1Api(kube_api).list_namespaced_config_map(namespace, label_selector="cw-cli.dev/run=evp").items == []
