"""Why a run died (or is stuck), in plain words, with the fix and the log lines that show it.

Pure functions: pod, Job and JobSet dicts as the API server returns them, plus log tails the
caller read (through the API server), in; a list of :class:`Explanation` out. Nothing here
talks to the cluster or prints.

The texts matched in logs are the real ones: torch's ``torch.OutOfMemoryError: CUDA out of
memory. Tried to allocate ...`` (c10/cuda/CUDACachingAllocator.cpp), ProcessGroupNCCL's
``Watchdog caught collective operation timeout: WorkNCCL(...) ran for ... milliseconds before
timing out.``, huggingface_hub's ``401 Client Error. ... Repository Not Found for url`` and
``GatedRepoError`` / ``Cannot access gated repo for url`` (utils/_http.py), transformers'
``You are trying to access a gated repo``; on the Kubernetes side the kubelet's reasons
(``OOMKilled``, ``ImagePullBackOff``, ``CrashLoopBackOff``, ``Evicted``), the ``DisruptionTarget``
pod condition and the Job controller's ``BackoffLimitExceeded`` / ``DeadlineExceeded`` /
``PodFailurePolicy`` and JobSet's ``ReachedMaxRestarts``.

What only a framework knows comes from the framework the run's ``app.kubernetes.io/name`` label
names (:func:`cw_cli.frameworks.registry.framework_named`, loaded only when a log or a deadline
is explained): its keys in the advice (``BaseTrainingFramework.words``: Axolotl's CUDA-OOM fix
says ``micro_batch_size``, not TRL's ``per_device_train_batch_size``) and the failures its
trainer's log shows (``BaseTrainingFramework.failure_hints``). A framework that declares no
words gets the advice in plain words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field
from msgspec.structs import asdict

from cw_cli.estimate.words import ConfigWords, cuda_oom_fix, shorter_run
from cw_cli.labels import COMPONENT_LABEL, NAME_LABEL, TRAINER

if TYPE_CHECKING:
    from cw_cli.frameworks.base import BaseTrainingFramework, FailureHint

#: Finds the framework a run's label names (None: no such framework); see :func:`framework_of`.
FrameworkLookup = Callable[[str], "BaseTrainingFramework | None"]

#: Lines of a container's log shown with an explanation.
SHOWN_LINES = 5
#: Longest log line kept (a tokenizer dump or a progress bar can be one huge line).
MAX_LINE = 300

#: The order in which causes explain a run: the most specific root cause first. A backoff limit
#: or a deadline is only the last step of something a pod shows better.
PRIORITY = (
    "cuda-oom",
    "oom-killed",
    "hf-auth",
    "nccl-timeout",
    "image-pull",
    "config-error",
    "evicted",
    "preempted",
    "crash-loop",
    "init-waiting",
    "exit-code",
    "deadline",
    "max-restarts",
    "rank-failed",
    "backoff-limit",
    "failed",
)

#: Waiting reasons of a container whose image cannot be pulled (kubelet's images/types.go).
IMAGE_PULL_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull")
#: Waiting reasons of a container the kubelet cannot even create (a missing Secret or key).
CONFIG_ERROR_REASONS = ("CreateContainerConfigError", "CreateContainerError")


class Explanation(Struct):
    """One reason a run failed or is stuck.

    Attributes:
        kind: Stable code (see :data:`PRIORITY` and docs/output.md).
        summary: A few words for `cw list`, e.g. ``OOMKilled (trainer)``.
        message: What happened, in plain words.
        fix: What to change.
        pod: The pod it is about (None for the Job or JobSet).
        container: The container it is about.
        log: The last relevant lines of that container's log.
    """

    kind: str
    summary: str
    message: str
    fix: str = ""
    pod: str | None = None
    container: str | None = None
    log: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line: where, and what happened."""
        where = f"{self.pod}: " if self.pod else ""
        return f"{where}{self.message}"

    def as_dict(self) -> dict[str, Any]:
        """The fields of docs/output.md (`explanations[]`)."""
        return asdict(self)


