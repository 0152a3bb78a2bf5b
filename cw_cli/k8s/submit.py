"""Put a plan on the cluster: checks first, owner first, all-or-nothing, created never applied over."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from msgspec import Struct, field

from cw_cli.client.connection import Kube
from cw_cli.errors import ClusterUnreachable, Conflict, CwError, Forbidden, Interrupted, NotFound, Rejected, WaitTimeout
from cw_cli.render.jobset import child_job_name
from cw_cli.render.plan import DEFAULT_SERVICES_TIMEOUT_S, Plan
from cw_cli.render.workload import OWNERS

Progress = Callable[[str], None]


class LaunchResult(Struct):
    """What was created.

    Attributes:
        created: ``Kind/name`` of each object, in creation order.
        released: Whether the trainer Job was released (unsuspended).
        dry_run: Whether nothing was persisted (``--server-dry-run``).
    """

    created: list[str] = field(default_factory=list)
    released: bool = False
    dry_run: bool = False


def _priority_classes(plan: Plan) -> set[str]:
    return {str(spec["priorityClassName"]) for m in plan.manifests for spec in _pod_specs(m) if spec.get("priorityClassName")}


def _secret_and_volume_names(plan: Plan) -> tuple[set[str], set[str]]:
    secrets: set[str] = set()
    claims: set[str] = set()
    pod_specs = [pod_spec for manifest in plan.manifests for pod_spec in _pod_specs(manifest)]
    for pod_spec in pod_specs:
        for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    secrets.add(ref["name"])
        for volume in pod_spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                claims.add(volume["persistentVolumeClaim"]["claimName"])
    return secrets, claims


def _pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    owner = OWNERS.get(manifest["kind"])
    if owner is not None:
        return [template["spec"] for _, template in owner.templates(manifest)]
    if manifest["kind"] == "Deployment":
        return [manifest["spec"]["template"]["spec"]]
    return []


def preflight(kube: Kube, plan: Plan) -> None:
    """Refuse a run whose Secrets or volume claims are missing, before creating anything.

    A run that names none reads nothing here: creating its owner says whether the namespace
    exists and whether the run does (:func:`launch`), which spares a plain run four reads.

    Raises:
        NotFound: The namespace, a named Secret or a named PVC does not exist.
    """
    from cw_cli.k8s.queries import gather

    secrets, claims = _secret_and_volume_names(plan)
    _check_priority_classes(kube, _priority_classes(plan))
    if not secrets and not claims:
        return
    # Every read at once (on a remote cluster each is a round trip); the checks below then
    # report in the same order as reading one by one would.
    reads: dict[str, Any] = {"namespace": partial(_namespace_exists, kube)}
    reads.update({f"Secret/{name}": partial(kube.get, "Secret", name) for name in sorted(secrets)})
    reads.update({f"PersistentVolumeClaim/{name}": partial(kube.get, "PersistentVolumeClaim", name) for name in sorted(claims)})
    found = gather(reads)
    if not found["namespace"]:
        raise _no_namespace(kube)
    for name in sorted(secrets):
        if found[f"Secret/{name}"] is None:
            raise NotFound(
                f"secret {name!r} (named in the config's `secrets`) does not exist in namespace {kube.namespace!r}",
                hint=f"create it, e.g. kubectl -n {kube.namespace} create secret generic {name} --from-literal=KEY=...",
            )
    for name in sorted(claims):
        if found[f"PersistentVolumeClaim/{name}"] is None:
            raise NotFound(
                f"PersistentVolumeClaim {name!r} (named in the config's `checkpoint_volume`, `volumes` or "
                f"`hf_cache_volume`) does not exist in namespace {kube.namespace!r}",
                hint=f"create it (kubectl -n {kube.namespace} get pvc lists the claims there), or name an existing one",
            )


def _check_priority_classes(kube: Kube, names: set[str]) -> None:
    """Refuse a PriorityClass that does not exist: the Job would be created and every pod refused.

    A user who may not read PriorityClasses (cluster-scoped) is not stopped: the pods' refusal
    is then explained by `cw status` as before.

    Raises:
        NotFound: The cluster has no PriorityClass of a name the config gives.
    """
    for name in sorted(names):
        try:
            found = kube.get("PriorityClass", name)
        except Forbidden:
            return
        if found is None:
            raise NotFound(f"PriorityClass {name!r} (the config's `priority_class`) does not exist on the cluster",
                           hint="kubectl get priorityclasses lists them; name one, or leave priority_class out")  # fmt: skip


def _namespace_readable_and_there(kube: Kube) -> bool:
    """After a 404 on creating the owner: False only where the namespace is known to be missing."""
    try:
        return _namespace_exists(kube)
    except Forbidden:  # cannot tell: the API server's own 404 stands
        return True


def _no_namespace(kube: Kube) -> NotFound:
    return NotFound(
        f"namespace {kube.namespace!r} does not exist",
        hint=f"create it (kubectl create namespace {kube.namespace}) or pick another with -n",
    )


def _run_exists(plan: Plan, kind: str, name: str) -> Conflict:
    return Conflict(
        f"run {plan.run_name!r} already exists ({kind} {name} is on the cluster)",
        hint=f"choose another --name, or remove it first with `cw delete {plan.run_name}`",
    )


def _namespace_exists(kube: Kube) -> bool:
    try:
        kube.request("GET", f"/api/v1/namespaces/{kube.namespace}", what=f"read namespace {kube.namespace}")
    except NotFound:
        return False
    return True


def _in_namespace(manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The manifest placed in ``namespace``, including a RoleBinding's ServiceAccount subjects."""
    body = dict(manifest)
    body["metadata"] = dict(manifest["metadata"], namespace=namespace)
    if manifest["kind"] == "RoleBinding":
        body["subjects"] = [
            {**subject, "namespace": namespace} if subject.get("kind") == "ServiceAccount" else subject
            for subject in manifest.get("subjects", [])
        ]
    return body


