"""cw's own pod-side files (reward server, reward client), read from the package for the ConfigMap."""

from __future__ import annotations

from pathlib import Path

from cw_cli.frameworks.base import CONFIG_MOUNT

RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtime"

#: ConfigMap key -> file in cw_cli/runtime/. Keys are import names in the pod (PYTHONPATH=/etc/cw).
REWARD_SERVER_FILE = "cw_reward_server.py"
REWARD_CLIENT_FILE = "cw_reward.py"
ENTRYPOINT_FILE = "cw_entrypoint.py"  # resumes from the newest checkpoint in output_dir, then execs the trainer
FAULT_FILE = "cw_fault.py"  # beside the entrypoint: stop at a step end on SIGTERM, catch stalls
PROGRESS_FILE = "cw_progress.py"  # beside cw_fault: the [cw-progress] line `cw status` and `cw list` read
VF_RESUME_FILE = "cw_vf_resume.py"  # beside cw_fault in a verifiers run: RLTrainer resumes after a restart
IDENTITY_ENV = "CW_RUN_IDENTITY"  # framework/type/model/config hash of the run, read by cw_entrypoint.py
RESUME_CHANGED_ENV = "CW_RESUME_CHANGED_CONFIG"  # --resume: continue a folder's checkpoints under a new config
PIP_FILE = "cw_pip.py"  # pip-installs the run's requirements, then execs the command
KEEPER_FILE = "cw_keeper.py"  # beside each server: scales it to zero once the trainer has finished
WAIT_FILE = "cw_wait.py"  # the trainer's init containers: wait until a server answers (run with -c)
CODE_FILE = "cw_code.py"  # unpacks or clones the run's own code (`code:`) before the command
EXPORT_FILE = "cw_export.py"  # `cw export`: a checkpoint turned into a model ready to use
ARTIFACTS_FILE = "cw_artifacts.py"  # `cw artifacts`: what a run left on its volume, as JSON
FETCH_FILE = "cw_fetch.py"  # `cw download`: a folder's files with their hashes, a file from an offset
EVAL_FILE = "cw_eval.py"  # an evaluation pod: lm-evaluation-harness on one model, its scores beside it
VF_EVAL_FILE = "cw_vf_eval.py"  # beside cw_eval.py: verifiers environments scored by vf-eval against a local server
EVAL_WATCH_FILE = "cw_eval_watch.py"  # the trainer's sidecar: one evaluation Job per complete checkpoint
POD_API_FILE = "cw_pod_api.py"  # beside the keepers and the watcher: their API calls, with the pod's token
_SOURCES = {
    KEEPER_FILE: "cw_keeper.py",
    REWARD_SERVER_FILE: "reward_server.py",
    REWARD_CLIENT_FILE: "cw_reward.py",
    ENTRYPOINT_FILE: "cw_entrypoint.py",
    FAULT_FILE: "cw_fault.py",
    PROGRESS_FILE: "cw_progress.py",
    VF_RESUME_FILE: "cw_vf_resume.py",
    PIP_FILE: "cw_pip.py",
    WAIT_FILE: "cw_wait.py",
    CODE_FILE: "cw_code.py",
    EXPORT_FILE: "cw_export.py",
    ARTIFACTS_FILE: "cw_artifacts.py",
    FETCH_FILE: "cw_fetch.py",
    EVAL_FILE: "cw_eval.py",
    VF_EVAL_FILE: "cw_vf_eval.py",
    EVAL_WATCH_FILE: "cw_eval_watch.py",
    POD_API_FILE: "cw_pod_api.py",
}

REWARD_FUNCTION = "cw_reward.remote_reward"
REWARD_URL_ENV = "CW_REWARD_URL"
REWARD_PORT = 8001


def is_runtime_file(config_key: str) -> bool:
    """Whether a ConfigMap key is one of cw's own pod-side files (not the user's)."""
    return config_key in _SOURCES


def runtime_file(config_key: str) -> str:
    """Return the text of one of cw's pod-side files, by its ConfigMap key."""
    return (RUNTIME_DIR / _SOURCES[config_key]).read_text(encoding="utf-8")


def with_entrypoint(command: list[str], *, resume: bool, setup: list[list[str]] | None = None) -> list[str]:
    """The trainer's ``command`` run through ``cw_entrypoint.py``, which claims the run's folder, runs
    the ``setup`` commands and, with ``resume``, adds ``--resume_from_checkpoint`` for the newest
    checkpoint in ``output_dir``."""
    import json

    options = [] if resume else ["--no-resume"]
    for step in setup or []:
        options += ["--setup", json.dumps(step)]
    return ["python3", f"{CONFIG_MOUNT}/{ENTRYPOINT_FILE}", *options, "--", *command]


def with_requirements(command: list[str], requirements: list[str]) -> list[str]:
    """``command`` preceded by cw's package step when the run has requirements (unchanged otherwise)."""
    if not requirements:
        return command
    return ["python3", f"{CONFIG_MOUNT}/{PIP_FILE}", *requirements, "--", *command]
