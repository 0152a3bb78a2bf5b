"""Measurement hook for the device benchmark: adds one TrainerCallback to every transformers Trainer.

Put this folder on PYTHONPATH with CW_BENCH_STATS=<file.json>; the trained command itself is left
as cw rendered it. Python imports ``sitecustomize`` at start-up; this one waits until
``transformers.trainer`` is imported (a meta-path finder), then wraps ``Trainer.__init__`` to add
the callback. The callback writes, at the end of training: each optimizer step's wall time (CUDA
synchronised), the trainer's log history (TRL logs ``num_tokens``, the input tokens seen so far),
the parameter counts, and torch's peak allocated/reserved GPU memory. With CW_BENCH_STEP_LOG=<file>,
rank 0 also appends one JSON line per optimizer step (step, wall-clock time) as it goes.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import time

_TARGET = "transformers.trainer"


def _install(module) -> None:
    import torch
    from transformers import TrainerCallback

    path = os.environ["CW_BENCH_STATS"]
    steps_path = os.environ.get("CW_BENCH_STEP_LOG")

    class BenchCallback(TrainerCallback):
        def __init__(self) -> None:
            self.step_ends: list[float] = []
            self.start = 0.0

        def _sync(self) -> float:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return time.perf_counter()

        def on_train_begin(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            self.start = self._sync()

        def on_step_end(self, args, state, control, **kwargs):
            self.step_ends.append(self._sync())
            if steps_path and state.is_world_process_zero:  # live progress for benchmarks/gpu/warned_fault.py
                with open(steps_path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"step": state.global_step, "time": time.time()}) + "\n")

        def on_train_end(self, args, state, control, **kwargs):
            cuda = torch.cuda.is_available()
            stats = {
                "train_begin_to_end_s": self._sync() - self.start,
                "step_end_times_s": [t - self.start for t in self.step_ends],
                "max_memory_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
                "max_memory_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
                "device_name": torch.cuda.get_device_name(0) if cuda else "cpu",
                "global_step": state.global_step,
                "log_history": state.log_history,
                "trainable_params": sum(p.numel() for p in kwargs["model"].parameters() if p.requires_grad),
                "total_params": sum(p.numel() for p in kwargs["model"].parameters()),
            }
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(stats, handle, indent=1, default=str)

    original = module.Trainer.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.add_callback(BenchCallback())

    module.Trainer.__init__ = __init__


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _install(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("CW_BENCH_STATS"):
    sys.meta_path.insert(0, _Finder())