# --- logs ---------------------------------------------------------------------------------

# Patterns as text, compiled on first use (``re`` caches them): most commands read no failed
# container's log, and compiling them all at import is a tenth of what `cw status` spends outside
# the network.

_CUDA_OOM = r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"
_CUDA_OOM_SIZE = r"Tried to allocate ([\d.]+ [KMGT]?i?B)"
_NCCL_TIMEOUT = (
    r"Watchdog caught collective operation timeout|NCCL operations have failed or timed out|NCCL operation timed out"
)
_NCCL_COLLECTIVE = r"OpType=(\w+).*?ran for (\d+) milliseconds"
_HF_GATED = r"GatedRepoError|Cannot access gated repo|You are trying to access a gated repo"
_HF_401 = (
    r"\b401 Client Error|Client error '401 Unauthorized'|Invalid credentials in Authorization header"
    r"|Invalid user token|Repository Not Found for url|RepositoryNotFoundError"
)
_HF_403 = r"\b403 Client Error|\b403 Forbidden: |Client error '403 Forbidden'|Make sure your token has the correct permissions"
_HF_STATUS = r"\b(40[134]) Client Error|Client error '(40[134])|\b(403) Forbidden: "
_HF_URL = r"https://huggingface\.co/(?:api/)?(?:models/|datasets/)?(?!docs/|api/)([\w.-]+/[\w-]+(?:\.[\w-]+)*?)(?=[/\s.]*(?:$|\s|/))"


