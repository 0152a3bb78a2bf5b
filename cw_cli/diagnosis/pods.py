"""What is wrong with a pod and its containers: a disruption (preemption, eviction), an init
container still waiting for a server, an image that cannot be pulled, a missing Secret, an
OOM kill, a crash loop, a non-zero exit; and which containers' log tails would say more.

The reasons are the kubelet's (``OOMKilled``, ``ImagePullBackOff``, ``CrashLoopBackOff``,
``Evicted``) and the ``DisruptionTarget`` pod condition. Pure: pod dicts and log tails in,
:class:`Explanation` out.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from cw_cli.diagnosis.explanation import Explanation, FrameworkLookup, duration, framework_in, last_lines, parse_time
from cw_cli.diagnosis.logs import explain_log, restart_cause
from cw_cli.labels import COMPONENT_LABEL, TRAINER
from cw_cli.runtime.cw_fault import STALL_EXIT, STOPPED_EXIT

#: Waiting reasons of a container whose image cannot be pulled (kubelet's images/types.go).
IMAGE_PULL_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull")
#: Waiting reasons of a container the kubelet cannot even create (a missing Secret or key).
CONFIG_ERROR_REASONS = ("CreateContainerConfigError", "CreateContainerError")

#: A trainer's Job (or JobSet) replaces a disrupted pod by itself, without counting it as a failure.
_EVICTED_FIX = (
    "the run replaces a disrupted trainer pod by itself and resumes from its last checkpoint (a failed run: "
    "relaunch it); if the node ran short of memory, set {field} to what the run really uses (its request), "
    "so its pod is not the first one evicted"
)
#: The fix for a pod the scheduler pushed out (the same whether read from the pod or its event).
PREEMPTED_FIX = (
    "relaunch when the GPUs are free (a run resumes from its last checkpoint), or run it with a "
    "higher priority or through a Kueue queue (`queue:`) so it waits instead of being pushed out"
)
_EVICTED_BY = {
    "TerminationByKubelet": "the node (its kubelet) stopped it",
    "EvictionByEvictionAPI": "it was evicted (a node drain or `kubectl evict`)",
    "DeletionByTaintManager": "its node was tainted NoExecute",
    "DeletionByPodGC": "its node is gone",
}
_PULL_FIX = (
    "check the image name and tag (`image:` or --image; `docker manifest inspect IMAGE`); a private "
    "registry needs a pull secret: `kubectl create secret docker-registry regcred ...` and "
    "`kubectl patch serviceaccount default -p '{\"imagePullSecrets\": [{\"name\": \"regcred\"}]}'` "
    "(or the ServiceAccount of `service_account:`)"
)
_SIGNALS = {137: " (SIGKILL)", 143: " (SIGTERM)", 139: " (SIGSEGV)", 134: " (SIGABRT)"}


def _role(pod: dict[str, Any]) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL) or "pod"


def _container_spec(pod: dict[str, Any], container: str) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    return next((c for c in (spec.get("containers") or []) + (spec.get("initContainers") or []) if c.get("name") == container), {})


def _memory_field(role: str) -> str:
    return "`memory:`" if role == TRAINER else f"`services.{role}.memory`"


def log_requests(pod: dict[str, Any]) -> list[tuple[str, bool]]:
    """(container, previous) whose log tail would explain this pod: failed or crash-looping
    containers, and init containers still waiting for a server. ``previous`` asks for the log
    of the container's last run (a crash loop's current container has barely started)."""
    status = pod.get("status") or {}
    wanted: list[tuple[str, bool]] = []
    for cstatus in status.get("initContainerStatuses") or []:
        state = cstatus.get("state") or {}
        if state.get("running") and str(cstatus.get("name", "")).startswith("wait-"):
            wanted.append((cstatus["name"], False))
    for cstatus in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        state = cstatus.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting") or {}
        if terminated and terminated.get("exitCode", 0) != 0 and terminated.get("reason") != "OOMKilled":
            wanted.append((cstatus["name"], False))
        elif waiting.get("reason") == "CrashLoopBackOff":
            wanted.append((cstatus["name"], True))
    return wanted


def explain_pod(
    pod: dict[str, Any],
    logs: dict[str, list[str]] | None = None,
    now: datetime | None = None,
    frameworks: FrameworkLookup | None = None,
) -> list[Explanation]:
    """What is wrong with one pod, most specific first (empty when nothing is).

    Args:
        pod: The pod, as the API server returns it.
        logs: Container name -> the tail of its log (see :func:`log_requests`); optional.
        now: The current time (for how long an init container has waited).
        frameworks: Finds the framework the pod's label names (default
            :func:`~cw_cli.diagnosis.explanation.framework_of`), asked only when a log is explained.
    """
    logs = logs or {}
    name = (pod.get("metadata") or {}).get("name")
    status = pod.get("status") or {}
    found = _disruption(pod, name)
    found += _init_waiting(pod, name, logs, now or datetime.now(timezone.utc))
    for cstatus in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        found += _explain_container(pod, name, cstatus, logs.get(cstatus.get("name", "")), frameworks)
    return found


def _disruption(pod: dict[str, Any], name: str | None) -> list[Explanation]:
    """The pod's preemption or eviction, from its DisruptionTarget condition or its Evicted reason."""
    role = _role(pod)
    status = pod.get("status") or {}
    evicted_fix = _EVICTED_FIX.format(field=_memory_field(role))
    for condition in status.get("conditions") or []:
        if condition.get("type") != "DisruptionTarget" or condition.get("status") != "True":
            continue
        reason = condition.get("reason") or ""
        detail = condition.get("message") or reason
        if reason == "PreemptionByScheduler":
            message = f"the {role} pod was preempted to make room for a higher-priority pod ({detail})"
            return [Explanation("preempted", "preempted", message, PREEMPTED_FIX, name)]
        evicted_by = _EVICTED_BY.get(reason, f"it was disrupted ({reason})")
        shown = status.get("message") if status.get("reason") == "Evicted" else detail
        message = f"the {role} pod was evicted: {evicted_by}: {shown}".rstrip(": ")
        return [Explanation("evicted", "evicted", message, evicted_fix, name)]
    if status.get("reason") == "Evicted":
        message = f"the {role} pod was evicted by its node: {status.get('message') or 'Evicted'}"
        return [Explanation("evicted", "evicted", message, evicted_fix, name)]
    return []


