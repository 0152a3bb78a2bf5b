"""Fixtures for the training tests: a tiny random Llama, a word-level tokenizer with a chat
template, a tiny reward model and small local datasets, all built offline once per session;
plus helpers that render cw's real plans and run their trainer through the local runner."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from training_helpers import (
    OFFLINE_ENV,
    RUNTIME_DIR,
    RewardServerProcess,
    ensure_launcher,
)

for _k, _v in OFFLINE_ENV.items():
    os.environ.setdefault(_k, _v)

# One tiny model for the tests and the test cluster's runtime image (cw_cli/testcluster/realnode).
from cw_cli.testcluster.realnode.tiny_model import build_policy  # noqa: E402
from cw_cli.testcluster.realnode.tiny_model import build_tokenizer as _build_tokenizer  # noqa: E402
from cw_cli.testcluster.realnode.tiny_model import llama_config as _llama_config  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch", reason="training tests need the 'train' extra (torch)")
    pytest.importorskip("trl", reason="training tests need the 'train' extra (trl)")
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="session")
def tiny_model(tiny_dir: Path) -> Path:
    """A 2-layer random Llama (hidden 64) with a word-level tokenizer and a chat template: the
    runtime image's model (tiny_model.build_policy)."""
    out = tiny_dir / "policy"
    build_policy(out)
    return out


@pytest.fixture(scope="session")
def tiny_reward_model(tiny_dir: Path) -> Path:
    """A 2-layer random Llama sequence classifier (num_labels=1) with the same tokenizer."""
    import torch
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(1)
    out = tiny_dir / "reward"
    tok = _build_tokenizer()
    model = LlamaForSequenceClassification(_llama_config(tok, num_labels=1))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _write_jsonl(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return folder


_QUESTIONS = [
    "what is two plus three ?",
    "tell me a short story about a cat .",
    "why is the sky blue ?",
    "write a poem about the sea .",
    "explain how a model learn from data .",
    "who is happy ?",
    "where is the moon ?",
    "summarize this text about a dog .",
]
_ANSWERS = [
    "two plus three equals five .",
    "a small cat was happy in the sun .",
    "the sky is blue because of the sun .",
    "the sea is big and blue and cold .",
    "a model learn from data with a reward .",
    "the dog is happy .",
    "the moon is up in the sky .",
    "a dog is good and fast .",
]


@pytest.fixture(scope="session")
def sft_dataset(tiny_dir: Path) -> Path:
    """Conversational SFT data (``messages``), a JSONL folder usable as ``dataset_name``."""
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in zip(_QUESTIONS * 4, _ANSWERS * 4)
    ]
    return _write_jsonl(tiny_dir / "data-sft", rows)


@pytest.fixture(scope="session")
def dpo_dataset(tiny_dir: Path) -> Path:
    """Preference data (``prompt``/``chosen``/``rejected``, standard text format)."""
    rows = [
        {"prompt": q, "chosen": " " + a, "rejected": " no no bad sad ."}
        for q, a in zip(_QUESTIONS * 4, _ANSWERS * 4)
    ]
    return _write_jsonl(tiny_dir / "data-dpo", rows)


@pytest.fixture(scope="session")
def grpo_dataset(tiny_dir: Path) -> Path:
    """Prompt-only data in conversational form (``prompt`` = list of messages)."""
    rows = [{"prompt": [{"role": "user", "content": q}]} for q in _QUESTIONS * 4]
    return _write_jsonl(tiny_dir / "data-grpo", rows)


@pytest.fixture
def reward_server(tiny_reward_model: Path, tmp_path: Path) -> Iterator[RewardServerProcess]:
    server = RewardServerProcess(RUNTIME_DIR / "reward_server.py", tiny_reward_model, tmp_path / "reward.log")
    try:
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- cw plans


@pytest.fixture(scope="session")
def render_plan():
    """``render_plan(framework, training_type, config_path, sets=[...], run_name=..., gpu=0)``
    -> the manifests cw would apply (cw_cli.render.plan.build_plan, the same code as --dry-run)."""
    from cw_cli.config.loader import load_run_config
    from cw_cli.config.options import LaunchOptions
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.render.plan import RunRequest, build_plan

    registry = FrameworkRegistry().load_all(include_plugins=False)

    def render(framework: str, training_type: str, config: Path, sets: list[str] | None = None,
               run_name: str = "cw-test", gpu: int = 0) -> list[dict]:
        loaded, ttype = registry.resolve_type(framework, training_type)
        cfg = load_run_config(Path(config), loaded.framework, ttype, sets=sets or [], flags=LaunchOptions(gpu=gpu))
        plan = build_plan(RunRequest(framework=loaded, training_type=ttype, config=cfg, run_name=run_name))
        return plan.manifests

    return render


@pytest.fixture(scope="session")
def with_launcher():
    return ensure_launcher
