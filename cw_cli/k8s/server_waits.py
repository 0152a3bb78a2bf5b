"""Waiting for a run's servers to be Ready, read from object status only (never by calling them):
the polling every workload kind shares, and the Deployments' own reading."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cw_cli.client.connection import Kube
from cw_cli.errors import Rejected, WaitTimeout

Progress = Callable[[str], None]


def deployment_ready(deployment: dict[str, Any]) -> bool:
    """Whether a Deployment has all its replicas Ready (read from status only)."""
    spec_replicas = deployment.get("spec", {}).get("replicas", 1)
    status = deployment.get("status") or {}
    generation_seen = status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 1)
    return generation_seen and status.get("readyReplicas", 0) >= spec_replicas


#: (ready, why the cluster refuses its pods or None) of each server, by name.
ServerStates = Callable[[list[str]], dict[str, tuple[bool, str | None]]]


def wait_until_ready(
    kube: Kube, run_name: str, names: list[str], read: ServerStates, timeout_s: float, progress: Progress, poll_s: float
) -> None:
    """Poll ``read`` until every server is Ready; stop at once if the cluster refuses one's pods.

    Raises:
        Rejected: The cluster refuses to create a server's pods (it would never become Ready).
        WaitTimeout: Not all Ready within the timeout (the message says which and why).
    """
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

    wait_until_ready(kube, run_name, names, read, timeout_s, progress, poll_s)
