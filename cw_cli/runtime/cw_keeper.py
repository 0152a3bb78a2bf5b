"""cw's server keeper: stops a run's server once its trainer has finished, or its lifetime is over.

Copied verbatim into the run's ConfigMap (key ``cw_keeper.py``) and run as a small second
container beside each server (vLLM, reward model), so it stays standard library only, with no
cw imports (``cw_pod_api.py``, shipped beside it, makes its calls). Every ``CW_KEEPER_POLL_S``
seconds it reads, through the API server with the run's own ServiceAccount token (a Role allows
exactly this and nothing else):

* ``CW_TRAINER_JOB``: the trainer Job. Once it has a ``Complete`` or ``Failed`` condition (after
  the Job's own retries), or is gone, the keeper scales ``CW_KEEPER_DEPLOYMENT`` to zero replicas;
  the Deployment's pods, and their GPUs, go away and the Job stays readable.
* ``CW_LIFETIME_S`` (``cw ... --services --ttl``): seconds after the Deployment's creation at
  which the same happens, for servers that have no trainer.

The API server, token and CA come from the standard in-cluster places; ``CW_KEEPER_API``,
``CW_KEEPER_TOKEN_FILE`` and ``CW_KEEPER_CA_FILE`` override them (tests run the keeper as a local
process against a real API server). ``--once`` checks one time and exits 0 (stopped) or 3 (not yet).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # cw_pod_api.py is shipped beside this file
from cw_pod_api import PodApi, poll  # noqa: E402

_PREFIX = "[cw-keeper]"


def log(message: str) -> None:
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)


class Api(PodApi):
    """The few API calls the keeper makes, with the pod's ServiceAccount token."""

    def __init__(self, environ: dict) -> None:
        super().__init__(environ, "CW_KEEPER")

    def job(self, name: str) -> dict | None:
        return self.call("GET", f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{name}")

    def deployment(self, name: str) -> dict | None:
        return self.call("GET", f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{name}")

    def scale_to_zero(self, name: str) -> None:
        path = f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{name}/scale"
        self.call("PATCH", path, {"spec": {"replicas": 0}})


def trainer_finished(job: dict | None) -> str | None:
    """Why the trainer counts as finished (its final condition, or gone), or None while it runs."""
    if job is None:
        return "the trainer Job is gone"
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return f"the trainer Job is {condition['type']}"
    return None


def lifetime_over(deployment: dict | None, lifetime_s: float, now: datetime) -> str | None:
    """Why the server's lifetime is over, or None while it lasts."""
    if deployment is None:
        return "the Deployment is gone"
    created = datetime.fromisoformat(deployment["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    age = (now - created).total_seconds()
    return f"its lifetime of {lifetime_s:.0f} s is over" if age >= lifetime_s else None


def check(api: Api, environ: dict, now: datetime | None = None) -> str | None:
    """One look: the reason to stop, or None."""
    job_name = environ.get("CW_TRAINER_JOB")
    if job_name:
        reason = trainer_finished(api.job(job_name))
        if reason:
            return reason
    lifetime = environ.get("CW_LIFETIME_S")
    if lifetime:
        deployment = api.deployment(environ["CW_KEEPER_DEPLOYMENT"])
        return lifetime_over(deployment, float(lifetime), now or datetime.now(timezone.utc))
    return None


def main(argv: list[str] | None = None, environ: dict | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if environ is None else environ)
    deployment = env["CW_KEEPER_DEPLOYMENT"]
    api = Api(env)
    poll_s = float(env.get("CW_KEEPER_POLL_S", "15"))
    log(f"keeping {deployment}: trainer {env.get('CW_TRAINER_JOB') or '-'}, lifetime {env.get('CW_LIFETIME_S') or '-'} s")

    def one_round() -> bool:
        reason = check(api, env)
        if reason:
            log(f"{reason}: scaling {deployment} to 0 replicas")
            api.scale_to_zero(deployment)
        return reason is not None

    return poll(one_round, poll_s, "--once" in args, log)


if __name__ == "__main__":
    raise SystemExit(main())
