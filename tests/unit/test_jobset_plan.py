"""A run as one JobSet: multi-node gangs that restart together, and GRPO runs Kueue admits as a unit.

The rendered JobSet is checked here as plain dicts; tests/cluster/test_jobset_runs.py proves the same
manifests against the real JobSet and Kueue controllers.
"""

from __future__ import annotations

import shutil

import pytest
from unit_helpers import CONFIGS, env_map, kinds_and_names, mounted_config, obj, plan_for, write_config

from cw_cli.errors import ConfigError
from cw_cli.render.workload import JobSetOwner

RUN = "golden-run"
SFT = {"model_name_or_path": "m", "dataset_name": "d", "gpu": 8, "checkpoint_volume": "ckpt"}


def _replicated(jobset: dict, name: str) -> dict:
    found = [r for r in jobset["spec"]["replicatedJobs"] if r["name"] == name]
    assert len(found) == 1, [r["name"] for r in jobset["spec"]["replicatedJobs"]]
    return found[0]


def _pod(replicated: dict) -> dict:
    return replicated["template"]["spec"]["template"]


@pytest.fixture
def grpo_config(tmp_path):
    for name in ("trl-grpo.yaml", "rewards.py"):
        shutil.copy(CONFIGS / name, tmp_path / name)
    return tmp_path / "trl-grpo.yaml"


@pytest.fixture
def two_node_gang(tmp_path):
    path = write_config(tmp_path, {**SFT, "max_restarts": 5})
    return plan_for("trl", "sft", path, nodes=2, jobset_available=True)


def test_multi_node_run_on_a_jobset_cluster_is_one_jobset_that_owns_the_run(two_node_gang):
    assert kinds_and_names(two_node_gang) == [
        ("JobSet", RUN),  # first: the owner every other object points to
        ("ConfigMap", f"{RUN}-config"),
        ("NetworkPolicy", f"{RUN}-network"),
    ]
    assert two_node_gang.owner_kind == "JobSet" and two_node_gang.owner_name == RUN
    trainer = _replicated(two_node_gang.manifests[0], "trainer")
    spec = trainer["template"]["spec"]
    assert trainer["replicas"] == 1
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 2 and spec["parallelism"] == 2


def test_gang_restarts_come_from_the_config_and_disruptions_do_not_count(two_node_gang):
    jobset = two_node_gang.manifests[0]
    policy = jobset["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 5
    [rule] = policy["rules"]
    assert rule["action"] == "RestartJobSetAndIgnoreMaxRestarts"
    assert rule["onJobFailureReasons"] == ["PodFailurePolicy"]
    # Only a disruption (or exit 143: stopped on SIGTERM with a checkpoint) fails a Job through its pod
    # failure policy; any other failure is the backoff limit (0), which counts against maxRestarts.
    job = _replicated(jobset, "trainer")["template"]["spec"]
    assert job["backoffLimit"] == 0
    assert job["podFailurePolicy"] == {
        "rules": [
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [143]}},
        ]
    }


def test_gang_ranks_find_rank_zero_through_jobsets_own_dns(two_node_gang):
    jobset = two_node_gang.manifests[0]
    assert jobset["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    pod = _pod(_replicated(jobset, "trainer"))
    assert "subdomain" not in pod["spec"]  # JobSet sets its own (the JobSet's name)
    env = env_map(pod["spec"]["containers"][0])
    assert env["MASTER_ADDR"] == env["CW_MASTER_ADDR"] == f"{RUN}-trainer-0-0.{RUN}"
    assert env["CW_NODE_RANK"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    }


def test_jobset_is_printed_runnable_and_finishes_with_the_trainer(two_node_gang):
    spec = two_node_gang.manifests[0]["spec"]
    assert spec["suspend"] is False
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["trainer"]}
    assert spec["ttlSecondsAfterFinished"] == 72 * 3600


def test_grpo_with_a_queue_puts_trainer_and_servers_in_one_jobset(grpo_config):
    plan = plan_for("trl", "grpo", grpo_config, sets=["queue=team-a"], jobset_available=True)
    jobset = plan.manifests[0]
    assert jobset["kind"] == "JobSet"
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["trainer", "server", "reward"]
    # One queue label, on the JobSet: Kueue admits its pod sets together.
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    for replicated in jobset["spec"]["replicatedJobs"]:
        assert "kueue.x-k8s.io/queue-name" not in _pod(replicated)["metadata"]["labels"]
    assert plan.managed_suspend is False  # Kueue releases it
    assert plan.servers == [f"{RUN}-server", f"{RUN}-reward"]
    assert not [m for m in plan.manifests if m["kind"] in ("Deployment", "Job")]


