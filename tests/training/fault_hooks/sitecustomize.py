"""Test-only behaviour for the fault tolerance tests, loaded in every trainer process.

cw's shim (cw_fault.SHIM) runs first and then chains to this file (it is later on PYTHONPATH),
which also proves an image's own sitecustomize still runs. Driven by environment variables:

* CW_TEST_STEP_SLEEP=<s>: every step sleeps that long (a healthy run with slow steps).
* CW_TEST_SLOW_SAVE_AT=<step> with CW_TEST_SENTINEL=<file>: the save at that step stalls for a
  minute at the chosen point (CW_TEST_SLOW_SAVE_POINT: ``rng``, before trainer_state.json is
  written; ``after_state``, after it but before cw marks the checkpoint complete), after touching
  the sentinel, so a test can kill the pod in the middle of the save.
"""

import os
import time

_SLEEP = float(os.environ.get("CW_TEST_STEP_SLEEP", "0") or 0)
_SLOW_AT = int(os.environ.get("CW_TEST_SLOW_SAVE_AT", "0") or 0)
_POINT = os.environ.get("CW_TEST_SLOW_SAVE_POINT", "rng")


def _stall(state_step):
    if state_step == _SLOW_AT:
        with open(os.environ["CW_TEST_SENTINEL"], "w") as fh:
            fh.write(f"{os.getpid()}\n")
        time.sleep(60)


try:  # only the trainer's processes see cw_fault (cw's own CLI process does not)
    import cw_fault
except ImportError:
    cw_fault = None

if cw_fault is not None and (_SLEEP or _SLOW_AT):
    _original_attach = cw_fault.attach

    def attach(trainer):
        from transformers import TrainerCallback

        class _TestHooks(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if _SLEEP:
                    time.sleep(_SLEEP)

            def on_save(self, args, state, control, **kwargs):
                if _POINT == "after_state":
                    _stall(state.global_step)

        trainer.add_callback(_TestHooks())  # before cw's: its on_save runs first
        if _POINT == "rng":
            save_rng = trainer._save_rng_state

            def slow_rng(output_dir):
                _stall(trainer.state.global_step)
                return save_rng(output_dir)

            trainer._save_rng_state = slow_rng
        _original_attach(trainer)

    cw_fault.attach = attach
