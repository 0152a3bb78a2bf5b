"""What a failed container's log tail shows: a CUDA OOM, a refused Hugging Face token, an NCCL
timeout, or a failure the run's framework knows.

The texts matched are the real ones: torch's ``torch.OutOfMemoryError: CUDA out of memory. Tried
to allocate ...`` (c10/cuda/CUDACachingAllocator.cpp), ProcessGroupNCCL's ``Watchdog caught
collective operation timeout: WorkNCCL(...) ran for ... milliseconds before timing out.``,
huggingface_hub's ``401 Client Error. ... Repository Not Found for url`` and ``GatedRepoError`` /
``Cannot access gated repo for url`` (utils/_http.py), transformers' ``You are trying to access a
gated repo``. Pure: log lines in, an :class:`Explanation` (or None) out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from msgspec import Struct

from cw_cli.diagnosis.explanation import Explanation, around, last_match
from cw_cli.frameworks.words import ConfigWords, cuda_oom_fix

if TYPE_CHECKING:
    from cw_cli.frameworks.base import FailureHint

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

_GATED_FIX = (
    "accept the model's terms on huggingface.co with the account of your token, then give the run "
    "that token: a Secret (kubectl create secret generic hf-token --from-literal=HF_TOKEN=hf_...) "
    "and `secrets: {HF_TOKEN: hf-token}` in the config"
)
_TOKEN_FIX = (
    "give the run a token that can read it: a Secret (kubectl create secret generic hf-token "
    "--from-literal=HF_TOKEN=hf_...) and `secrets: {HF_TOKEN: hf-token}` in the config; "
    "check the repo id too (without a token the Hub answers 401 for a repo that does not exist)"
)
_NCCL_FIX = (
    "one rank stalled or died first: read the other ranks' logs (`cw logs RUN --rank N`); check the network "
    "between the nodes (rdma: true on InfiniBand/RoCE nodes) and run with env: {NCCL_DEBUG: INFO}"
)


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
    found = _cuda_oom(lines, container, words) or _hf_refusal(lines) or _nccl_timeout(lines) or _hint(lines, hints)
    if found is not None:
        found.pod, found.container = pod, container
    return found


def _hint(lines: list[str], hints: Sequence[FailureHint]) -> Explanation | None:
    """The first of the framework's own failures the log shows."""
    for hint in hints:
        index = last_match(lines, hint.pattern)
        if index is not None:
            return Explanation(hint.kind, hint.summary, hint.message, hint.fix, log=around(lines, index))
    return None


def _cuda_oom(lines: list[str], container: str | None, words: ConfigWords | None) -> Explanation | None:
    index = last_match(lines, _CUDA_OOM)
    if index is None:
        return None
    size = next((m.group(1) for m in map(re.compile(_CUDA_OOM_SIZE).search, lines[: index + 1][::-1]) if m), None)
    wanted = f" (it tried to allocate {size} more)" if size else ""
    return Explanation(
        "cuda-oom",
        "CUDA OOM",
        f"{container or 'the container'} ran out of GPU memory: torch.OutOfMemoryError, CUDA out of memory{wanted}",
        cuda_oom_fix(words),
        log=around(lines, index),
    )


def _hf_refusal(lines: list[str]) -> Explanation | None:
    """The Hub refused the run's token (or it had none): a gated repo first, then the latest 401/403."""
    hf_patterns = (("gated", _HF_GATED), ("401", _HF_401), ("403", _HF_403))
    hf = [(i, kind) for kind, pattern in hf_patterns if (i := last_match(lines, pattern)) is not None]
    if not hf:
        return None
    index, kind = max(hf, key=lambda item: (item[1] == "gated", item[0]))
    text = "\n".join(lines[max(0, index - 5) : index + 3])
    repo = next(iter(re.findall(_HF_URL, text)), None)
    what = f" for {repo}" if repo else ""
    if kind == "403" and "huggingface" not in text:
        return None  # a 403 from some other service: not the Hub's
    if kind == "gated":
        message = f"the Hugging Face Hub refused access to a gated repo{what} (GatedRepoError)"
        return Explanation("hf-auth", "HF gated repo", message, _GATED_FIX, log=around(lines, index))
    status = next((next(g for g in m.groups() if g) for m in map(re.compile(_HF_STATUS).search, text.splitlines()) if m), kind)
    summary = "HF repo not found" if status == "404" else f"HF token {status}"
    why = "no such repo, or a private one the token cannot read" if status == "404" else "no token, a wrong one, or a repo it may not read"
    message = f"the Hugging Face Hub answered {status}{what}: {why}"
    return Explanation("hf-auth", summary, message, _TOKEN_FIX, log=around(lines, index))


def _nccl_timeout(lines: list[str]) -> Explanation | None:
    index = last_match(lines, _NCCL_TIMEOUT)
    if index is None:
        return None
    match = next((m for m in map(re.compile(_NCCL_COLLECTIVE).search, lines[max(0, index - 3) : index + 3]) if m), None)
    what = f" ({match.group(1)} ran {int(match.group(2)) / 1000:g} s)" if match else ""
    return Explanation(
        "nccl-timeout",
        "NCCL timeout",
        f"an NCCL collective timed out{what}: the ranks stopped waiting for each other (ProcessGroupNCCL watchdog)",
        _NCCL_FIX,
        log=around(lines, index),
    )


# The pod's own account of why it ended to be restarted (cw_fault.py's `[cw-launch]` lines).
_STALLED = (
    r"\[cw-launch\] stalled since (?P<since>\S+) \(no step for (?P<timeout>[\d.]+) s after step (?P<step>-?\d+)\); "
    r"stacks in (?P<stacks>.+?)(?:; restarting from the last checkpoint)?\s*$"
)
_STOPPED = r"\[cw-launch\] stopped at step (?P<step>\d+) with a complete checkpoint (?P<checkpoint>\S+)"


class RestartCause(Struct):
    """Why a trainer pod ended to be restarted, as its log says (cw_fault.py's last words).

    Attributes:
        kind: ``stalled`` (no step for the stall timeout: exit 75) or ``stopped`` (a warned stop
            that saved a checkpoint: exit 143).
        step: The last step (stalled) or the step of the checkpoint (stopped).
        since: When the last step ended (stalled; UTC, ISO 8601).
        timeout_s: The stall timeout that ran out (stalled).
        stacks: The folder with every local rank's Python stacks (stalled).
        checkpoint: The checkpoint the stop saved (stopped).
    """

    kind: str
    step: int | None = None
    since: str | None = None
    timeout_s: float | None = None
    stacks: str | None = None
    checkpoint: str | None = None


def restart_cause(log: Sequence[str]) -> RestartCause | None:
    """The last stall or warned stop a trainer's log tail reports (None: it reports neither)."""
    lines = list(log)
    stalled, stopped = last_match(lines, _STALLED), last_match(lines, _STOPPED)
    if stalled is not None and (stopped is None or stalled > stopped):
        match = re.search(_STALLED, lines[stalled])
        assert match is not None
        return RestartCause(
            "stalled", int(match["step"]), match["since"], float(match["timeout"]), match["stacks"].strip()
        )
    if stopped is not None:
        match = re.search(_STOPPED, lines[stopped])
        assert match is not None
        return RestartCause("stopped", int(match["step"]), checkpoint=match["checkpoint"].rstrip(";,"))
    return None