def _owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }


class CreatedObject(Struct, frozen=True):
    """An object this launch created: its kind, name and the UID the API server gave it."""

    kind: str
    name: str
    uid: str


#: Signals that would interrupt a rollback half-way: ignored until it has finished.
_ROLLBACK_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ignore Ctrl-C, SIGTERM and SIGHUP for the duration (a second Ctrl-C must not abandon a rollback)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {}
    for name in _ROLLBACK_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            saved[number] = signal.signal(number, signal.SIG_IGN)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def remove_objects(kube: Kube, objects: list[CreatedObject]) -> list[str]:
    """Delete what this launch created, newest first; return ``Kind/name`` of what is left.

    Only objects with the UID this launch got back are deleted: one that another launch created
    under the same name meanwhile is not touched. Signals are ignored until the rollback ends;
    once the API server stops answering, the rest is listed instead of waited for.
    """
    left: list[str] = []
    with _signals_deferred():
        for index, item in enumerate(reversed(objects)):
            try:
                kube.delete(item.kind, item.name, uid=item.uid)
            except Conflict:
                continue  # the object there now is not ours
            except ClusterUnreachable:
                left += [f"{o.kind}/{o.name}" for o in list(reversed(objects))[index:]]
                break
            except CwError:
                left.append(f"{item.kind}/{item.name}")
    return left


def deployment_ready(deployment: dict[str, Any]) -> bool:
    """Whether a Deployment has all its replicas Ready (read from status only)."""
    spec_replicas = deployment.get("spec", {}).get("replicas", 1)
    status = deployment.get("status") or {}
    generation_seen = status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 1)
    return generation_seen and status.get("readyReplicas", 0) >= spec_replicas


#: (ready, why the cluster refuses its pods or None) of each server, by name.
ServerStates = Callable[[list[str]], dict[str, tuple[bool, str | None]]]


