"""Put a plan on the cluster: checks first, owner first, all-or-nothing, then release the trainer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cw_cli.errors import Conflict, CwError, NotFound, WaitTimeout
from cw_cli.k8s.connection import Kube
from cw_cli.render.plan import Plan

Progress = Callable[[str], None]


@dataclass
class LaunchResult:
    """What was created.

    Attributes:
        created: ``Kind/name`` of each object, in creation order.
        released: Whether the trainer Job was released (unsuspended).
        dry_run: Whether nothing was persisted (``--server-dry-run``).
    """

    created: list[str] = field(default_factory=list)
    released: bool = False
    dry_run: bool = False


def _secret_and_volume_names(plan: Plan) -> tuple[set[str], set[str]]:
    secrets: set[str] = set()
    claims: set[str] = set()
    for manifest in plan.manifests:
        pod_spec = _pod_spec(manifest)
        if pod_spec is None:
            continue
        for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    secrets.add(ref["name"])
        for volume in pod_spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                claims.add(volume["persistentVolumeClaim"]["claimName"])
    return secrets, claims


def _pod_spec(manifest: dict[str, Any]) -> dict[str, Any] | None:
    if manifest["kind"] in ("Job", "Deployment"):
        return manifest["spec"]["template"]["spec"]
    return None


def preflight(kube: Kube, plan: Plan) -> None:
    """Refuse a run that cannot work, before creating anything.

    Raises:
        NotFound: The namespace, a named Secret or the checkpoint PVC does not exist.
        Conflict: An object of this run already exists.
    """
    try:
        kube.request("GET", f"/api/v1/namespaces/{kube.namespace}", what=f"read namespace {kube.namespace}")
    except NotFound:
        raise NotFound(
            f"namespace {kube.namespace!r} does not exist",
            hint=f"create it (kubectl create namespace {kube.namespace}) or pick another with -n",
        ) from None
    secrets, claims = _secret_and_volume_names(plan)
    for name in sorted(secrets):
        if kube.get("Secret", name) is None:
            raise NotFound(
                f"secret {name!r} (named in the config's `secrets`) does not exist in namespace {kube.namespace!r}",
                hint=f"create it, e.g. kubectl -n {kube.namespace} create secret generic {name} --from-literal=KEY=...",
            )
    for name in sorted(claims):
        if kube.get("PersistentVolumeClaim", name) is None:
            raise NotFound(
                f"PersistentVolumeClaim {name!r} (named in the config's `checkpoint_volume`, `volumes` or "
                f"`hf_cache_volume`) does not exist in namespace {kube.namespace!r}",
                hint=f"create it (kubectl -n {kube.namespace} get pvc lists the claims there), or name an existing one",
            )
    for manifest in plan.manifests:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        if kube.get(kind, name) is not None:
            raise Conflict(
                f"run {plan.run_name!r} already exists ({kind} {name} is on the cluster)",
                hint=f"choose another --name, or remove it first with `cw delete {plan.run_name}`",
            )


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


def remove_objects(kube: Kube, objects: list[tuple[str, str]]) -> list[str]:
    """Delete objects in reverse creation order; return those that could not be deleted."""
    left: list[str] = []
    for kind, name in reversed(objects):
        try:
            kube.delete(kind, name)
        except CwError:
            left.append(f"{kind}/{name}")
    return left


def deployment_ready(deployment: dict[str, Any]) -> bool:
    """Whether a Deployment has all its replicas Ready (read from status only)."""
    spec_replicas = deployment.get("spec", {}).get("replicas", 1)
    status = deployment.get("status") or {}
    generation_seen = status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 1)
    return generation_seen and status.get("readyReplicas", 0) >= spec_replicas


def wait_for_deployments(
    kube: Kube, run_name: str, names: list[str], timeout_s: float, progress: Progress, poll_s: float = 2.0
) -> None:
    """Block until every named Deployment is Ready.

    Raises:
        WaitTimeout: Not all Ready within the timeout (the message says which and why).
    """
    from cw_cli.k8s.inspect import explain_pods, run_selector

    deadline = time.monotonic() + timeout_s
    announced: set[str] = set()
    while True:
        waiting = [name for name in names if not deployment_ready(kube.get("Deployment", name) or {"metadata": {}})]
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


def launch(
    kube: Kube,
    plan: Plan,
    *,
    server_dry_run: bool = False,
    services_timeout_s: float = 1800,
    progress: Progress = lambda _: None,
) -> LaunchResult:
    """Create every object of the plan, or none.

    The first manifest is the owner (the suspended trainer Job, or the ConfigMap with
    ``--services``); every other object gets an ownerReference to it, so deleting it removes the
    run. If anything fails, or the user interrupts while cw waits for the services, the objects
    already created are removed again before the error propagates.

    Args:
        kube: The connected client.
        plan: The plan to apply (namespaces in it must match ``kube.namespace`` or be absent).
        server_dry_run: Ask the API server to validate every object and persist nothing.
        services_timeout_s: How long to wait for the services before giving up (and cleaning up).
        progress: Called with one line per step, for the CLI to print.

    Raises:
        CwError: The first failure, with what was removed again appended to its hint.
    """
    preflight(kube, plan)
    result = LaunchResult(dry_run=server_dry_run)
    created: list[tuple[str, str]] = []
    owner_ref: dict[str, Any] | None = None
    try:
        for manifest in plan.manifests:
            body = _in_namespace(manifest, kube.namespace)
            if owner_ref is not None:
                body["metadata"]["ownerReferences"] = [owner_ref]
            applied = kube.apply(body, dry_run=server_dry_run)
            kind, name = manifest["kind"], manifest["metadata"]["name"]
            result.created.append(f"{kind}/{name}")
            if not server_dry_run:
                created.append((kind, name))
            progress(f"{'validated' if server_dry_run else 'created'} {kind} {name}")
            if owner_ref is None:
                if not applied.get("metadata", {}).get("uid"):
                    applied["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"  # dry run: never persisted
                owner_ref = _owner_reference(applied)
        if server_dry_run or plan.trainer_job is None or not plan.managed_suspend:
            return result
        if plan.service_deployments:
            progress(f"waiting for {len(plan.service_deployments)} service(s) to be Ready before starting the trainer")
            wait_for_deployments(kube, plan.run_name, plan.service_deployments, services_timeout_s, progress)
        kube.merge_patch("Job", plan.trainer_job, {"spec": {"suspend": False}})
        result.released = True
        progress(f"started Job {plan.trainer_job}")
        return result
    except (CwError, KeyboardInterrupt) as exc:
        left = remove_objects(kube, created) if created else []
        note = "removed what had been created" if not left else f"could not remove: {', '.join(left)}"
        if isinstance(exc, KeyboardInterrupt):
            raise CwError(f"interrupted; {note}") from None
        exc.hint = f"{exc.hint}; {note}" if exc.hint else note
        raise