def _clip(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def last_lines(log: Iterable[str], count: int = SHOWN_LINES) -> list[str]:
    """The last ``count`` non-blank lines of a log."""
    lines = [_clip(line) for line in log if line.strip()]
    return lines[-count:]


def _around(lines: list[str], index: int, count: int = SHOWN_LINES) -> list[str]:
    """Up to ``count`` non-blank lines ending a little after line ``index`` (a traceback's end)."""
    start = max(0, index - count + 2)
    return [_clip(line) for line in lines[start : index + 2] if line.strip()][-count:]


def _last_match(lines: list[str], pattern: str) -> int | None:
    search = re.compile(pattern).search
    for index in range(len(lines) - 1, -1, -1):
        if search(lines[index]):
            return index
    return None


def framework_of(name: str) -> BaseTrainingFramework | None:
    """The framework of a run's label, loaded on first use (as ``cw <name>`` loads it)."""
    from cw_cli.frameworks.registry import framework_named

    return framework_named(name)


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _framework(obj: dict[str, Any], lookup: FrameworkLookup | None) -> BaseTrainingFramework | None:
    """The framework an object's label names, or None (no label, no such framework)."""
    name = _labels(obj).get(NAME_LABEL)
    return (lookup or framework_of)(name) if name else None


def explain_log(
    log: list[str],
    pod: str | None = None,
    container: str | None = None,
    *,
    words: ConfigWords | None = None,
    hints: Sequence[FailureHint] = (),
) -> Explanation | None:
    """The cause a failed container's log shows, if it is one cw knows (CUDA OOM, HF token, NCCL)
    or one the run's framework explains.

    Args:
        log: The log's last lines.
        pod: The pod, for the explanation.
        container: The container, for the explanation.
        words: The framework's keys, for the advice (None: plain words).
        hints: The framework's own failures, searched after cw's.
    """
    lines = list(log)
    index = _last_match(lines, _CUDA_OOM)
    if index is not None:
        size = next((m.group(1) for m in map(re.compile(_CUDA_OOM_SIZE).search, lines[: index + 1][::-1]) if m), None)
        wanted = f" (it tried to allocate {size} more)" if size else ""
        return Explanation(
            "cuda-oom",
            "CUDA OOM",
            f"{container or 'the container'} ran out of GPU memory: torch.OutOfMemoryError, CUDA out of memory{wanted}",
            cuda_oom_fix(words),
            pod,
            container,
            _around(lines, index),
        )
    hf_patterns = (("gated", _HF_GATED), ("401", _HF_401), ("403", _HF_403))
    hf = [(i, kind) for kind, pattern in hf_patterns if (i := _last_match(lines, pattern)) is not None]
    if hf:
        index, kind = max(hf, key=lambda item: (item[1] == "gated", item[0]))
        text = "\n".join(lines[max(0, index - 5) : index + 3])
        repo = next(iter(re.findall(_HF_URL, text)), None)
        what = f" for {repo}" if repo else ""
        if kind == "403" and "huggingface" not in text:
            hf = []  # a 403 from some other service: not the Hub's
        elif kind == "gated":
            summary, message = "HF gated repo", f"the Hugging Face Hub refused access to a gated repo{what} (GatedRepoError)"
            fix = (
                "accept the model's terms on huggingface.co with the account of your token, then give the run "
                "that token: a Secret (kubectl create secret generic hf-token --from-literal=HF_TOKEN=hf_...) "
                "and `secrets: {HF_TOKEN: hf-token}` in the config"
            )
        else:
            status = next((next(g for g in m.groups() if g) for m in map(re.compile(_HF_STATUS).search, text.splitlines()) if m), kind)
            summary = "HF repo not found" if status == "404" else f"HF token {status}"
            message = (
                f"the Hugging Face Hub answered {status}{what}: "
                + (
                    "no such repo, or a private one the token cannot read"
                    if status == "404"
                    else "no token, a wrong one, or a repo it may not read"
                )
            )
            fix = (
                "give the run a token that can read it: a Secret (kubectl create secret generic hf-token "
                "--from-literal=HF_TOKEN=hf_...) and `secrets: {HF_TOKEN: hf-token}` in the config; "
                "check the repo id too (without a token the Hub answers 401 for a repo that does not exist)"
            )
        if hf:
            return Explanation("hf-auth", summary, message, fix, pod, container, _around(lines, index))
    index = _last_match(lines, _NCCL_TIMEOUT)
    if index is not None:
        match = next((m for m in map(re.compile(_NCCL_COLLECTIVE).search, lines[max(0, index - 3) : index + 3]) if m), None)
        what = f" ({match.group(1)} ran {int(match.group(2)) / 1000:g} s)" if match else ""
        return Explanation(
            "nccl-timeout",
            "NCCL timeout",
            f"an NCCL collective timed out{what}: the ranks stopped waiting for each other (ProcessGroupNCCL watchdog)",
            "one rank stalled or died first: read the other ranks' logs (`cw logs RUN --rank N`); check the network "
            "between the nodes (rdma: true on InfiniBand/RoCE nodes) and run with env: {NCCL_DEBUG: INFO}",
            pod,
            container,
            _around(lines, index),
        )
    for hint in hints:
        index = _last_match(lines, hint.pattern)
        if index is not None:
            return Explanation(hint.kind, hint.summary, hint.message, hint.fix, pod, container, _around(lines, index))
    return None


# --- pods ---------------------------------------------------------------------------------


def _parse_time(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def duration(seconds: float) -> str:
    """``1h 5m``, ``3m 20s``, ``12s``."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


#: A trainer's Job (or JobSet) replaces a disrupted pod by itself, without counting it as a failure.
_EVICTED_FIX = (
    "the run replaces a disrupted trainer pod by itself and resumes from its last checkpoint (a failed run: "
    "relaunch it); if the node ran short of memory, set {field} to what the run really uses (its request), "
    "so its pod is not the first one evicted"
)


def _role(pod: dict[str, Any]) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL) or "pod"


def _memory_limit(pod: dict[str, Any], container: str) -> str | None:
    for spec in ((pod.get("spec") or {}).get("containers") or []) + ((pod.get("spec") or {}).get("initContainers") or []):
        if spec.get("name") == container:
            return ((spec.get("resources") or {}).get("limits") or {}).get("memory")
    return None


def _image(pod: dict[str, Any], container: str, status: dict[str, Any]) -> str:
    for spec in ((pod.get("spec") or {}).get("containers") or []) + ((pod.get("spec") or {}).get("initContainers") or []):
        if spec.get("name") == container and spec.get("image"):
            return str(spec["image"])
    return str(status.get("image") or "?")


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
        frameworks: Finds the framework the pod's label names (default :func:`framework_of`),
            asked only when a log is explained.
    """
    logs = logs or {}
    now = now or datetime.now(timezone.utc)
    name = (pod.get("metadata") or {}).get("name")
    role = _role(pod)
    status = pod.get("status") or {}
    found: list[Explanation] = []

    for condition in status.get("conditions") or []:
        if condition.get("type") != "DisruptionTarget" or condition.get("status") != "True":
            continue
        reason = condition.get("reason") or ""
        detail = condition.get("message") or reason
        if reason == "PreemptionByScheduler":
            found.append(Explanation(
                "preempted", "preempted",
                f"the {role} pod was preempted to make room for a higher-priority pod ({detail})",
                PREEMPTED_FIX,
                name,
            ))
        else:
            evicted_by = {
                "TerminationByKubelet": "the node (its kubelet) stopped it",
                "EvictionByEvictionAPI": "it was evicted (a node drain or `kubectl evict`)",
                "DeletionByTaintManager": "its node was tainted NoExecute",
                "DeletionByPodGC": "its node is gone",
            }.get(reason, f"it was disrupted ({reason})")
            message = status.get("message") if status.get("reason") == "Evicted" else detail
            found.append(Explanation(
                "evicted", "evicted",
                f"the {role} pod was evicted: {evicted_by}: {message}".rstrip(": "),
                _EVICTED_FIX.format(field=_memory_field(role)),
                name,
            ))
        break
    else:
        if status.get("reason") == "Evicted":
            found.append(Explanation(
                "evicted", "evicted",
                f"the {role} pod was evicted by its node: {status.get('message') or 'Evicted'}",
                _EVICTED_FIX.format(field=_memory_field(role)),
                name,
            ))

    for cstatus in status.get("initContainerStatuses") or []:
        container = str(cstatus.get("name", ""))
        running = (cstatus.get("state") or {}).get("running")
        if running and container.startswith("wait-"):
            server = container.removeprefix("wait-")
            started = _parse_time(running.get("startedAt"))
            waited = f" for {duration((now - started).total_seconds())}" if started else ""
            found.append(Explanation(
                "init-waiting", f"waiting for {server}",
                f"the {role} has not started: its init container {container} has waited{waited} for its {server} service to answer",
                f"see whether the {server} server runs (`cw status` lists it; `cw logs RUN --role {server}`); "
                "it gives up after the services timeout",
                name, container, last_lines(logs.get(container, []), 3),
            ))

    for cstatus in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        found += _explain_container(pod, name, role, cstatus, logs.get(cstatus.get("name", "")), frameworks)
    return found


def _explain_container(
    pod: dict[str, Any],
    name: str | None,
    role: str,
    cstatus: dict[str, Any],
    log: list[str] | None,
    frameworks: FrameworkLookup | None,
) -> list[Explanation]:
    container = str(cstatus.get("name", "?"))
    state = cstatus.get("state") or {}
    waiting = state.get("waiting") or {}
    terminated = state.get("terminated") or {}
    last = (cstatus.get("lastState") or {}).get("terminated") or {}
    reason = waiting.get("reason") or ""
    found: list[Explanation] = []

    if reason in IMAGE_PULL_REASONS:
        image = _image(pod, container, cstatus)
        repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        found.append(Explanation(
            "image-pull", "image pull",
            f"cannot pull the image of {container}: {image} (image {repo}, tag {tag}): {reason}"
            + (f": {waiting['message']}" if waiting.get("message") else ""),
            "check the image name and tag (`image:` or --image; `docker manifest inspect IMAGE`); a private "
            "registry needs a pull secret: `kubectl create secret docker-registry regcred ...` and "
            "`kubectl patch serviceaccount default -p '{\"imagePullSecrets\": [{\"name\": \"regcred\"}]}'` "
            "(or the ServiceAccount of `service_account:`)",
            name, container,
        ))
        return found
    if reason in CONFIG_ERROR_REASONS:
        found.append(Explanation(
            "config-error", "config error",
            f"the kubelet cannot create {container}: {waiting.get('message') or reason}",
            "create the Secret or ConfigMap it names in the run's namespace (or fix `secrets:` in the config)",
            name, container,
        ))
        return found

    oom = terminated if terminated.get("reason") == "OOMKilled" else last if last.get("reason") == "OOMKilled" else None
    if oom is not None:
        limit = _memory_limit(pod, container)
        found.append(Explanation(
            "oom-killed", f"OOMKilled ({container})",
            f"{container} was killed for using more memory than its limit"
            + (f" of {limit}" if limit else "")
            + f" (OOMKilled, exit code {oom.get('exitCode', 137)}); this is CPU memory, not GPU memory",
            f"raise {_memory_field(role)}" + (f" above {limit}" if limit else "")
            + " (dataloader workers, a large dataset in memory or checkpoint saving use it); "
            "/dev/shm counts against it too (`shm_size:`)",
            name, container,
        ))
        return found

    from_log = None
    if log:
        framework = _framework(pod, frameworks)
        words, hints = (framework.words, framework.failure_hints()) if framework is not None else (None, ())
        from_log = explain_log(log, name, container, words=words, hints=hints)
    if reason == "CrashLoopBackOff":
        code = last.get("exitCode")
        restarts = cstatus.get("restartCount", 0)
        found.append(Explanation(
            "crash-loop", f"crash loop ({container})",
            f"{container} keeps crashing: restarted {restarts} times"
            + (f", last exit code {code}" if code is not None else "")
            + (f" ({from_log.summary})" if from_log else ""),
            from_log.fix if from_log else f"its last log lines are below; `cw logs RUN --role {role}` shows more",
            name, container, from_log.log if from_log else last_lines(log or []),
        ))
        return found
    if from_log is not None:
        return [from_log]
    code = terminated.get("exitCode")
    if terminated and code not in (0, None):
        signal = {137: " (SIGKILL)", 143: " (SIGTERM)", 139: " (SIGSEGV)", 134: " (SIGABRT)"}.get(int(code), "")
        found.append(Explanation(
            "exit-code", f"exit {code} ({container})",
            f"{container} exited with code {code}{signal}" + (f": {terminated['message']}" if terminated.get("message") else ""),
            f"its last log lines are below; `cw logs RUN --role {role}` shows more",
            name, container, last_lines(log or []),
        ))
    return found


# --- Jobs and JobSets -----------------------------------------------------------------------


def _failed_condition(obj: dict[str, Any], types: tuple[str, ...]) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") in types and condition.get("status") == "True":
            return condition
    return None


def explain_owner(kind: str, obj: dict[str, Any], frameworks: FrameworkLookup | None = None) -> list[Explanation]:
    """Why a trainer Job or a JobSet failed, from its conditions (empty when it has not).

    Args:
        kind: ``Job`` or ``JobSet``.
        obj: The object, as the API server returns it.
        frameworks: Finds the framework its label names (default :func:`framework_of`), asked
            only for a deadline's advice.
    """
    name = (obj.get("metadata") or {}).get("name")
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind == "JobSet":
        condition = _failed_condition(obj, ("Failed",))
        if condition is None:
            return []
        restarts = int(status.get("restarts", 0))
        limit = (spec.get("failurePolicy") or {}).get("maxRestarts")
        message = str(condition.get("message") or condition.get("reason") or "failed")
        if condition.get("reason") == "ReachedMaxRestarts":
            return [Explanation(
                "max-restarts", "max restarts",
                f"the JobSet failed after {restarts} gang restart(s), its limit (max_restarts {limit}): {message}",
                "the cause is in the pods' explanations and logs; raise `max_restarts` only for flaky nodes",
                None,
            )]
        return [Explanation(
            "failed", "failed", f"the JobSet failed after {restarts} gang restart(s): {message}",
            "see the pods' explanations and `cw logs RUN`", None,
        )]
    condition = _failed_condition(obj, ("Failed", "FailureTarget"))
    if condition is None:
        return []
    reason = condition.get("reason") or ""
    message = str(condition.get("message") or reason)
    failed = int(status.get("failed", 0))
    if reason == "BackoffLimitExceeded":
        limit = spec.get("backoffLimit", 6)
        return [Explanation(
            "backoff-limit", "backoff limit",
            f"{name} failed {failed} time(s) and reached its backoff limit ({limit} retries): {message}",
            "the cause is the pods' failure (above, and `cw logs RUN`); `backoff_limit:` sets the retries",
            None,
        )]
    if reason == "DeadlineExceeded":
        deadline = spec.get("activeDeadlineSeconds")
        limit = f" ({duration(deadline)})" if deadline else ""
        return [Explanation(
            "deadline", "deadline",
            f"{name} ran longer than its deadline{limit} and was stopped: {message}",
            f"raise the Job's activeDeadlineSeconds, or make the run shorter ({_shorter(obj, frameworks)}); "
            "it resumes from the last checkpoint",
            None,
        )]
    if reason == "PodFailurePolicy":
        code = re.search(r"failed with exit code (\d+)", message)
        disrupted = "DisruptionTarget" in message
        summary = f"rank failed (exit {code.group(1)})" if code else "disrupted" if disrupted else "rank failed"
        return [Explanation(
            "rank-failed", summary,
            f"{name} failed at once by its pod failure policy: {message}",
            "a multi-node run cannot go on without a rank: the cause is in that pod's log (`cw logs RUN --rank N`)",
            None,
        )]
    return [Explanation("failed", reason or "failed", f"{name} failed: {message}", "see `cw logs RUN`", None)]


def _shorter(obj: dict[str, Any], frameworks: FrameworkLookup | None) -> str:
    framework = _framework(obj, frameworks)
    return shorter_run(framework.words if framework is not None else None)


def diagnose(
    owners: list[tuple[str, dict[str, Any]]],
    pods: list[dict[str, Any]],
    logs: dict[tuple[str, str], list[str]] | None = None,
    now: datetime | None = None,
    frameworks: FrameworkLookup | None = None,
) -> list[Explanation]:
    """Every explanation of a run, most telling first, one per cause and container role.

    Args:
        owners: (kind, object) of the run's Job(s) and JobSet.
        pods: The run's pods (any order; the newest pod's explanation wins a tie).
        logs: (pod name, container) -> log tail.
        now: The current time.
        frameworks: Finds the framework the objects' label names (default :func:`framework_of`).
    """
    logs = logs or {}
    found: list[Explanation] = []
    newest_first = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", reverse=True)
    for pod in newest_first:
        pod_name = (pod.get("metadata") or {}).get("name", "")
        pod_logs = {container: lines for (p, container), lines in logs.items() if p == pod_name}
        found += explain_pod(pod, pod_logs, now, frameworks)
    for kind, obj in owners:
        found += explain_owner(kind, obj, frameworks)
    seen: set[tuple[str, str | None, str]] = set()
    unique = []
    for explanation in found:
        key = (explanation.kind, explanation.container, explanation.summary)
        if key not in seen:
            seen.add(key)
            unique.append(explanation)
    rank = {kind: i for i, kind in enumerate(PRIORITY)}
    # a framework's own cause explains a failed container better than its exit code does
    framework_cause = rank["exit-code"] - 0.5
    return sorted(unique, key=lambda e: rank.get(e.kind, framework_cause))


def summary(explanations: list[Explanation]) -> str | None:
    """The few words of the most telling explanation, for `cw list` (None when there is none)."""
    return explanations[0].summary if explanations else None


#: The fix for a pod the scheduler pushed out (the same whether read from the pod or its event).
PREEMPTED_FIX = (
    "relaunch when the GPUs are free (a run resumes from its last checkpoint), or run it with a "
    "higher priority or through a Kueue queue (`queue:`) so it waits instead of being pushed out"
)


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