def _wait_for_servers(
    kube: Kube, run_name: str, names: list[str], read: ServerStates, timeout_s: float, progress: Progress, poll_s: float
) -> None:
    """Poll ``read`` until every server is Ready; stop at once if the cluster refuses one's pods."""
    from cw_cli.k8s.explanations import explain_pods
    from cw_cli.k8s.queries import run_selector

    deadline = time.monotonic() + timeout_s
    announced: set[str] = set()
    while True:
        states = read(names)
        waiting = [name for name in names if not states[name][0]]
        for name in waiting:
            refused = states[name][1]
            if refused:
                raise Rejected(
                    f"the cluster refuses to create the pods of {name}: {refused}",
                    hint="the namespace's policy (Pod Security, quota, an admission webhook) rejects them; "
                    "see `kubectl get events`, or use another --namespace",
                )
        for name in names:
            if name not in waiting and name not in announced:
                progress(f"service {name} is Ready")
                announced.add(name)
        if not waiting:
            return
        if time.monotonic() > deadline:
            reasons = explain_pods(kube, run_selector(run_name))
            raise WaitTimeout(
                f"services not Ready after {int(timeout_s)} s: {', '.join(waiting)}",
                hint="; ".join(reasons) or "see `cw status` and `cw logs --role server`",
            )
        time.sleep(poll_s)


def wait_for_deployments(
    kube: Kube, run_name: str, names: list[str], timeout_s: float, progress: Progress, poll_s: float = 2.0
) -> None:
    """Block until every named Deployment is Ready.

    Raises:
        Rejected: The cluster refuses to create a server's pods (it would never become Ready).
        WaitTimeout: Not all Ready within the timeout (the message says which and why).
    """
    from cw_cli.k8s.explanations import pods_refused

    def read(wanted: list[str]) -> dict[str, tuple[bool, str | None]]:
        states = {}
        for name in wanted:
            deployment = kube.get("Deployment", name) or {"metadata": {}}
            ready = deployment_ready(deployment)
            states[name] = (ready, None if ready else pods_refused(kube, "Deployment", deployment))
        return states

    _wait_for_servers(kube, run_name, names, read, timeout_s, progress, poll_s)


def wait_for_gang_servers(
    kube: Kube, jobset_name: str, roles: list[str], timeout_s: float, progress: Progress, poll_s: float = 2.0
) -> None:
    """Block until the server Jobs of a JobSet run (``<run>-<role>``) have their pods Ready.

    Raises:
        Rejected: The cluster refuses to create a server's pods.
        WaitTimeout: Not all Ready within the timeout.
    """
    from cw_cli.k8s.explanations import pods_refused

    def read(wanted: list[str]) -> dict[str, tuple[bool, str | None]]:
        jobset = kube.get("JobSet", jobset_name) or {}
        statuses = {s["name"]: s for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []}
        states: dict[str, tuple[bool, str | None]] = {}
        for name in wanted:
            role = name.removeprefix(f"{jobset_name}-")
            if int(statuses.get(role, {}).get("ready", 0)) >= 1:
                states[name] = (True, None)
                continue
            job = kube.get("Job", child_job_name(jobset_name, role))
            states[name] = (False, pods_refused(kube, "Job", job) if job else None)
        return states

    names = [f"{jobset_name}-{role}" for role in roles]
    _wait_for_servers(kube, jobset_name, names, read, timeout_s, progress, poll_s)


