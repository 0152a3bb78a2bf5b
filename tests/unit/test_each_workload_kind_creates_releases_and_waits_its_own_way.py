"""`launch` leaves every kind-specific step to the kind's cluster half (cw_cli/k8s/workloads.py).

A trainer Job and a JobSet are created suspended and released by cw (not under Kueue); a Job
run's servers are waited for as Deployments, a JobSet run's as the JobSet's replicated Jobs;
servers only (``--services``) have no owner to suspend or release. A recording client stands in
for the API server (the cluster tests prove the same against a real one:
test_dry_run_is_the_applied_plan.py, test_jobset_controller.py, test_kueue.py).
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from unit_helpers import CONFIGS, plan_for

from cw_cli.k8s.submit import launch
from cw_cli.k8s.workloads import KINDS as ON_CLUSTER
from cw_cli.render.workload import KINDS

RUN = "golden-run"


class Recorder:
    """Answers like an API server on which every object is there and Ready; records the calls."""

    namespace = "ns"

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.suspended: dict[str, bool] = {}

    def create(self, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        self.calls.append(("create", body["kind"], body["metadata"]["name"]))
        if "spec" in body and "suspend" in body["spec"]:
            self.suspended[body["kind"]] = body["spec"]["suspend"]
        return {**body, "metadata": {**body["metadata"], "uid": f"uid-{body['metadata']['name']}"}}

    def merge_patch(self, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch", kind, name))
        return {}

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", kind, name))
        if kind == "Deployment":
            return {"metadata": {"name": name, "generation": 1}, "spec": {"replicas": 1},
                    "status": {"observedGeneration": 1, "readyReplicas": 1}}  # fmt: skip
        if kind == "JobSet":
            roles = ("trainer", "server", "reward")
            return {"metadata": {"name": name}, "status": {"replicatedJobsStatus": [{"name": r, "ready": 1} for r in roles]}}
        return {"metadata": {"name": name}}

    def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}


@pytest.fixture
def grpo(tmp_path):
    for name in ("trl-grpo.yaml", "rewards.py"):
        shutil.copy(CONFIGS / name, tmp_path / name)
    return tmp_path / "trl-grpo.yaml"


def _first_created(kube: Recorder) -> tuple[str, ...]:
    return next(call for call in kube.calls if call[0] == "create")  # after the preflight's reads


def _launch(plan) -> Recorder:
    kube = Recorder()
    launch(kube, plan)  # type: ignore[arg-type]
    return kube


def test_a_job_run_is_created_suspended_released_and_its_deployments_waited_for(grpo):
    kube = _launch(plan_for("trl", "grpo", grpo, jobset_available=False))
    assert _first_created(kube) == ("create", "Job", f"{RUN}-trainer") and kube.suspended == {"Job": True}
    assert ("patch", "Job", f"{RUN}-trainer") in kube.calls
    assert {("get", "Deployment", f"{RUN}-server"), ("get", "Deployment", f"{RUN}-reward")} <= set(kube.calls)


def test_a_jobset_run_is_created_suspended_released_and_its_replicated_servers_waited_for(grpo):
    kube = _launch(plan_for("trl", "grpo", grpo, nodes=2, jobset_available=True))
    assert _first_created(kube) == ("create", "JobSet", RUN) and kube.suspended == {"JobSet": True}
    assert ("patch", "JobSet", RUN) in kube.calls
    assert ("get", "JobSet", RUN) in kube.calls and not [c for c in kube.calls if c[1] == "Deployment"]


def test_a_queued_run_is_left_to_kueue(grpo):
    kube = _launch(plan_for("trl", "grpo", grpo, sets=["queue=team-a"], jobset_available=True))
    assert kube.suspended == {"JobSet": True} and not [c for c in kube.calls if c[0] == "patch"]


def test_servers_only_have_no_owner_to_suspend_or_release(grpo):
    kube = _launch(plan_for("trl", "grpo", grpo, services_only=True))
    assert _first_created(kube) == ("create", "ConfigMap", f"{RUN}-config") and kube.suspended == {}
    assert not [c for c in kube.calls if c[0] == "patch"]
    assert ("get", "Deployment", f"{RUN}-server") in kube.calls


def test_every_kind_has_both_halves():
    assert set(ON_CLUSTER) == set(KINDS)
    assert all(ON_CLUSTER[kind].kind == KINDS[kind].kind for kind in KINDS)
