"""`cw status` reads the kinds of objects a run's ConfigMap records, not every kind a run may have,
and still finds everything of a run that records none (launched by an older cw)."""

from __future__ import annotations

import pytest
from test_cw_end_to_end import GRPO_CONFIG, SFT_CONFIG

from cw_cli import api
from cw_cli.k8s.queries import RUN_KINDS
from cw_cli.k8s.status import run_status
from cw_cli.labels import KINDS_ANNOTATION


@pytest.fixture
def session(kube_cluster, namespace):
    return api.Session(context=kube_cluster.context, namespace=namespace, kubeconfig=kube_cluster.kubeconfig)


def _status_reads(session: api.Session, run_name: str, record) -> tuple[api.RunView, list[str]]:
    """The run's status and the paths of the requests it sent (in any order: reads run at once)."""
    sent = record(session.kube)
    view = run_status(session.kube, run_name)
    session.kube.__dict__.pop("raw")  # later requests of the test are not the status's
    return view, [path for _, path in sent]


def _listed_kinds(kube, paths: list[str]) -> set[str]:
    """Kinds of RUN_KINDS listed (not read by name) by these paths."""
    return {kind for kind in RUN_KINDS if kube.path(kind) in paths}


def _forget_kinds(session: api.Session, run_name: str) -> None:
    """Make the run look launched by a cw that did not record its kinds."""
    patch = {"metadata": {"annotations": {KINDS_ANNOTATION: None}}}
    session.kube.request("PATCH", session.kube.path("ConfigMap", f"{run_name}-config"), body=patch,
                         content_type="application/merge-patch+json")  # fmt: skip


def test_a_plain_run_is_read_by_name_and_its_pods_without_listing_other_kinds(session, tmp_path, wait_for, record_requests):
    session.submit(session.plan(SFT_CONFIG, "trl", "sft", name="reads-plain", gpu=1, base_dir=tmp_path))
    wait_for(lambda: run_status(session.kube, "reads-plain").pods, 60, what="the trainer's pod")
    config_map = session.kube.get("ConfigMap", "reads-plain-config")
    assert config_map["metadata"]["annotations"][KINDS_ANNOTATION] == "ConfigMap,Job,NetworkPolicy"

    view, paths = _status_reads(session, "reads-plain", record_requests)

    assert view.objects == ["Job/reads-plain-trainer", "ConfigMap/reads-plain-config", "NetworkPolicy/reads-plain-network"]
    kube = session.kube
    assert {kube.path("Job", "reads-plain-trainer"), kube.path("ConfigMap", "reads-plain-config"),
            kube.path("NetworkPolicy", "reads-plain-network"), kube.path("Pod")} <= set(paths)  # fmt: skip
    assert _listed_kinds(kube, paths) == set(), "no kind is listed for a run that records its three"
    assert [pod.role for pod in view.pods] == ["trainer"]


def test_a_run_with_services_lists_the_kinds_it_records_and_finds_the_same_objects_without_the_record(
    session, tmp_path, record_requests
):
    session.submit(session.plan(GRPO_CONFIG, "trl", "rlhf", name="reads-svc", base_dir=tmp_path))
    recorded = set(session.kube.get("ConfigMap", "reads-svc-config")["metadata"]["annotations"][KINDS_ANNOTATION].split(","))
    assert {"Deployment", "Service", "Job", "ConfigMap", "NetworkPolicy"} <= recorded

    view, paths = _status_reads(session, "reads-svc", record_requests)
    listed = _listed_kinds(session.kube, paths)
    assert listed == recorded - {"Job", "ConfigMap", "NetworkPolicy"}, "only the recorded kinds beyond the named three"
    assert {"Deployment/reads-svc-server", "Deployment/reads-svc-reward", "Service/reads-svc-server"} <= set(view.objects)

    _forget_kinds(session, "reads-svc")
    legacy, legacy_paths = _status_reads(session, "reads-svc", record_requests)
    assert _listed_kinds(session.kube, legacy_paths) == set(RUN_KINDS) - {"ConfigMap", "NetworkPolicy"}
    assert sorted(legacy.objects) == sorted(view.objects)
    assert legacy.state == view.state and [p.name for p in legacy.pods] == [p.name for p in view.pods]


def test_a_record_that_names_nothing_cw_knows_still_shows_the_named_objects(session, tmp_path, record_requests):
    """A hand-edited record cannot make status fail: unknown kinds are not read."""
    session.submit(session.plan(SFT_CONFIG, "trl", "sft", name="reads-odd", gpu=1, base_dir=tmp_path))
    patch = {"metadata": {"annotations": {KINDS_ANNOTATION: "Nonsense,,Job"}}}
    session.kube.request("PATCH", session.kube.path("ConfigMap", "reads-odd-config"), body=patch,
                         content_type="application/merge-patch+json")  # fmt: skip
    view, paths = _status_reads(session, "reads-odd", record_requests)
    assert "Job/reads-odd-trainer" in view.objects and _listed_kinds(session.kube, paths) == set()