def launch(
    kube: Kube,
    plan: Plan,
    *,
    server_dry_run: bool = False,
    services_timeout_s: float = DEFAULT_SERVICES_TIMEOUT_S,
    progress: Progress = lambda _: None,
) -> LaunchResult:
    """Create every object of the plan, or none.

    The first manifest is the owner (the trainer Job or the run's JobSet, or the ConfigMap with
    ``--services``);
    every other object gets an ownerReference to it, so deleting it removes the run. Objects are
    created, never applied over: of two launches racing for one run name the API server lets
    exactly one create the owner, and the other stops with a Conflict having created nothing. A
    later object already there (left from an earlier run of the name) is a Conflict too, and the
    owner just made is removed again; a 404 on the owner is named "namespace does not exist"
    where the namespace is missing. So a run that names no Secret or claim reads nothing first.

    The Job (or JobSet) is created suspended, so no pod starts before the ConfigMap it mounts exists, and
    released as soon as every object is in place (unless Kueue admits it). From then on the run
    needs no cw: the trainer's init containers wait in the cluster for the servers. cw still
    watches the servers become Ready to report progress; if they are not Ready in time, if
    anything fails, or on Ctrl-C, SIGTERM or SIGHUP, what this launch created is removed before
    the error propagates (see :func:`remove_objects`).

    Args:
        kube: The connected client.
        plan: The plan to apply (namespaces in it must match ``kube.namespace`` or be absent).
        server_dry_run: Ask the API server to validate every object and persist nothing.
        services_timeout_s: How long to wait for the services before giving up (and cleaning up).
        progress: Called with one line per step, for the CLI to print.

    Raises:
        Interrupted: Ctrl-C or a termination signal; the message says what was removed.
        CwError: The first failure, with what was removed again appended to its hint.
    """
    preflight(kube, plan)
    result = LaunchResult(dry_run=server_dry_run)
    created: list[CreatedObject] = []
    owner_ref: dict[str, Any] | None = None
    try:
        for manifest in plan.manifests:
            body = _in_namespace(manifest, kube.namespace)
            kind, name = manifest["kind"], manifest["metadata"]["name"]
            if owner_ref is None and kind in ("Job", "JobSet"):
                body["spec"] = dict(body["spec"], suspend=True)
            if owner_ref is not None:
                body["metadata"]["ownerReferences"] = [owner_ref]
            try:
                made = kube.create(body, dry_run=server_dry_run)
            except Conflict:
                # Any object of the run already there: the owner just made (if any) is removed below.
                raise _run_exists(plan, kind, name) from None
            except NotFound:
                if owner_ref is None and not _namespace_readable_and_there(kube):
                    raise _no_namespace(kube) from None
                raise
            result.created.append(f"{kind}/{name}")
            if not server_dry_run:
                created.append(CreatedObject(kind, name, made["metadata"]["uid"]))
            progress(f"{'validated' if server_dry_run else 'created'} {kind} {name}")
            if owner_ref is None:
                if not made.get("metadata", {}).get("uid"):
                    made["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"  # dry run: never persisted
                owner_ref = _owner_reference(made)
        if server_dry_run:
            return result
        if plan.trainer_job is not None and plan.managed_suspend:
            kube.merge_patch(plan.owner_kind, plan.trainer_job, {"spec": {"suspend": False}})
            result.released = True
            waits = " (its trainer waits in the cluster until the servers answer)" if plan.service_deployments or plan.gang_servers else ""
            progress(f"started {plan.owner_kind} {plan.trainer_job}{waits}")
        # Under Kueue the run may wait in its queue for hours: cw does not wait with it.
        if plan.service_deployments and (plan.managed_suspend or plan.trainer_job is None):
            progress(f"waiting for {len(plan.service_deployments)} service(s) to be Ready")
            wait_for_deployments(kube, plan.run_name, plan.service_deployments, services_timeout_s, progress)
        if plan.gang_servers and plan.managed_suspend:
            progress(f"waiting for {len(plan.gang_servers)} server(s) of JobSet {plan.trainer_job} to be Ready")
            wait_for_gang_servers(kube, plan.trainer_job or plan.run_name, plan.gang_servers, services_timeout_s, progress)
        return result
    except (CwError, KeyboardInterrupt) as exc:
        left = remove_objects(kube, created) if created else []
        note = (
            "removed what it had created"
            if not left
            else f"could not remove: {', '.join(left)} (`cw delete {plan.run_name}` removes them)"
        )
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"interrupted; {note}" if created else "interrupted before anything was created") from None
        exc.hint = f"{exc.hint}; {note}" if exc.hint and created else (exc.hint or (note if created else None))
        raise
