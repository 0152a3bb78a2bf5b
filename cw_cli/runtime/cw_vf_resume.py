"""cw's resume of verifiers' RLTrainer (verifiers 0.1.9.post3) after a restart of the trainer pod.

Shipped verbatim beside ``cw_fault.py`` in a verifiers run's ConfigMap (key ``cw_vf_resume.py``),
so it is one file with no cw imports. ``cw_fault.activate`` imports it in a process of the
trainer's command only when that process imports ``verifiers.rl.trainer.trainer``, and calls
:func:`patch` on that module.

vf-train calls ``trainer.train()`` without a checkpoint (verifiers/scripts/train.py), and
``RLTrainer`` assumes it starts at step 0: ``__init__`` submits batch 0 to its orchestrator
(verifiers/rl/trainer/trainer.py:120); each ``training_step`` pushes the weights to the vLLM server
only when ``global_step > 0`` (``update_vllm``, trainer.py:336), then submits batch
``global_step + 1`` and waits for batch ``global_step`` (trainer.py:141-147). Resumed at step N as
it is, it would wait for a batch N that was never submitted (a ``TimeoutError`` after
``generation_timeout``, orchestrator.py:151-180).

When ``cw_entrypoint.py`` found a complete checkpoint in the run's folder it names it in
``CW_RESUME_CHECKPOINT``; then, in every rank:

* ``__init__`` does not submit batch 0 (generated from the server's stale weights, never used);
* ``train()`` resumes from that checkpoint (weights, optimizer, scheduler, RNG states,
  ``global_step``), unless the caller gave ``resume_from_checkpoint`` itself;
* the first ``training_step`` at a ``global_step`` N > 0 first pushes the model's (resumed)
  weights to the server (``update_vllm``, collective over the ranks) and then submits batch N,
  before RLTrainer's own step submits N + 1 and waits for N. Batch N's prompts are those the
  uninterrupted run would have had (the orchestrator picks rows by batch id).
"""

from __future__ import annotations

import os
import sys
from typing import Any

CHECKPOINT_ENV = "CW_RESUME_CHECKPOINT"
#: The release whose RLTrainer this is written against (cw's pin); another is left alone.
VERIFIERS_VERSION = "0.1.9.post3"
_PREFIX = "[cw-launch]"
_skip_batch_zero = False  # set while a resuming RLTrainer.__init__ runs


def resume_checkpoint(environ: Any = None) -> str | None:
    """The checkpoint cw_entrypoint chose (``CW_RESUME_CHECKPOINT``), if it is still a folder."""
    path = (os.environ if environ is None else environ).get(CHECKPOINT_ENV, "")
    return path if path and os.path.isdir(path) else None


def _installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verifiers")
    except PackageNotFoundError:
        return None


def patch(module: Any) -> None:
    """Patch ``module.RLTrainer`` (verifiers.rl.trainer.trainer) and its ``Orchestrator`` once."""
    trainer_cls = getattr(module, "RLTrainer", None)
    orchestrator_cls = getattr(module, "Orchestrator", None)
    if trainer_cls is None or orchestrator_cls is None or getattr(trainer_cls, "_cw_resume_patched", False):
        return
    found = _installed_version()
    if found != VERIFIERS_VERSION:
        print(f"{_PREFIX} verifiers {found}: cw resumes RLTrainer only for {VERIFIERS_VERSION}; a restart starts "
              "again at step 0", file=sys.stderr, flush=True)  # fmt: skip
        return
    trainer_cls._cw_resume_patched = True
    original_init = trainer_cls.__init__
    original_train = trainer_cls.train
    original_step = trainer_cls.training_step
    original_submit = orchestrator_cls.submit_batch

    def submit_batch(self: Any, batch_id: int) -> None:
        global _skip_batch_zero
        if _skip_batch_zero and batch_id == 0:
            _skip_batch_zero = False
            return
        original_submit(self, batch_id)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        global _skip_batch_zero
        _skip_batch_zero = resume_checkpoint() is not None
        try:
            original_init(self, *args, **kwargs)
        finally:
            _skip_batch_zero = False

    def train(self: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint is None:
            resume_from_checkpoint = resume_checkpoint()
            if resume_from_checkpoint is not None:
                print(f"{_PREFIX} verifiers: resuming RLTrainer from {resume_from_checkpoint}", file=sys.stderr, flush=True)
        return original_train(self, resume_from_checkpoint, *args, **kwargs)

    def training_step(self: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_cw_first_step_done", False):
            self._cw_first_step_done = True
            step = self.state.global_step
            if step > 0:  # resumed: the server gets the resumed weights before batch `step` is generated
                self.update_vllm()
                if self.orchestrator:
                    self.orchestrator.submit_batch(step)
        return original_step(self, model, *args, **kwargs)

    wrapped: tuple[tuple[str, Any, Any], ...] = (
        ("__init__", __init__, original_init), ("train", train, original_train),
        ("training_step", training_step, original_step),
    )  # fmt: skip
    for name, function, original in wrapped:
        function.__wrapped__ = original
        function.__doc__ = original.__doc__
        setattr(trainer_cls, name, function)
    submit_batch.__wrapped__ = original_submit  # type: ignore[attr-defined]
    orchestrator_cls.submit_batch = submit_batch