def _init_waiting(pod: dict[str, Any], name: str | None, logs: dict[str, list[str]], now: datetime) -> list[Explanation]:
    """Init containers still waiting for a server to answer."""
    role = _role(pod)
    found = []
    for cstatus in (pod.get("status") or {}).get("initContainerStatuses") or []:
        container = str(cstatus.get("name", ""))
        running = (cstatus.get("state") or {}).get("running")
        if not (running and container.startswith("wait-")):
            continue
        server = container.removeprefix("wait-")
        started = parse_time(running.get("startedAt"))
        waited = f" for {duration((now - started).total_seconds())}" if started else ""
        found.append(Explanation(
            "init-waiting", f"waiting for {server}",
            f"the {role} has not started: its init container {container} has waited{waited} for its {server} service to answer",
            f"see whether the {server} server runs (`cw status` lists it; `cw logs RUN --role {server}`); "
            "it gives up after the services timeout",
            name, container, last_lines(logs.get(container, []), 3),
        ))  # fmt: skip
    return found


def _explain_container(
    pod: dict[str, Any], name: str | None, cstatus: dict[str, Any], log: list[str] | None, frameworks: FrameworkLookup | None
) -> list[Explanation]:
    """One container: it cannot start, was OOM-killed, crash-loops, or its log or exit code tells."""
    cannot = _cannot_start(pod, name, cstatus)
    if cannot is not None:
        return [cannot]
    oom = _oom_killed(pod, name, cstatus)
    if oom is not None:
        return [oom]
    restarted = _restarted(pod, name, cstatus, log)
    if restarted is not None:
        return [restarted]
    from_log = None
    if log:
        framework = framework_in(pod, frameworks)
        words, hints = (framework.words, framework.failure_hints()) if framework is not None else (None, ())
        from_log = explain_log(log, name, container=str(cstatus.get("name", "?")), words=words, hints=hints)
    waiting = (cstatus.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") == "CrashLoopBackOff":
        return [_crash_loop(pod, name, cstatus, log, from_log)]
    if from_log is not None:
        return [from_log]
    return _exit_code(pod, name, cstatus, log)


def _cannot_start(pod: dict[str, Any], name: str | None, cstatus: dict[str, Any]) -> Explanation | None:
    """A container whose image cannot be pulled, or that the kubelet cannot create."""
    container = str(cstatus.get("name", "?"))
    waiting = (cstatus.get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason") or ""
    if reason in IMAGE_PULL_REASONS:
        image = str(_container_spec(pod, container).get("image") or cstatus.get("image") or "?")
        repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        detail = f": {waiting['message']}" if waiting.get("message") else ""
        message = f"cannot pull the image of {container}: {image} (image {repo}, tag {tag}): {reason}{detail}"
        return Explanation("image-pull", "image pull", message, _PULL_FIX, name, container)
    if reason in CONFIG_ERROR_REASONS:
        return Explanation(
            "config-error", "config error",
            f"the kubelet cannot create {container}: {waiting.get('message') or reason}",
            "create the Secret or ConfigMap it names in the run's namespace (or fix `secrets:` in the config)",
            name, container,
        )  # fmt: skip
    return None


def _oom_killed(pod: dict[str, Any], name: str | None, cstatus: dict[str, Any]) -> Explanation | None:
    """A container killed (now or in its last run) for passing its memory limit."""
    container = str(cstatus.get("name", "?"))
    terminated = (cstatus.get("state") or {}).get("terminated") or {}
    last = (cstatus.get("lastState") or {}).get("terminated") or {}
    oom = terminated if terminated.get("reason") == "OOMKilled" else last if last.get("reason") == "OOMKilled" else None
    if oom is None:
        return None
    limit = ((_container_spec(pod, container).get("resources") or {}).get("limits") or {}).get("memory")
    return Explanation(
        "oom-killed", f"OOMKilled ({container})",
        f"{container} was killed for using more memory than its limit" + (f" of {limit}" if limit else "")
        + f" (OOMKilled, exit code {oom.get('exitCode', 137)}); this is CPU memory, not GPU memory",
        f"raise {_memory_field(_role(pod))}" + (f" above {limit}" if limit else "")
        + " (dataloader workers, a large dataset in memory or checkpoint saving use it); "
        "/dev/shm counts against it too (`shm_size:`)",
        name, container,
    )  # fmt: skip


def restart_exit(pod: dict[str, Any]) -> int | None:
    """The exit code with which a finished trainer pod asked to be restarted (cw_fault.py's 75 after
    a stall, 143 after a warned stop that saved a checkpoint), else None."""
    if _role(pod) != TRAINER or (pod.get("status") or {}).get("phase") in ("Pending", "Running"):
        return None
    for cstatus in (pod.get("status") or {}).get("containerStatuses") or []:
        code = ((cstatus.get("state") or {}).get("terminated") or {}).get("exitCode")
        if code in (STALL_EXIT, STOPPED_EXIT):
            return int(code)
    return None


def _restarted(pod: dict[str, Any], name: str | None, cstatus: dict[str, Any], log: list[str] | None) -> Explanation | None:
    """A trainer that ended to be restarted: after a stall (exit 75) or a warned stop (exit 143 with
    cw_fault's line; a bare 143 is a SIGTERM like any other), from its last log lines."""
    container = str(cstatus.get("name", "?"))
    code = ((cstatus.get("state") or {}).get("terminated") or {}).get("exitCode")
    if _role(pod) != TRAINER or code not in (STALL_EXIT, STOPPED_EXIT):
        return None
    cause = restart_cause(log or [])
    lines = [line for line in last_lines(log or [], 20) if "[cw-launch]" in line][-3:]
    if code == STALL_EXIT:
        if cause is not None and cause.kind == "stalled":
            what = f"no step since {cause.since} after step {cause.step}; stacks in {cause.stacks}"
        else:
            what = "no step for longer than the stall timeout; every rank's stacks are in <run folder>/.cw/stacks-<time>/"
        return Explanation(
            "stall", "restarted after a stall", f"restarted after a stall: {what} (exit {code})",
            "each rank's Python stacks in that folder (on the checkpoint volume) show where it waited; "
            "if steps are this slow on purpose, set `stall_timeout:` (seconds)",
            name, container, lines,
        )  # fmt: skip
    if cause is None or cause.kind != "stopped":
        return None
    return Explanation(
        "warned-stop", "restarted after a warned stop",
        f"restarted after a warned stop (checkpoint at step {cause.step}: {cause.checkpoint}); it resumes from it",
        "", name, container, lines,
    )  # fmt: skip


def _crash_loop(
    pod: dict[str, Any], name: str | None, cstatus: dict[str, Any], log: list[str] | None, from_log: Explanation | None
) -> Explanation:
    container, role = str(cstatus.get("name", "?")), _role(pod)
    code = ((cstatus.get("lastState") or {}).get("terminated") or {}).get("exitCode")
    return Explanation(
        "crash-loop", f"crash loop ({container})",
        f"{container} keeps crashing: restarted {cstatus.get('restartCount', 0)} times"
        + (f", last exit code {code}" if code is not None else "")
        + (f" ({from_log.summary})" if from_log else ""),
        from_log.fix if from_log else f"its last log lines are below; `cw logs RUN --role {role}` shows more",
        name, container, from_log.log if from_log else last_lines(log or []),
    )  # fmt: skip


def _exit_code(pod: dict[str, Any], name: str | None, cstatus: dict[str, Any], log: list[str] | None) -> list[Explanation]:
    container = str(cstatus.get("name", "?"))
    terminated = (cstatus.get("state") or {}).get("terminated") or {}
    code = terminated.get("exitCode")
    if not terminated or code in (0, None):
        return []
    detail = f": {terminated['message']}" if terminated.get("message") else ""
    return [Explanation(
        "exit-code", f"exit {code} ({container})",
        f"{container} exited with code {code}{_SIGNALS.get(int(code), '')}{detail}",
        f"its last log lines are below; `cw logs RUN --role {_role(pod)}` shows more",
        name, container, last_lines(log or []),
    )]  # fmt: skip


def preemption_events(events: list[dict[str, Any]], run_name: str, known_pods: set[str]) -> list[Explanation]:
    """Explanations of the run's pods the scheduler preempted, from its ``Preempted`` events.

    A preempted pod is deleted: once its Job has counted it, only the scheduler's event (kept an
    hour by default) still says what happened. Pods already explained (``known_pods``) are skipped.
    """
    # Pod names are <run>-<role>-...: a bare prefix would also match run "<run>-0" of a sweep.
    owned = re.compile(rf"^{re.escape(run_name)}-(trainer|server|reward)-")
    found: list[Explanation] = []
    for event in events:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        pod = involved.get("name") or ""
        if event.get("reason") != "Preempted" or involved.get("kind") != "Pod" or not owned.match(pod):
            continue
        if pod in known_pods or any(e.pod == pod for e in found):
            continue
        message = event.get("message") or event.get("note") or "preempted by the scheduler"
        found.append(Explanation(
            "preempted", "preempted",
            f"the pod was preempted to make room for a higher-priority pod ({message})", PREEMPTED_FIX, pod,
        ))
    return found
