"""The workload (Job, JobSet, Kueue-queued) is chosen once, from the config and the cluster's facts.

`render/workload.py` decides; the plan only renders that decision, and `api.plan` asks the cluster
only where the config depends on it (a plain single-node run never reaches the network).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cw_cli.config.models import ClusterSpec
from cw_cli.errors import ConfigError
from cw_cli.render.workload import JOBSET_API, KUEUE_API, ClusterFacts, apis_to_ask, choose_workload

PATH = Path("run.yaml")
BOTH = ClusterFacts({JOBSET_API: True, KUEUE_API: True})
NEITHER = ClusterFacts({JOBSET_API: False, KUEUE_API: False})
NO_JOBSET = ClusterFacts({JOBSET_API: False, KUEUE_API: True})


def _choose(facts: ClusterFacts, has_services: bool = False, **fields):
    return choose_workload(PATH, ClusterSpec(**fields), services_only=False, local=False,
                           has_services=has_services, facts=facts)  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "has_services", "facts", "kind", "queue"),
    [
        ({}, False, ClusterFacts(), "Job", None),
        ({"nodes": 2}, False, BOTH, "JobSet", None),
        ({"nodes": 2}, False, NO_JOBSET, "Job", None),
        ({"queue": "q"}, True, BOTH, "JobSet", "q"),
        ({"queue": "q"}, False, BOTH, "Job", "q"),  # a queued trainer alone needs no gang
        ({"queue": "q"}, True, NO_JOBSET, "Job", "q"),
        ({"nodes": 2, "jobset": False}, False, BOTH, "Job", None),
        ({"jobset": True}, False, ClusterFacts(), "JobSet", None),
    ],
)
def test_the_workload_follows_the_config_and_the_cluster(fields, has_services, facts, kind, queue):
    workload = _choose(facts, has_services, **fields)
    assert (workload.owner_kind, workload.queue) == (kind, queue)
    assert workload.managed_suspend is (queue is None)


def test_a_plain_run_asks_the_cluster_nothing():
    assert apis_to_ask(ClusterSpec(), services_only=False, local=False) == ()
    assert apis_to_ask(ClusterSpec(nodes=2), services_only=False, local=True) == ()
    assert apis_to_ask(ClusterSpec(nodes=2, jobset=False), services_only=False, local=False) == ()
    assert apis_to_ask(ClusterSpec(nodes=2), services_only=False, local=False) == (JOBSET_API,)
    assert apis_to_ask(ClusterSpec(queue="q", jobset=False), services_only=False, local=False) == (KUEUE_API,)


def test_a_queue_without_kueue_is_refused_naming_the_file_and_the_way_out():
    with pytest.raises(ConfigError) as caught:
        _choose(NEITHER, queue="team-a")
    text = str(caught.value) + (caught.value.hint or "")
    assert "run.yaml" in text and "queue: team-a" in text and "Kueue" in text and "queue=null" in text


def test_jobset_true_without_jobset_is_refused():
    with pytest.raises(ConfigError, match="does not serve JobSet"):
        _choose(NO_JOBSET, jobset=True)


def test_an_unasked_cluster_is_said_with_the_reason():
    workload = _choose(ClusterFacts(not_asked="no usable kubeconfig"), nodes=2)
    assert workload.owner_kind == "Job"
    assert any("not asked" in note and "no usable kubeconfig" in note for note in workload.notes)


def test_the_plan_offline_asks_nothing_and_the_plan_with_a_cluster_asks_once(tmp_path):
    """api.plan asks the cluster only what the run depends on, once per connection."""
    import yaml

    from cw_cli import api

    asked: list[str] = []

    class Discovery:  # stands in for Kube: only discovery is read while planning
        namespace = "default"

        def serves(self, path: str, timeout=None) -> bool:
            asked.append(path)
            return True

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"model_name_or_path": "m", "dataset_name": "d", "checkpoint_volume": "none"}))
    plain = api.plan(config, "trl", "sft", connect=Discovery)  # type: ignore[arg-type]
    assert asked == [] and plain.plan.owner_kind == "Job" and plain.cluster_facts
    gang = api.plan(config, "trl", "sft", nodes=2, connect=Discovery)  # type: ignore[arg-type]
    assert asked == [JOBSET_API] and gang.plan.owner_kind == "JobSet" and gang.cluster_facts
    offline = api.plan(config, "trl", "sft", nodes=2)
    assert offline.plan.owner_kind == "Job" and not offline.cluster_facts
