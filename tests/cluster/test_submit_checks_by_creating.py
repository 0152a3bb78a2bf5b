"""A submit checks the namespace and the run's name by creating its owner, not by reading first:
a plain run takes four requests, and every refusal still names its cause and leaves nothing."""

from __future__ import annotations

import pytest
from test_cw_end_to_end import SFT_CONFIG

from cw_cli import api
from cw_cli.errors import Conflict, NotFound, Rejected


@pytest.fixture
def session(kube_cluster, namespace):
    return api.Session(context=kube_cluster.context, namespace=namespace, kubeconfig=kube_cluster.kubeconfig)


def _run_objects(session: api.Session, run_name: str) -> list[str]:
    kube = session.kube
    return [f"{kind}/{obj['metadata']['name']}" for kind in ("Job", "ConfigMap", "NetworkPolicy")
            for obj in kube.list_metadata(kind, f"cw-cli.dev/run={run_name}")]  # fmt: skip


def test_a_plain_run_is_created_in_four_requests_and_says_nothing_of_servers(session, tmp_path, record_requests):
    planned = session.plan(SFT_CONFIG, "trl", "sft", name="four-requests", gpu=1, base_dir=tmp_path)
    sent = record_requests(session.kube)
    lines: list[str] = []
    session.submit(planned, progress=lines.append)
    kube = session.kube
    assert sent == [
        ("POST", kube.path("Job")),
        ("POST", kube.path("ConfigMap")),
        ("POST", kube.path("NetworkPolicy")),
        ("PATCH", kube.path("Job", "four-requests-trainer")),
    ]
    assert "started Job four-requests-trainer" in lines, lines  # no servers to wait for in this run


def test_a_missing_namespace_is_named_and_nothing_is_created(kube_cluster, tmp_path):
    session = api.Session(context=kube_cluster.context, namespace="no-such-ns", kubeconfig=kube_cluster.kubeconfig)
    planned = session.plan(SFT_CONFIG, "trl", "sft", name="nowhere", gpu=1, base_dir=tmp_path)
    with pytest.raises(NotFound) as raised:
        session.submit(planned)
    assert str(raised.value) == "namespace 'no-such-ns' does not exist"
    assert "kubectl create namespace no-such-ns" in (raised.value.hint or "")


def test_a_leftover_object_of_the_run_refuses_it_and_the_owner_just_made_is_removed(session, tmp_path):
    """A ConfigMap left from an earlier run of that name: the Job is created first, then removed."""
    kube = session.kube
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "data": {"left": "over"},
                 "metadata": {"name": "leftover-config", "labels": {"cw-cli.dev/run": "leftover"}}})  # fmt: skip
    planned = session.plan(SFT_CONFIG, "trl", "sft", name="leftover", gpu=1, base_dir=tmp_path)
    with pytest.raises(Conflict) as raised:
        session.submit(planned)
    assert str(raised.value) == "run 'leftover' already exists (ConfigMap leftover-config is on the cluster)"
    assert "removed what it had created" in (raised.value.hint or "")
    job = kube.get("Job", "leftover-trainer")
    assert job is None or job["metadata"].get("deletionTimestamp"), "the Job this launch created is gone"
    assert kube.get("ConfigMap", "leftover-config")["data"] == {"left": "over"}, "the leftover is not touched"


def test_a_run_that_exists_is_refused_before_anything_is_created(session, tmp_path):
    session.submit(session.plan(SFT_CONFIG, "trl", "sft", name="twice", gpu=1, base_dir=tmp_path))
    before = _run_objects(session, "twice")
    with pytest.raises(Conflict) as raised:
        session.submit(session.plan(SFT_CONFIG, "trl", "sft", name="twice", gpu=2, base_dir=tmp_path))
    assert str(raised.value) == "run 'twice' already exists (Job twice-trainer is on the cluster)"
    assert "removed" not in (raised.value.hint or ""), "nothing was created, so nothing was removed"
    assert _run_objects(session, "twice") == before


def test_an_object_json_cannot_hold_is_rejected_and_what_was_created_is_removed(session, tmp_path):
    """A key YAML read as a boolean (an unquoted `on:` in a template) cannot be sent: the launch
    stops with a clear error and removes the Job and ConfigMap it had created."""
    planned = session.plan(SFT_CONFIG, "trl", "sft", name="bool-key", gpu=1, base_dir=tmp_path)
    policy = next(m for m in planned.manifests if m["kind"] == "NetworkPolicy")
    policy["metadata"]["annotations"] = {True: "from an unquoted on:"}
    with pytest.raises(Rejected) as raised:
        session.submit(planned)
    assert "cannot be sent as JSON" in str(raised.value) and "quote" in (raised.value.hint or "")
    assert "removed what it had created" in (raised.value.hint or "")
    kube = session.kube
    job = kube.get("Job", "bool-key-trainer")
    assert job is None or job["metadata"].get("deletionTimestamp")
    assert kube.get("ConfigMap", "bool-key-config") is None
