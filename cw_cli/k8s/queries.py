"""Reading a run's objects from the cluster: the label selectors, reads that go out together, the
objects read by name, and log tails. Nothing here interprets what it reads (:mod:`run_view` and
:mod:`explanations` do)."""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any

from cw_cli.client.connection import Kube
from cw_cli.errors import ConfigError, CwError, Forbidden, NotFound
from cw_cli.labels import (
    COMPLETION_INDEX_ANNOTATION,
    KINDS_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RUN_LABEL,
    SWEEP_LABEL,
    managed_selector,
)
from cw_cli.render.workload import OWNERS

#: The kinds that own a run's trainer, a JobSet before a Job (a JobSet run's child Jobs are not owners).
OWNER_KINDS = tuple(reversed(OWNERS))
RUN_KINDS = (*OWNER_KINDS, "Deployment", "Service", "ConfigMap", "NetworkPolicy", "RoleBinding", "Role", "ServiceAccount")
#: Kinds every run has one of, under a name fixed by the run's (:func:`cw_cli.labels.object_names`):
#: `cw status` reads them by name, which the API server answers at once, where a label-selected
#: list scans every object of the kind in the namespace (one per run: +1.7-1.9 ms each at 1,000 runs).
NAMED_KINDS = {"ConfigMap": "config", "NetworkPolicy": "network"}
#: Kinds whose API exists only where an add-on is installed: absent means no such object.
OPTIONAL_KINDS = tuple(kind for kind in OWNER_KINDS if OWNERS[kind].add_on)
#: Kinds read whole (state, GPUs, servers); the other kinds of a run are read as metadata only
#: (names and labels: a ConfigMap alone carries cw's pod-side files, tens of KB per run).
WHOLE_KINDS = (*OWNER_KINDS, "Deployment")
#: Reads in flight at once. Each worker pays for its own TLS handshake, so a round of ten reads
#: (a run's kinds and pods) is fastest on a few kept-alive connections: on the test cluster the
#: first `cw status` round took 40 ms on 10 connections, 27 on 4 and 35 on 1 (medians of 9).
MAX_PARALLEL_READS = 4

_LABEL_VALUE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_in_parallel_section = threading.local()
#: A container's log, keyed as (namespace, pod, container).
LogKey = tuple[str, str, str]


def run_selector(run_name: str | None = None) -> str:
    """Label selector for cw's objects, optionally of one run only.

    Raises:
        ConfigError: ``run_name`` is not a run name; an empty or crafted one must never widen
            the selector to other runs (``cw delete ""`` would otherwise match every run).
    """
    selector = managed_selector()
    if run_name is None:
        return selector
    if not _LABEL_VALUE.fullmatch(run_name):
        raise ConfigError([f"{run_name!r} is not a run name"], hint="`cw list` shows the runs")
    return f"{selector},{RUN_LABEL}={run_name}"


@contextmanager
def sequential_reads() -> Iterator[None]:
    """Within this block, :func:`gather` on this thread reads one by one: for callers that
    already run many such commands at once (a sweep's launches), where fanning out again only
    opens more connections."""
    before = getattr(_in_parallel_section, "active", False)
    _in_parallel_section.active = True
    try:
        yield
    finally:
        _in_parallel_section.active = before


