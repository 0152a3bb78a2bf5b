"""cw's evaluation watcher: one evaluation Job per complete checkpoint, while training goes on.

Copied verbatim into the run's ConfigMap (key ``cw_eval_watch.py``) and run as a sidecar of the
trainer pod (a native sidecar: it ends with the trainer), so it stays standard library only, with
no cw imports (``cw_pod_api.py``, shipped beside it, makes its calls). Every ``CW_EVAL_POLL_S`` seconds it looks in the run's folder
(``CW_EVAL_RUN_DIR``) for ``checkpoint-N`` folders that are complete (``trainer_state.json``,
and the ``.cw-complete`` marker where the run's checkpoints carry markers: cw_fault.py writes it
once every rank finished) and have no scores yet, and creates, through the API server with the
run's ``<run>-eval`` ServiceAccount (a Role allows creating and reading Jobs, nothing else), the
evaluation Job cw rendered at launch (``CW_EVAL_JOB_FILE``) for that step. The Job's pod runs
at the evaluation's lower priority, so training never waits for it. Creating is idempotent: a Job
that exists already (409) counts as created, so the pods of a multi-node trainer may all watch.

On SIGTERM (the trainer has ended) it looks one last time, then exits 0. That last look also
scores the final model: where the trainer succeeded (``CW_EVAL_FINISHED_FILE``, written by
cw_entrypoint only on exit 0, says so), the run's folder holds a model at its top and has no final
scores yet, it creates the final evaluation Job (``CW_EVAL_FINAL_JOB_FILE``, rendered at launch).

``CW_EVAL_API``, ``CW_EVAL_TOKEN_FILE``, ``CW_EVAL_CA_FILE`` and ``CW_EVAL_NAMESPACE`` override
the in-cluster API server, token, CA and namespace (tests run it as a local process against a real
API server). ``--once`` looks one time and exits 0.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import urllib.error
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # cw_pod_api.py is shipped beside this file
from cw_pod_api import PodApi, read_text  # noqa: E402

_PREFIX = "[cw-eval-watch]"
COMPLETE_MARKER = ".cw-complete"  # cw_fault.COMPLETE_MARKER
#: The step the Job template was rendered for; replaced by each checkpoint's (render/evaluation.py: TEMPLATE_STEP).
TEMPLATE_STEP = "987654321"
_CHECKPOINT = re.compile(r"^checkpoint-(\d{1,11})$")
#: Tries of the last look (after SIGTERM, within the pod's 30 s grace period), seconds between them.
LAST_TRIES, LAST_RETRY_S = 3, 3.0
#: A model saved at the top of the run's folder (full weights' config, or a LoRA adapter's).
MODEL_FILES = ("config.json", "adapter_config.json")


def log(message: str) -> None:
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)


class Api(PodApi):
    """The one API call the watcher makes (create a Job), with the pod's ServiceAccount token."""

    def __init__(self, environ: dict) -> None:
        super().__init__(environ, "CW_EVAL")

    def create_job(self, job: dict) -> bool:
        """Create ``job``; False where it exists already."""
        try:
            self.call("POST", "/apis/batch/v1/namespaces/{ns}/jobs", job)
            return True
        except urllib.error.HTTPError as exc:
            if exc.code == 409:
                return False
            raise


def complete_steps(run_dir: str) -> list[int]:
    """Steps of the complete checkpoints without scores in ``run_dir``, oldest first."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    found = {int(m.group(1)): name for name in names if (m := _CHECKPOINT.match(name))}
    marked = any(os.path.isfile(os.path.join(run_dir, name, COMPLETE_MARKER)) for name in found.values())
    steps = []
    for step, name in sorted(found.items()):
        folder = os.path.join(run_dir, name)
        if not os.path.isfile(os.path.join(folder, "trainer_state.json")):
            continue
        if marked and not os.path.isfile(os.path.join(folder, COMPLETE_MARKER)):
            continue
        if os.path.isfile(os.path.join(folder, "cw-eval", "scores.json")):
            continue
        steps.append(step)
    return steps


def job_for(template: dict, step: int) -> dict:
    """The evaluation Job of ``step``: the rendered template with its step in the name, labels and command."""
    text = str(step)

    def swap(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(TEMPLATE_STEP, text)
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    job = json.loads(json.dumps(template))
    job["metadata"]["name"] = swap(job["metadata"]["name"])
    for container in job["spec"]["template"]["spec"]["containers"]:
        container["command"] = swap(container["command"])
    return job


def look(api: Api, template: dict, run_dir: str, created: set[int]) -> None:
    """Create the evaluation Job of each new complete checkpoint."""
    for step in complete_steps(run_dir):
        if step in created:
            continue
        job = job_for(template, step)
        made = api.create_job(job)
        created.add(step)
        log(f"checkpoint-{step}: {'created' if made else 'found'} evaluation Job {job['metadata']['name']}")


def trainer_finished(finished_file: str) -> bool:
    """Whether the trainer's command ended with exit 0 (its record exists and says so)."""
    try:
        record = json.loads(read_text(finished_file))
    except (OSError, ValueError):
        return False
    # An int 0 exactly: false and 0.0 equal 0 in Python, and are no exit status.
    return isinstance(record, dict) and type(record.get("exit_code")) is int and record["exit_code"] == 0


def final_ready(run_dir: str, finished_file: str) -> bool:
    """Whether the final model is there to score: the trainer succeeded, a model is at the top of
    the run's folder, and it has no scores yet."""
    if not trainer_finished(finished_file):
        return False
    if os.path.isfile(os.path.join(run_dir, "cw-eval", "final", "scores.json")):
        return False
    return any(os.path.isfile(os.path.join(run_dir, name)) for name in MODEL_FILES)


def look_final(api: Api, env: dict) -> None:
    """Create the final model's evaluation Job where :func:`final_ready` (a launch-time Job file)."""
    job_file, finished_file = env.get("CW_EVAL_FINAL_JOB_FILE"), env.get("CW_EVAL_FINISHED_FILE")
    if not job_file or not finished_file or not final_ready(env["CW_EVAL_RUN_DIR"], finished_file):
        return
    job = json.loads(read_text(job_file))
    made = api.create_job(job)
    log(f"final model: {'created' if made else 'found'} evaluation Job {job['metadata']['name']}")


def main(argv: list[str] | None = None, environ: dict | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if environ is None else environ)
    run_dir = env["CW_EVAL_RUN_DIR"]
    template = json.loads(read_text(env["CW_EVAL_JOB_FILE"]))
    api = Api(env)
    poll_s = float(env.get("CW_EVAL_POLL_S", "30"))
    created: set[int] = set()
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    log(f"watching {run_dir} for complete checkpoints")
    while True:
        last = "--once" in args or bool(stopping)
        # The last look has no next round: it tries a few times within the pod's grace period.
        for attempt in range(LAST_TRIES if last else 1):
            try:
                look(api, template, run_dir, created)
                if last:  # the trainer has ended: its final model, where it finished well
                    look_final(api, env)
                break
            except (OSError, ValueError, urllib.error.URLError) as exc:  # API hiccup: try again
                log(f"cannot create yet: {exc}")
                if attempt + 1 < (LAST_TRIES if last else 1):
                    time.sleep(LAST_RETRY_S)
        if last:
            return 0
        deadline = time.monotonic() + poll_s
        while time.monotonic() < deadline and not stopping:
            time.sleep(min(1.0, poll_s))


if __name__ == "__main__":
    raise SystemExit(main())