def test_gang_servers_are_reached_through_their_services(grpo_config):
    plan = plan_for("trl", "grpo", grpo_config, sets=["queue=team-a"], jobset_available=True)
    jobset = plan.manifests[0]
    for role in ("server", "reward"):
        service = obj(plan, "Service", f"{RUN}-{role}")
        pod_labels = _pod(_replicated(jobset, role))["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        job = _replicated(jobset, role)["template"]["spec"]
        assert job["completions"] == 1 and job["template"]["spec"]["restartPolicy"] == "Never"
    trainer_pod = _pod(_replicated(jobset, "trainer"))["spec"]
    assert [c["name"] for c in trainer_pod["initContainers"]] == ["wait-server", "wait-reward"]


def test_gang_servers_need_no_keeper_and_no_api_access(grpo_config):
    plan = plan_for("trl", "grpo", grpo_config, sets=["queue=team-a"], jobset_available=True)
    kinds = {kind for kind, _ in kinds_and_names(plan)}
    assert not kinds & {"Role", "RoleBinding", "ServiceAccount"}
    for role in ("server", "reward"):
        pod = _pod(_replicated(plan.manifests[0], role))["spec"]
        assert [c["name"] for c in pod["containers"]] == [role]
        assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False
    assert "cw_keeper.py" not in obj(plan, "ConfigMap", f"{RUN}-config")["data"]


def test_the_trainer_config_is_the_same_in_a_jobset(grpo_config):
    gang = plan_for("trl", "grpo", grpo_config, sets=["queue=team-a"], jobset_available=True)
    plain = plan_for("trl", "grpo", grpo_config, sets=["queue=team-a"], jobset_available=False)
    assert mounted_config(gang) == mounted_config(plain)
    plain_pod = obj(plain, "Job", f"{RUN}-trainer")["spec"]["template"]["spec"]
    assert _pod(_replicated(gang.manifests[0], "trainer"))["spec"]["containers"] == plain_pod["containers"]


def test_single_node_run_without_queue_stays_a_job(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, SFT), jobset_available=True)
    assert plan.manifests[0]["kind"] == "Job" and plan.owner_kind == "Job"


def test_jobset_true_forces_one_and_false_refuses_one(tmp_path):
    forced = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "jobset": True}))
    assert forced.manifests[0]["kind"] == "JobSet"  # printed as such even in a dry run
    never = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "jobset": False}), nodes=2, jobset_available=True)
    assert never.manifests[0]["kind"] == "Job"


def test_jobset_true_on_a_cluster_without_jobset_is_refused_with_the_fix(tmp_path):
    path = write_config(tmp_path, {**SFT, "jobset": True})
    with pytest.raises(ConfigError) as caught:
        plan_for("trl", "sft", path, jobset_available=False)
    assert "jobset: true" in caught.value.issues[0] and str(path) in caught.value.issues[0]
    assert "jobset: auto" in (caught.value.hint or "")


def test_dry_run_of_auto_says_a_launch_may_make_a_jobset(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, SFT), nodes=2)
    assert plan.manifests[0]["kind"] == "Job"
    assert any("jobset: true" in notice for notice in plan.notices)


def test_without_jobset_a_queued_grpo_run_warns_that_its_servers_skip_the_quota(grpo_config):
    plan = plan_for("trl", "grpo", grpo_config, sets=["queue=team-a"], jobset_available=False)
    assert plan.manifests[0]["kind"] == "Job"
    assert any("outside the queue's quota" in notice for notice in plan.notices)


def test_services_only_never_becomes_a_jobset(grpo_config):
    plan = plan_for("trl", "grpo", grpo_config, sets=["jobset=true"], services_only=True, jobset_available=True)
    assert "JobSet" not in {kind for kind, _ in kinds_and_names(plan)}


@pytest.mark.parametrize("bad", ["sometimes", -1, 101, True])
def test_bad_jobset_settings_are_refused(tmp_path, bad):
    key = "max_restarts" if not isinstance(bad, str) else "jobset"
    with pytest.raises(ConfigError):
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, key: bad}))


def _jobset(conditions=(), suspend=False, ready=0, labels=None):
    return {
        "metadata": {"name": "r", "labels": labels or {}, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"suspend": suspend},
        "status": {
            "conditions": [{"type": t, "status": "True"} for t in conditions],
            "replicatedJobsStatus": [{"name": "trainer", "ready": ready}],
        },
    }


@pytest.mark.parametrize(
    ("jobset", "state"),
    [
        (_jobset(["Completed"]), "Succeeded"),
        (_jobset(["Failed"]), "Failed"),
        (_jobset(suspend=True, labels={"kueue.x-k8s.io/queue-name": "cw"}), "Queued (Kueue)"),
        (_jobset(suspend=True), "Half-made (launcher stopped)"),
        (_jobset(ready=1), "Running"),
        (_jobset(), "Pending"),
    ],
)
def test_jobset_state_in_plain_words(jobset, state):
    assert JobSetOwner().state(jobset) == state


def test_queued_helpers_request_only_resources_a_cluster_queue_covers(grpo_config):
    """Kueue does not admit a pod asking for a resource its ClusterQueue lacks (found on the real
    Kueue: "resource ephemeral-storage unavailable in ClusterQueue")."""
    queued = plan_for("trl", "grpo", grpo_config, sets=["queue=team-a"], jobset_available=True)
    trainer_pod = _pod(_replicated(queued.manifests[0], "trainer"))["spec"]
    for helper in trainer_pod["initContainers"]:
        for part in ("requests", "limits"):
            assert set(helper["resources"][part]) == {"cpu", "memory"}
    plain = plan_for("trl", "grpo", grpo_config)  # no queue: the helpers keep their disk bound
    keeper = [c for c in obj(plain, "Deployment", f"{RUN}-server")["spec"]["template"]["spec"]["containers"]
              if c["name"] == "keeper"][0]
    assert "ephemeral-storage" in keeper["resources"]["limits"]
