"""Standalone HTTP reward-model server used by cw GRPO runs.

This file is copied verbatim into the run's ConfigMap and executed inside the
pod image, so it must not import anything from cw. It needs only the Python
standard library plus ``torch`` and ``transformers`` (present in every training
image).

Run::

    python reward_server.py --model /path/or/hub-id --host 0.0.0.0 --port 8001 --batch-size 16

Endpoints (JSON in, JSON out):

``GET /health``
    ``{"status": "ok", "model": ..., "device": ...}`` once the model is loaded
    (the server only starts listening after loading, so any answer means ready).
``GET /stats``
    ``{"requests": n, "texts": m, "batches": b, "errors": e, "uptime_s": t}``.
``POST /score``
    Body ``{"texts": ["...", ...]}`` (already formatted strings) or
    ``{"messages": [[{"role": ..., "content": ...}, ...], ...]}`` (conversations;
    the tokenizer's chat template is applied when it has one).
    Answer ``{"scores": [float, ...]}``, one score per input, in order.
    The score is the logit of label 0 of a ``num_labels=1`` sequence-classification
    model (for a multi-label head: the last label).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOG = logging.getLogger("cw.reward_server")

MAX_BODY_BYTES = 64 * 1024 * 1024


class RewardModel:
    """A sequence-classification model scoring batches of texts."""

    def __init__(
        self,
        model: str,
        *,
        device: str = "auto",
        dtype: str = "auto",
        max_length: int = 2048,
        batch_size: int = 16,
        trust_remote_code: bool = False,
    ) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._torch = torch
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        torch_dtype: Any = "auto"
        if dtype not in ("auto", "", None):
            torch_dtype = getattr(torch, dtype)
        self.name = model
        self.max_length = max_length
        self.batch_size = max(1, int(batch_size))
        self.tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        # Right padding: the classification head pools the last non-pad token.
        self.tokenizer.padding_side = "right"
        self.model = AutoModelForSequenceClassification.from_pretrained(
            model, dtype=torch_dtype, trust_remote_code=trust_remote_code
        )
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.to(device)
        self.model.eval()
        self._lock = threading.Lock()

    def format_messages(self, conversations: Sequence[Sequence[dict]]) -> list[str]:
        texts: list[str] = []
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        for conv in conversations:
            if has_template:
                texts.append(str(self.tokenizer.apply_chat_template(list(conv), tokenize=False)))
            else:
                texts.append("\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in conv))
        return texts

    def score(self, texts: Sequence[str]) -> list[float]:
        torch = self._torch
        scores: list[float] = []
        # One forward pass at a time: the model is shared by all request threads.
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                chunk = list(texts[start : start + self.batch_size])
                enc = self.tokenizer(
                    chunk,
                    return_tensors="pt",
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                )
                enc = {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                logits = self.model(**enc).logits
                scores.extend(float(x) for x in logits[:, -1].float().cpu().tolist())
        return scores


class Stats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.requests = 0
        self.texts = 0
        self.batches = 0
        self.errors = 0

    def add(self, **kw: int) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def snapshot(self) -> dict:
        with self._lock:
            return {
                "requests": self.requests,
                "texts": self.texts,
                "batches": self.batches,
                "errors": self.errors,
                "uptime_s": round(time.time() - self.started, 3),
            }


def requested_texts(req: Any, scorer: Any) -> list[str]:
    """The texts a ``/score`` request body asks to score: its ``texts``, or its ``messages``
    (conversations) formatted by ``scorer``.

    Raises:
        ValueError: The body is not an object with a list of strings or of conversations.
    """
    if not isinstance(req, dict):
        raise ValueError("body must be a JSON object")
    if "texts" in req:
        texts = req["texts"]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError("'texts' must be a list of strings")
        return texts
    if "messages" in req:
        convs = req["messages"]
        if not isinstance(convs, list) or not all(isinstance(c, list) for c in convs):
            raise ValueError("'messages' must be a list of conversations (lists of messages)")
        return scorer.format_messages(convs)
    raise ValueError("body needs 'texts' or 'messages'")


def make_handler(scorer: Any, stats: Stats):
    """Build the request handler class bound to ``scorer`` (anything with
    ``score(texts)``, ``format_messages(convs)`` and ``name``)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "cw-reward/1"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # route to logging, not stderr spam
            LOG.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, code: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/")
            if path in ("/health", "/healthz", "/ready", ""):
                self._send(200, {"status": "ok", "model": getattr(scorer, "name", None),
                                 "device": getattr(scorer, "device", None)})
            elif path == "/stats":
                self._send(200, stats.snapshot())
            else:
                self._send(404, {"error": f"no such endpoint: {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/")
            if path not in ("/score", "/v1/score"):
                self._send(404, {"error": f"no such endpoint: {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if length <= 0 or length > MAX_BODY_BYTES:
                    raise ValueError(f"bad Content-Length {length}")
                texts = requested_texts(json.loads(self.rfile.read(length)), scorer)
            except (ValueError, json.JSONDecodeError) as exc:
                stats.add(errors=1)
                self._send(400, {"error": str(exc)})
                return
            try:
                scores = scorer.score(texts) if texts else []
            except Exception as exc:  # the model failed: report, keep serving
                LOG.exception("scoring failed")
                stats.add(errors=1)
                self._send(500, {"error": f"{type(exc).__name__}: {exc}"})
                return
            bs = max(1, getattr(scorer, "batch_size", 1))
            stats.add(requests=1, texts=len(texts), batches=(len(texts) + bs - 1) // bs)
            self._send(200, {"scores": scores})

    return Handler


def make_server(scorer: Any, host: str = "0.0.0.0", port: int = 8001) -> ThreadingHTTPServer:
    stats = Stats()
    server = ThreadingHTTPServer((host, port), make_handler(scorer, stats))
    server.daemon_threads = True
    server.stats = stats  # type: ignore[attr-defined]
    return server


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description="cw reward-model HTTP server")
    p.add_argument("--model", default=env("CW_REWARD_MODEL"), help="local path or hub id of a "
                   "sequence-classification model (env CW_REWARD_MODEL)")
    p.add_argument("--host", default=env("CW_REWARD_HOST", "0.0.0.0"))
    p.add_argument("--port", type=int, default=int(env("CW_REWARD_PORT", "8001")))
    p.add_argument("--batch-size", type=int, default=int(env("CW_REWARD_BATCH_SIZE", "16")))
    p.add_argument("--max-length", type=int, default=int(env("CW_REWARD_MAX_LENGTH", "2048")))
    p.add_argument("--device", default=env("CW_REWARD_DEVICE", "auto"), help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", default=env("CW_REWARD_DTYPE", "auto"), help="auto, bfloat16, float16, float32")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--log-level", default=env("CW_REWARD_LOG_LEVEL", "INFO"))
    args = p.parse_args(argv)
    if not args.model:
        p.error("--model is required (or set CW_REWARD_MODEL)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    LOG.info("loading reward model %s", args.model)
    scorer = RewardModel(args.model, device=args.device, dtype=args.dtype, max_length=args.max_length,
                         batch_size=args.batch_size, trust_remote_code=args.trust_remote_code)
    server = make_server(scorer, args.host, args.port)
    host, port = str(server.server_address[0]), server.server_address[1]
    LOG.info("reward server ready on http://%s:%s (model=%s device=%s batch_size=%d)",
             host, port, args.model, scorer.device, scorer.batch_size)
    print(f"cw-reward-server listening on {host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
