"""Acting on an existing run: wait for it, read its logs, delete it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from cw_cli.client.connection import Kube
from cw_cli.errors import NotFound, Rejected, RunFailed, WaitTimeout
from cw_cli.k8s.explanations import explain_pending
from cw_cli.k8s.queries import find_pod, run_objects, run_selector
from cw_cli.k8s.workloads import on_cluster
from cw_cli.labels import TRAINER
from cw_cli.render.workload import owner_kind

Progress = Callable[[str], None]


def delete_run(kube: Kube, run_name: str) -> list[str]:
    """Delete every object of a run, and nothing else (cw's labels select them).

    Returns:
        ``Kind/name`` of each object deleted; pods go with their Job and Deployments.

    Raises:
        NotFound: The run has no object in the namespace.
    """
    # List everything first: deleting the owner lets the garbage collector remove the rest meanwhile.
    # A queued run's JobSet or Job goes with its Kueue Workload, which frees its place in the queue.
    found = [(kind, obj["metadata"]["name"]) for kind, obj in run_objects(kube, run_name, whole=())]
    deleted: list[str] = []
    for kind, name in found:
        kube.delete(kind, name)
        deleted.append(f"{kind}/{name}")
    if not deleted:
        raise NotFound(f"no run {run_name!r} in namespace {kube.namespace!r}", hint="`cw list` shows the runs")
    return deleted


def delete_sweep(kube: Kube, sweep: str) -> list[str]:
    """Delete every run of a sweep (runs labelled with it); return their names.

    Raises:
        NotFound: No run of that sweep in the namespace.
    """
    from cw_cli.k8s.queries import sweep_runs

    names = sweep_runs(kube, sweep)
    if not names:
        raise NotFound(f"no run of sweep {sweep!r} in namespace {kube.namespace!r}", hint="`cw list` shows the runs")
    for name in names:
        delete_run(kube, name)
    return names


def stop_services(kube: Kube, run_name: str) -> list[str]:
    """Scale a run's servers to zero replicas so they free their GPUs; return their names."""
    stopped = []
    for deployment in kube.list("Deployment", run_selector(run_name)):
        name = deployment["metadata"]["name"]
        if deployment["spec"].get("replicas", 1):
            kube.merge_patch("Deployment", name, {"spec": {"replicas": 0}})
            stopped.append(name)
    return stopped


def wait_for_run(
    kube: Kube,
    job_name: str,
    timeout_s: float | None = None,
    progress: Progress = lambda _: None,
    poll_s: float = 2.0,
    kind: str = "Job",
) -> str:
    """Block until the run's owner (the trainer Job, or its JobSet: ``kind``) succeeds or fails.

    Its state, and why the cluster refuses the trainer's pods, are its kind's to read
    (:mod:`cw_cli.render.workloads`, :mod:`cw_cli.k8s.workloads`).

    Returns:
        ``"Succeeded"``.

    Raises:
        RunFailed: The Job failed (the message carries the Job's reason).
        NotFound: The Job disappeared.
        WaitTimeout: Still running after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s if timeout_s else None
    last = ""
    while True:
        job = kube.get(kind, job_name)
        if job is None:
            raise NotFound(f"{kind} {job_name} disappeared while waiting")
        state = owner_kind(kind).state(job)
        if state != last:
            progress(f"{job_name}: {state}")
            last = state
        if state == "Succeeded":
            return state
        if state == "Failed":
            reason = next(
                (c.get("message") or c.get("reason") for c in job["status"].get("conditions", []) if c["type"] == "Failed"),
                "",
            )
            raise RunFailed(f"run failed: {reason}".strip(), hint=f"see the logs: cw logs {job_name.removesuffix('-trainer')}")
        if state in ("Pending", "Starting"):
            refused = on_cluster(kind).trainer_refused(kube, job)
            if refused:
                raise Rejected(
                    f"the cluster refuses to create the pods of {job_name}: {refused}",
                    hint="the namespace's policy (Pod Security, quota, an admission webhook) rejects them; "
                    "see `kubectl get events`, or use another --namespace",
                )
        if deadline and time.monotonic() > deadline:
            raise WaitTimeout(f"{job_name} still {state} after {int(timeout_s or 0)} s")
        time.sleep(poll_s)


def _split_timestamp(line: str) -> tuple[str, str]:
    stamp, _, text = line.partition(" ")
    return stamp, text


def stream_logs(
    kube: Kube,
    run_name: str,
    role: str = TRAINER,
    rank: int | None = None,
    follow: bool = False,
    tail: int | None = None,
    notice: Progress = lambda _: None,
    poll_s: float = 2.0,
    idle_s: float = 15.0,
) -> Iterator[str]:
    """Yield a pod's log lines through the API server.

    With ``follow``, waits for a Pending pod to start (saying why it waits), and reconnects if
    the stream drops or stays idle for ``idle_s`` while the pod still runs, without repeating
    lines; it stops once the pod has finished.
    """
    container = role
    while True:
        pod = find_pod(kube, run_name, role, rank)
        phase = (pod.get("status") or {}).get("phase")
        if phase != "Pending" or not follow:
            break
        notice(f"{pod['metadata']['name']} is Pending: {explain_pending(pod, kube)}")
        time.sleep(poll_s)
    name = pod["metadata"]["name"]
    path = f"/api/v1/namespaces/{kube.namespace}/pods/{name}/log"
    query: dict[str, object] = {"container": container, "timestamps": "true"}
    if tail is not None:
        query["tailLines"] = tail
    if not follow:
        for line in kube.stream_lines(path, query, what=f"read logs of {name}"):
            yield _split_timestamp(line)[1]
        return
    query["follow"] = "true"
    last_stamp = ""
    seen_at_last: set[str] = set()
    while True:
        for line in kube.stream_lines(path, query, what=f"follow logs of {name}", idle_timeout=idle_s):
            stamp, text = _split_timestamp(line)
            if stamp < last_stamp or (stamp == last_stamp and text in seen_at_last):
                continue  # already shown before a reconnect
            if stamp != last_stamp:
                last_stamp, seen_at_last = stamp, set()
            seen_at_last.add(text)
            yield text
        current = kube.get("Pod", name)
        if current is None or (current.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        query.pop("tailLines", None)
        if last_stamp:
            query["sinceTime"] = last_stamp
        time.sleep(poll_s)
