"""`cw list` / `cw status` data: the pinned `-o json|yaml` field names (docs/output.md), the
failure column, and how little `cw list` reads (logs only of failed runs' failed containers and
of running runs' trainers, a short tail)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import yaml
from unit_helpers import REPO

from cw_cli.cli.formats import check_states, dump, list_dict, state_key, status_dict
from cw_cli.k8s.run_view import LIST_LOG_LINES, list_runs
from cw_cli.k8s.status import run_status

#: The documented fields (docs/output.md). Changing these breaks users' scripts: add, never rename.
RUN_FIELDS = [
    "name", "namespace", "framework", "type", "state", "gpus", "created", "age_seconds", "restarts", "failure", "objects",
    "sweep", "links", "progress", "pipeline",
]  # fmt: skip
STATUS_FIELDS = ["pods", "services", "queue", "problems", "explanations"]
POD_FIELDS = ["name", "role", "rank", "phase", "ready", "node", "reason"]
EXPLANATION_FIELDS = ["kind", "summary", "message", "fix", "pod", "container", "log"]

CUDA_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.81 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free."


def _labels(run: str, component: str = "trainer") -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "cw-cli", "cw-cli.dev/run": run, "app.kubernetes.io/name": "trl",
            "cw-cli.dev/training-type": "sft", "app.kubernetes.io/component": component}  # fmt: skip


def _job(run: str, conditions: list[dict[str, Any]] | None = None, active: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": f"{run}-trainer", "namespace": "ml", "labels": _labels(run), "creationTimestamp": "2026-03-01T11:00:00Z", "uid": run},
            "spec": {"backoffLimit": 0, "parallelism": 1, "template": {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}},
            "status": {"conditions": conditions or [], "active": active, "ready": active, "failed": 0 if active else 1}}  # fmt: skip


FAILED = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]
DONE = [{"type": "Complete", "status": "True"}]


def _pod(run: str, phase: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": f"{run}-trainer-0-x", "namespace": "ml", "labels": _labels(run), "creationTimestamp": "2026-03-01T11:00:01Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "trainer", "image": "img:1", "resources": {"limits": {"memory": "16Gi"}}}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "restartCount": 0, "state": state}]}}  # fmt: skip


class _Response:
    def __init__(self, text: str) -> None:
        self.text = text

    def read(self) -> bytes:
        return self.text.encode()


class FakeKube:
    """The few calls `cw status` and `cw list` make, over canned objects; records every log request."""

    namespace = "ml"

    def __init__(self, objects: dict[str, list[dict[str, Any]]], logs: dict[str, str]) -> None:
        self.objects, self.logs, self.log_requests, self.lists = objects, logs, [], []

    def list(self, kind, label_selector=None, field_selector=None, all_namespaces=False):
        self.lists.append(kind)
        items = self.objects.get(kind, [])
        if label_selector and "cw-cli.dev/run=" in label_selector:
            run = label_selector.split("cw-cli.dev/run=")[1].split(",")[0]
            items = [o for o in items if o["metadata"]["labels"].get("cw-cli.dev/run") == run]
        return items

    list_metadata = list  # the canned objects are small: whole objects stand in for their metadata

    def get(self, kind, name):
        return None

    def get_metadata(self, kind, name):
        return next((o for o in self.objects.get(kind, []) if o["metadata"]["name"] == name), None)

    def raw(self, method, path, query=None, **_):
        self.log_requests.append((path, dict(query or {})))
        return _Response(self.logs.get(path.split("/pods/")[1].split("/")[0], ""))


def _cluster() -> FakeKube:
    objects = {
        "Job": [_job("oom", FAILED), _job("cuda", FAILED), _job("done", DONE), _job("busy", active=1)],
        "Pod": [
            _pod("oom", "Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}),
            _pod("cuda", "Failed", {"terminated": {"exitCode": 1, "reason": "Error"}}),
            _pod("done", "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}}),
            _pod("busy", "Running", {"running": {"startedAt": "2026-03-01T11:00:02Z"}}),
        ],
    }
    return FakeKube(objects, {"cuda-trainer-0-x": f"step 1\n{CUDA_OOM}\n", "busy-trainer-0-x": "never read"})


def test_list_says_why_failed_runs_failed_and_reads_only_their_logs():
    kube = _cluster()
    runs = {run.name: run for run in list_runs(kube)}
    assert runs["oom"].failure == "OOMKilled (trainer)"
    assert runs["cuda"].failure == "CUDA OOM"
    assert runs["done"].failure is None and runs["busy"].failure is None
    # The failed container whose exit code says nothing (OOMKilled needs none) and the running
    # trainer (its progress), a short tail each.
    assert [(path, q["tailLines"]) for path, q in kube.log_requests] == [
        ("/api/v1/namespaces/ml/pods/cuda-trainer-0-x/log", LIST_LOG_LINES), ("/api/v1/namespaces/ml/pods/busy-trainer-0-x/log", 20)
    ]
    assert kube.lists.count("Pod") == 1


def test_list_reads_no_pod_when_every_run_succeeded():
    kube = FakeKube({"Job": [_job("done", DONE)], "Pod": [_pod("done", "Succeeded", {})]}, {})
    assert [run.failure for run in list_runs(kube)] == [None]
    assert "Pod" not in kube.lists and kube.log_requests == []


def test_json_fields_of_list_and_status_are_stable():
    kube = _cluster()
    listed = json.loads(dump(list_dict(list_runs(kube)), "json"))
    assert (listed["apiVersion"], listed["kind"]) == ("cw-cli.dev/v1", "RunList")
    assert all(list(item) == RUN_FIELDS for item in listed["items"])
    cuda = next(item for item in listed["items"] if item["name"] == "cuda")
    assert cuda["state"] == "Failed" and cuda["failure"] == "CUDA OOM" and cuda["namespace"] == "ml" and cuda["gpus"] == 4

    status = yaml.safe_load(dump(status_dict(run_status(kube, "cuda")), "yaml"))
    assert list(status) == ["apiVersion", "kind", *RUN_FIELDS, *STATUS_FIELDS]
    assert all(list(pod) == POD_FIELDS for pod in status["pods"])
    assert [list(e) for e in status["explanations"]] == [EXPLANATION_FIELDS] * len(status["explanations"])
    assert [e["kind"] for e in status["explanations"]] == ["cuda-oom", "backoff-limit"]
    assert CUDA_OOM[:60] in status["explanations"][0]["log"][-1]
    assert status["pods"][0]["reason"] == "CUDA OOM"
    assert any("ran out of GPU memory" in p for p in status["problems"])


def test_state_filter_values():
    assert state_key("Queued (Kueue)") == "queued" and state_key("Services only") == "services-only"
    assert state_key("Half-made (launcher stopped)") == "half-made"
    assert check_states(["Failed", "RUNNING"]) == {"failed", "running"}


def test_bad_output_and_state_values_are_usage_errors_and_completion_is_silent(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none"), "PYTHONPATH": str(REPO)}
    for args in (["list", "-o", "xml"], ["list", "--state", "sleeping"], ["status", "r", "-o", "csv"]):
        result = subprocess.run([sys.executable, "-m", "cw_cli", *args], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and "expected one of" in result.stderr and "Traceback" not in result.stderr, result.stderr
    # Completion of a RUN argument without any cluster: no candidates, no noise, exit 0.
    script = "import sys; sys.argv[0] = \"cw\"; from cw_cli.cli.app import main; main()"
    complete = {**env, "_CW_COMPLETE": "bash_complete", "COMP_WORDS": "cw status ", "COMP_CWORD": "2"}
    result = subprocess.run([sys.executable, "-c", script], env=complete, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "", "")


def test_list_with_hundreds_of_live_runs_reads_only_the_failed_runs_pods(monkeypatch):
    """Past MAX_NAMED_RUNS unfinished runs, `cw list` explains the failed ones (their pods only)."""
    import cw_cli.k8s.run_view as run_view

    monkeypatch.setattr(run_view, "MAX_NAMED_RUNS", 2)
    busy = [_job(f"busy{i}", active=1) for i in range(3)]
    kube = FakeKube({"Job": [*busy, _job("oom", FAILED)],
                     "Pod": [_pod("oom", "Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}})]}, {})  # fmt: skip
    selectors = []
    original = kube.list

    def recording(kind, label_selector=None, field_selector=None, all_namespaces=False):
        selectors.append((kind, label_selector))
        return original(kind, label_selector, field_selector, all_namespaces)

    kube.list = recording
    runs = {run.name: run for run in list_runs(kube)}
    assert runs["oom"].failure == "OOMKilled (trainer)" and runs["busy0"].failure is None
    assert [sel for kind, sel in selectors if kind == "Pod"] == ["app.kubernetes.io/managed-by=cw,cw-cli.dev/run in (oom)"]
