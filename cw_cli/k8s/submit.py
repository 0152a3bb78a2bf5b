"""Put a plan on the cluster: checks first, owner first, all-or-nothing, created never applied over."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from msgspec import Struct, field

from cw_cli.client.connection import Kube
from cw_cli.errors import ClusterUnreachable, Conflict, CwError, Forbidden, Interrupted, NotFound
from cw_cli.k8s.server_waits import Progress, deployment_ready, wait_for_deployments
from cw_cli.k8s.workloads import OnCluster, on_cluster
from cw_cli.render.plan import DEFAULT_SERVICES_TIMEOUT_S, Plan
from cw_cli.render.workload import OWNERS

#: The server waits are read from here too (the api's `Run.wait_services`).
__all__ = ["CreatedObject", "LaunchResult", "deployment_ready", "launch", "preflight", "remove_objects", "wait_for_deployments"]


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


def _priority_classes(plan: Plan) -> dict[str, str]:
    """Each PriorityClass the run's pods name, with the config field that names it: the run's own,
    and the one of the evaluation Jobs its watcher creates later (rendered into its ConfigMap)."""
    import json

    from cw_cli.render.evaluation import JOB_FILE

    named = {str(spec["priorityClassName"]): "priority_class" for m in plan.manifests for spec in _pod_specs(m)
             if spec.get("priorityClassName")}  # fmt: skip
    for manifest in plan.manifests:
        later = (manifest.get("data") or {}).get(JOB_FILE) if manifest["kind"] == "ConfigMap" else None
        if later:
            name = json.loads(later)["spec"]["template"]["spec"].get("priorityClassName")
            if name:
                named.setdefault(str(name), "eval.priority_class")
    return named


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
                f"secret {name!r} (named in the config's `secrets` or `notify.secret`) does not exist in namespace {kube.namespace!r}",
                hint=f"create it, e.g. kubectl -n {kube.namespace} create secret generic {name} --from-literal=KEY=...",
            )
    for name in sorted(claims):
        if found[f"PersistentVolumeClaim/{name}"] is None:
            raise NotFound(
                f"PersistentVolumeClaim {name!r} (named in the config's `checkpoint_volume`, `volumes` or "
                f"`hf_cache_volume`) does not exist in namespace {kube.namespace!r}",
                hint=f"create it (kubectl -n {kube.namespace} get pvc lists the claims there), or name an existing one",
            )


def _check_priority_classes(kube: Kube, names: dict[str, str]) -> None:
    """Refuse a PriorityClass that does not exist: the Job would be created and every pod refused.

    A user who may not read PriorityClasses (cluster-scoped) is not stopped: the pods' refusal
    is then explained by `cw status` as before.

    Raises:
        NotFound: The cluster has no PriorityClass of a name the config gives.
    """
    for name, field_name in sorted(names.items()):
        try:
            found = kube.get("PriorityClass", name)
        except Forbidden:
            return
        if found is None:
            hint = "kubectl get priorityclasses lists them; name one, or leave priority_class out"
            if field_name == "eval.priority_class":  # cw's default: an admin applies it once
                hint = (f"a cluster admin applies {name} once (docs/evaluation.md), or set eval.priority_class: null "
                        "to run the evaluations at the default priority")  # fmt: skip
            raise NotFound(f"PriorityClass {name!r} (the config's `{field_name}`) does not exist on the cluster", hint=hint)


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
    kind = on_cluster(plan.owner_kind)
    try:
        _create_all(kube, plan, kind, result, created, progress)
        if not server_dry_run:
            result.released = kind.release(kube, plan, progress)
            kind.wait_for_servers(kube, plan, services_timeout_s, progress)
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


def _create_all(
    kube: Kube, plan: Plan, kind: OnCluster, result: LaunchResult, created: list[CreatedObject], progress: Progress
) -> None:
    """Create the plan's objects in order, the owner first (as its kind creates it), every other
    one owned by it; record each in ``result`` and, unless nothing is persisted, in ``created``."""
    owner_ref: dict[str, Any] | None = None
    for manifest in plan.manifests:
        body = _in_namespace(manifest, kube.namespace)
        if owner_ref is None:
            body = kind.create_body(body)
        else:
            body["metadata"]["ownerReferences"] = [owner_ref]
        made = _create(kube, plan, body, first=owner_ref is None, dry_run=result.dry_run)
        object_kind, name = manifest["kind"], manifest["metadata"]["name"]
        result.created.append(f"{object_kind}/{name}")
        if not result.dry_run:
            created.append(CreatedObject(object_kind, name, made["metadata"]["uid"]))
        progress(f"{'validated' if result.dry_run else 'created'} {object_kind} {name}")
        if owner_ref is None:
            if not made.get("metadata", {}).get("uid"):
                made["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"  # dry run: never persisted
            owner_ref = _owner_reference(made)


def _create(kube: Kube, plan: Plan, body: dict[str, Any], *, first: bool, dry_run: bool) -> dict[str, Any]:
    """Create one object; an object of the run already there means the run exists.

    Raises:
        Conflict: The object exists (the owner just made, if any, is removed by the caller).
        NotFound: The namespace does not exist (named so when the first object's create says 404).
    """
    try:
        return kube.create(body, dry_run=dry_run)
    except Conflict:
        raise _run_exists(plan, body["kind"], body["metadata"]["name"]) from None
    except NotFound:
        if first and not _namespace_readable_and_there(kube):
            raise _no_namespace(kube) from None
        raise
