"""The owner strategies (render/workload.py) read back exactly what the plan rendered.

Both forms of the same GRPO run (the trainer Job with server Deployments, and one JobSet) are
rendered; the strategy of each owner must name it as the plan did, find the trainer's pod
template the plan wrote, and count the GPUs its pods ask for.
"""

from __future__ import annotations

import pytest
from unit_helpers import CONFIGS, plan_for

from cw_cli.labels import TRAINER
from cw_cli.render.workload import OWNERS, SERVICES_ONLY, owner_kind


@pytest.mark.parametrize("jobset", [False, True])
def test_each_owner_is_named_found_and_counted_as_rendered(jobset):
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", sets=["queue=team-a"], nodes=2, jobset_available=jobset)
    strategy = owner_kind(plan.owner_kind)
    assert plan.workload.owner is strategy
    assert strategy.name(plan.run_name) == plan.owner_name
    owner = next(m for m in plan.manifests if m["kind"] == plan.owner_kind and m["metadata"]["name"] == plan.owner_name)
    roles = [role for role, _ in strategy.templates(owner)]
    assert roles[0] == TRAINER
    assert (len(roles) > 1) is jobset  # the servers are in the JobSet, else in Deployments
    template = strategy.trainer_template(owner)
    assert template is not None and template["spec"]["containers"][0]["name"] == TRAINER
    # GPUs: the trainer's per-pod limit times its two nodes, plus (in a JobSet) each server pod's.
    def limit(pod_template: dict) -> int:
        return sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
                   for c in pod_template["spec"]["containers"])  # fmt: skip

    servers = [t for role, t in strategy.templates(owner) if role != TRAINER]
    assert strategy.gpus(owner) == limit(template) * 2 + sum(limit(t) for t in servers)
    assert limit(template) > 0 and all(limit(t) > 0 for t in servers)


def test_the_same_run_costs_the_same_gpus_in_either_form():
    forms = {}
    for jobset in (False, True):
        plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", sets=["queue=team-a"], nodes=2, jobset_available=jobset)
        owner = next(m for m in plan.manifests if m["kind"] == plan.owner_kind)
        deployments = sum(
            int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)) * int(m["spec"].get("replicas", 1))
            for m in plan.manifests if m["kind"] == "Deployment" for c in m["spec"]["template"]["spec"]["containers"]
        )  # fmt: skip
        forms[jobset] = owner_kind(plan.owner_kind).gpus(owner) + deployments
    assert forms[False] == forms[True] > 0


def test_a_services_only_run_has_no_owner_strategy():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", services_only=True)
    assert plan.owner_kind == SERVICES_ONLY and plan.workload.owner is None
    assert set(OWNERS) == {"Job", "JobSet"}
