"""`--dry-run` prints what a launch applies, in every workload mode, against real API servers.

The workload (a Job, a JobSet, Kueue-queued or not) is chosen once from the config and what the
cluster serves. A dry run asks the cluster too, so on a cluster with JobSet a two-node run prints
as the JobSet a launch creates, and on one without it as the indexed Job a launch creates. A run
that names a Kueue queue on a cluster without Kueue is refused before anything is created (it
would wait suspended forever). Without a reachable cluster a dry run still prints, and says the
cluster was not asked.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from test_cw_end_to_end import GRPO_CONFIG, SFT_CONFIG, run_cw, write_config

from cw_cli.client.connection import FIELD_MANAGER, ClusterTarget, connect
from cw_cli.errors import NotFound

#: Every kind cw may create for a run.
RUN_KINDS = ("Job", "JobSet", "Deployment", "Service", "ConfigMap", "NetworkPolicy", "ServiceAccount", "Role", "RoleBinding")


def _printed(stdout: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(stdout) if doc]


def _applied(kubeconfig: Path, namespace: str, run: str, kinds: tuple[str, ...]) -> list[dict]:
    """The run's objects that cw itself created (not the JobSet's child Jobs or the ReplicaSets' pods)."""
    kube = connect(ClusterTarget(context="cw-test", namespace=namespace, kubeconfig=str(kubeconfig)))
    try:
        found = []
        for kind in kinds:
            try:
                items = kube.list(kind, label_selector=f"cw-cli.dev/run={run}")
            except NotFound:  # JobSet where it is not installed
                continue
            for item in items:
                managers = {entry.get("manager") for entry in item["metadata"].get("managedFields") or []}
                if FIELD_MANAGER in managers:
                    found.append({**item, "kind": kind})
        return found
    finally:
        kube.close()


def _names(objects: list[dict]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def _containers(obj: dict) -> list[tuple[str, list[str]]]:
    """(name, command) of every container in the object's pod templates, in order."""
    spec = obj.get("spec") or {}
    templates = [spec.get("template")] if "template" in spec else [
        job["template"]["spec"]["template"] for job in spec.get("replicatedJobs") or []
    ]
    return [(c["name"], c.get("command") or []) for t in templates if t for c in t["spec"]["containers"]]


def _dry_run_then_launch(env: dict, kubeconfig: Path, namespace: str, config: Path, run: str, *args: str) -> None:
    flags = ["-n", namespace, "--context", "cw-test", "--name", run, *args]
    dry = run_cw(env, *_command(config), *flags, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    printed = _printed(dry.stdout)
    launched = run_cw(env, *_command(config), *flags)
    assert launched.returncode == 0, launched.stderr
    applied = _applied(kubeconfig, namespace, run, RUN_KINDS)
    assert _names(applied) == _names(printed), (dry.stderr, launched.stderr)
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in applied}
    for obj in printed:  # the same pods: every container with the same command
        assert _containers(by_name[(obj["kind"], obj["metadata"]["name"])]) == _containers(obj)
    deleted = run_cw(env, "delete", run, "-n", namespace, "--context", "cw-test")
    assert deleted.returncode == 0, deleted.stderr


def _command(config: Path) -> list[str]:
    return ["trl", "grpo" if "reward_funcs" in yaml.safe_load(config.read_text()) else "sft", str(config)]


def test_a_two_node_dry_run_prints_the_jobset_a_launch_creates(queued_namespace, tmp_path):
    _, env, namespace = queued_namespace
    config = write_config(tmp_path, {**SFT_CONFIG, "gpu": 2})
    dry = run_cw(env, *_command(config), "--nodes", "2", "-n", namespace, "--context", "cw-test", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert [o["kind"] for o in _printed(dry.stdout)][0] == "JobSet"
    assert "not asked" not in dry.stderr
    _dry_run_then_launch(env, Path(env["KUBECONFIG"]), namespace, config, "gang-two", "--nodes", "2")


def test_a_queued_run_with_servers_prints_the_queued_jobset_it_becomes(queued_namespace, tmp_path):
    _, env, namespace = queued_namespace
    config = write_config(tmp_path, {**GRPO_CONFIG, "queue": "cw"})
    dry = run_cw(env, *_command(config), "-n", namespace, "--context", "cw-test", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    owner = _printed(dry.stdout)[0]
    assert owner["kind"] == "JobSet" and owner["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "cw"
    _dry_run_then_launch(env, Path(env["KUBECONFIG"]), namespace, config, "queued-gang")


def test_without_jobset_the_dry_run_prints_the_indexed_job_a_launch_creates(cw_env, kube_cluster, namespace, tmp_path):
    config = write_config(tmp_path, {**SFT_CONFIG, "gpu": 2})
    dry = run_cw(cw_env, *_command(config), "--nodes", "2", "-n", namespace, "--context", "cw-test", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    kinds = [o["kind"] for o in _printed(dry.stdout)]
    assert "JobSet" not in kinds and kinds[0] == "Job"
    assert "JobSet is not installed" in dry.stderr  # the answer, not a guess
    _dry_run_then_launch(cw_env, kube_cluster.kubeconfig, namespace, config, "plain-two", "--nodes", "2")


def test_a_queue_on_a_cluster_without_kueue_is_refused_before_anything_is_created(cw_env, kube_cluster, namespace, tmp_path):
    config = write_config(tmp_path, {**SFT_CONFIG, "queue": "team-a"})
    for extra in ([], ["--dry-run"]):
        result = run_cw(cw_env, *_command(config), "-n", namespace, "--context", "cw-test", "--name", "no-kueue", *extra)
        assert result.returncode == 2, result.stderr
        assert "does not serve Kueue" in result.stderr and "queue" in result.stderr
    assert _applied(kube_cluster.kubeconfig, namespace, "no-kueue", RUN_KINDS) == []


def test_a_dry_run_without_a_cluster_prints_and_says_it_did_not_ask(tmp_path):
    import os

    config = write_config(tmp_path, {**SFT_CONFIG, "gpu": 2})
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing")}
    dry = run_cw(env, *_command(config), "--nodes", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert [o["kind"] for o in _printed(dry.stdout)][0] == "Job"
    assert "not asked whether it serves JobSet" in " ".join(dry.stderr.split())
    launched = run_cw(env, *_command(config), "--nodes", "2")
    assert launched.returncode == 3, launched.stderr  # a launch needs the answer: the cluster is unreachable


def test_every_plain_mode_launches_what_its_dry_run_printed(cw_env, kube_cluster, namespace, tmp_path):
    """One node; a run with servers (Job, Deployments, their keeper's RBAC); the servers alone."""
    modes = [
        ("plain-one", write_config(tmp_path, SFT_CONFIG, "sft.yaml"), []),
        ("plain-grpo", write_config(tmp_path, GRPO_CONFIG, "grpo.yaml"), []),
        ("plain-services", write_config(tmp_path, GRPO_CONFIG, "grpo.yaml"), ["--services", "--ttl", "1h"]),
    ]
    for run, config, args in modes:
        _dry_run_then_launch(cw_env, kube_cluster.kubeconfig, namespace, config, run, *args)
