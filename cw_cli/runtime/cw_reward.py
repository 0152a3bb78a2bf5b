"""GRPO reward function that asks cw's reward server for scores.

Copied verbatim into the run's ConfigMap (mounted at /etc/cw, on PYTHONPATH), so
the trainer config can say::

    reward_funcs: [cw_reward.remote_reward]

Standard library only. Configuration through the environment:

``CW_REWARD_URL``      base URL of the server, e.g. ``http://<run>-reward:8001``
                       (a URL that already ends in ``/score`` is used as is).
``CW_REWARD_TIMEOUT``  seconds per HTTP request (default 120).
``CW_REWARD_RETRIES``  attempts per request before giving up (default 8);
                       waits 1, 2, 4, ... 30 s between attempts.
``CW_REWARD_BATCH``    texts per HTTP request (default 256).

The function follows TRL's reward-function signature
``(prompts, completions, **kwargs) -> list[float]``. Standard-format samples
are scored as ``prompt + completion`` (``{"texts": [...]}``); conversational
samples (lists of ``{"role", "content"}`` messages) are sent as whole
conversations (``{"messages": [...]}``) so the server applies the reward
model's chat template. After the last attempt fails it raises, so a broken
reward server stops training instead of silently training on zeros.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

__all__ = ["remote_reward", "score_texts", "score_conversations", "RewardServerError"]


class RewardServerError(RuntimeError):
    pass


def _score_url(url: str | None = None) -> str:
    url = url or os.environ.get("CW_REWARD_URL")
    if not url:
        raise RewardServerError("CW_REWARD_URL is not set: it must point at the cw reward server")
    url = url.rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if not url.endswith("/score"):
        url += "/score"
    return url


def _post(url: str, payload: dict, timeout: float, retries: int) -> dict:
    data = json.dumps(payload).encode()
    last: Exception | None = None
    for attempt in range(max(1, retries)):
        if attempt:
            time.sleep(min(30.0, 2.0 ** (attempt - 1)))
        req = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")[:500]
            if 400 <= exc.code < 500:  # our request is wrong: retrying will not help
                raise RewardServerError(f"reward server rejected the request ({exc.code}): {body}") from exc
            last = RewardServerError(f"reward server error {exc.code}: {body}")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last = exc
    raise RewardServerError(f"reward server at {url} failed after {retries} attempts: {last}") from last


def _request_scores(key: str, items: list, url: str | None) -> list[float]:
    target = _score_url(url)
    timeout = float(os.environ.get("CW_REWARD_TIMEOUT", "120"))
    retries = int(os.environ.get("CW_REWARD_RETRIES", "8"))
    batch = max(1, int(os.environ.get("CW_REWARD_BATCH", "256")))
    scores: list[float] = []
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        out = _post(target, {key: chunk}, timeout, retries)
        got = out.get("scores")
        if not isinstance(got, list) or len(got) != len(chunk):
            raise RewardServerError(f"reward server returned {len(got) if isinstance(got, list) else got!r} "
                                    f"scores for {len(chunk)} inputs")
        scores.extend(float(s) for s in got)
    return scores


def score_texts(texts: Sequence[str], url: str | None = None) -> list[float]:
    """Score already formatted strings."""
    return _request_scores("texts", list(texts), url)


def score_conversations(conversations: Sequence[Sequence[dict]], url: str | None = None) -> list[float]:
    """Score conversations (lists of role/content messages)."""
    return _request_scores("messages", [list(c) for c in conversations], url)


def _is_conversational(x: Any) -> bool:
    return isinstance(x, list) and (not x or isinstance(x[0], dict))


def _plain(messages: list) -> list[dict]:
    # Keep only what a chat template needs; content may be a list of parts.
    out = []
    for m in messages:
        content = m.get("content", "")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append({"role": m.get("role", "user"), "content": content})
    return out


def remote_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL reward function: one float per completion, from the cw reward server."""
    if not completions:
        return []
    if _is_conversational(completions[0]):
        convs = []
        for prompt, completion in zip(prompts, completions):
            prefix = _plain(prompt) if _is_conversational(prompt) else [{"role": "user", "content": str(prompt)}]
            convs.append(prefix + _plain(completion))
        return score_conversations(convs)
    return score_texts([f"{p}{c}" for p, c in zip(prompts, completions)])