def gather(calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run independent API reads at once on the connection's pool, as ``{key: result}``.

    The reads of one command do not depend on each other, so their latencies overlap instead of
    adding up; the first error raised by any of them is raised here. Inside
    :func:`sequential_reads` they run in order.
    """
    if len(calls) <= 1 or getattr(_in_parallel_section, "active", False):
        return {key: call() for key, call in calls.items()}
    # Plain threads taking keys from a deque (its pops are thread-safe): concurrent.futures would
    # import logging on every command, a tenth of what `cw status` spends outside the network.
    pending = deque(calls)
    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}

    def work() -> None:
        while True:
            try:
                key = pending.popleft()
            except IndexError:
                return
            try:
                with sequential_reads():  # a read that gathers again stays on this thread
                    results[key] = calls[key]()
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller's thread
                errors[key] = exc

    workers = [threading.Thread(target=work, daemon=True) for _ in range(min(MAX_PARALLEL_READS, len(calls)))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for key in calls:  # the first error in the callers' order, as sequential reads would raise it
        if key in errors:
            raise errors[key]
    return {key: results[key] for key in calls}


def _list_kind(kube: Kube, kind: str, selector: str, all_namespaces: bool, whole: bool) -> list[dict[str, Any]]:
    try:
        if whole:
            return kube.list(kind, selector, all_namespaces=all_namespaces)
        return kube.list_metadata(kind, selector, all_namespaces=all_namespaces)
    except (NotFound, Forbidden):
        if kind in OPTIONAL_KINDS:
            return []  # JobSet is not installed (or not readable): no run uses it here
        raise


def object_calls(
    kube: Kube, selector: str, all_namespaces: bool, kinds: tuple[str, ...], whole: tuple[str, ...]
) -> dict[str, Callable[[], list[dict[str, Any]]]]:
    """One list call per kind, for :func:`gather`: whole objects of the kinds in ``whole``, metadata
    of the others; an add-on's kind that is not installed lists as empty (:data:`OPTIONAL_KINDS`)."""
    return {kind: partial(_list_kind, kube, kind, selector, all_namespaces, kind in whole) for kind in kinds}


def run_objects(
    kube: Kube,
    run_name: str | None = None,
    all_namespaces: bool = False,
    kinds: tuple[str, ...] = RUN_KINDS,
    whole: tuple[str, ...] = WHOLE_KINDS,
) -> list[tuple[str, dict[str, Any]]]:
    """(kind, object) of every object cw labelled, of one run or of all, owners first.

    The kinds are listed at once; those not in ``whole`` come as metadata only.
    """
    listed = gather(object_calls(kube, run_selector(run_name), all_namespaces, kinds, whole))
    return [(kind, obj) for kind in kinds for obj in listed[kind]]


def named_object(kube: Kube, kind: str, name: str, run_name: str, whole: bool = False) -> list[dict[str, Any]]:
    """The run's object of ``kind`` read by name (metadata only unless ``whole``), as a list like a
    selected list's: empty when it is missing or does not carry the labels :func:`run_selector` selects."""
    obj = kube.get(kind, name) if whole else kube.get_metadata(kind, name)
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    if obj is None or labels.get(RUN_LABEL) != run_name or labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
        return []
    return [obj]


def recorded_kinds(config_map: list[dict[str, Any]]) -> frozenset[str] | None:
    """The kinds of a run's objects as its ConfigMap records them (:data:`KINDS_ANNOTATION`), or
    None where there is no such record to trust: no ConfigMap, or one from an older cw."""
    if not config_map:
        return None
    value = (config_map[0]["metadata"].get("annotations") or {}).get(KINDS_ANNOTATION)
    if not isinstance(value, str) or not value:
        return None
    return frozenset(value.split(","))


def sweep_runs(kube: Kube, sweep: str) -> list[str]:
    """Names of the runs of a sweep in the namespace (its label on their ConfigMaps, which every run has).

    Raises:
        ConfigError: ``sweep`` is not a name (a crafted one must never widen the selector).
    """
    if not _LABEL_VALUE.fullmatch(sweep):
        raise ConfigError([f"{sweep!r} is not a sweep name"], hint="`cw list` shows the runs and their sweeps")
    selector = f"{run_selector()},{SWEEP_LABEL}={sweep}"
    return sorted({(o["metadata"].get("labels") or {}).get(RUN_LABEL, "") for o in kube.list("ConfigMap", selector)} - {""})


def run_names(kube: Kube) -> list[str]:
    """Names of the runs in the namespace, from their owners and servers only (for completion)."""
    names = {
        (obj["metadata"].get("labels") or {}).get(RUN_LABEL, "")
        for _, obj in run_objects(kube, kinds=WHOLE_KINDS, whole=())
    }
    return sorted(n for n in names if n)


def find_pod(kube: Kube, run_name: str, role: str, rank: int | None) -> dict[str, Any]:
    """The newest pod of a run with a role (and completion index, for multi-node trainers).

    Raises:
        NotFound: No such pod (yet).
    """
    selector = f"{run_selector(run_name)},app.kubernetes.io/component={role}"
    pods = kube.list("Pod", selector)

    def index(pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)

    if rank is not None:
        pods = [p for p in pods if index(p) == str(rank)]
    elif any(index(p) is not None for p in pods):
        pods = [p for p in pods if index(p) == "0"] or pods  # a multi-node trainer: rank 0 by default
    if not pods:
        which = f"{role} rank {rank}" if rank is not None else role
        raise NotFound(f"run {run_name!r} has no {which} pod yet", hint=f"`cw status {run_name}` says why")
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))


def read_log_tail(kube: Kube, pod: dict[str, Any], container: str, lines: int, previous: bool = False) -> list[str]:
    """The last ``lines`` lines of a container's log, through the API server; [] when it has none
    (or it cannot be read: an explanation without log lines is still an explanation)."""
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta.get('namespace') or kube.namespace}/pods/{meta['name']}/log"
    query: dict[str, Any] = {"container": container, "tailLines": lines, "previous": "true" if previous else None}
    try:
        response = kube.raw("GET", path, query=query, what=f"read the log of {meta['name']}")
        return response.read().decode(errors="replace").splitlines()
    except CwError:
        return []


def read_logs(kube: Kube, wanted: list[tuple[dict[str, Any], str, bool]], lines: int) -> dict[LogKey, list[str]]:
    """The log tails of many containers at once; a previous (crashed) container's first."""

    def tail(pod: dict[str, Any], container: str, previous: bool) -> list[str]:
        found = read_log_tail(kube, pod, container, lines, previous)
        return found if found or not previous else read_log_tail(kube, pod, container, lines)

    read = gather({f"{index}": partial(tail, pod, container, previous) for index, (pod, container, previous) in enumerate(wanted)})
    return {
        (pod["metadata"].get("namespace") or kube.namespace, pod["metadata"]["name"], container): read[f"{index}"]
        for index, (pod, container, _) in enumerate(wanted)
    }


def creation_time(obj: dict[str, Any]) -> datetime | None:
    """When an object was created (its ``creationTimestamp``), None when it does not say."""
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
