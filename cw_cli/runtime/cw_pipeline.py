"""cw's pipeline keeper: creates each later stage of a pipeline once the stages it waits for have
succeeded, and stops the rest when one fails, with no cw running anywhere.

Shipped in the pipeline's ConfigMap (key ``cw_pipeline.py``) beside ``pipeline.json`` and run by
the pipeline's keeper Job; standard library only, no cw imports (``cw_pod_api.py``, shipped
beside it, makes its calls). ``pipeline.json``
holds every stage cw rendered at launch::

    {"name": "rlhf", "configmap": "rlhf-pipeline", "order": ["sft", "dpo"],
     "stages": {"dpo": {"run": "rlhf-dpo", "after": ["sft"], "created": false, "suspend": true,
                        "owner": {"kind": "Job", "name": "rlhf-dpo-trainer", "path": "/apis/batch/v1/namespaces/{ns}/jobs"},
                        "objects": [{"path": ".../{ns}/jobs", "body": {...}}, ...]}, ...}}

Every ``CW_PIPELINE_POLL_S`` seconds it reads each stage's owner (Job or JobSet) through the API
server with the pipeline's ServiceAccount (a Role allows reading those owners by name, creating
the later stages' kinds and recording progress on the pipeline's ConfigMap, nothing else):

* a stage whose predecessors all succeeded is created as cw creates a run (the owner first,
  suspended where cw releases it, every other object owned by it, then released);
* a stage with a predecessor that failed, was deleted or was skipped is skipped (never created);
* what it did is recorded on the ConfigMap (annotation ``cw-cli.dev/pipeline-stages``), where
  `cw list` reads it; once every stage is decided it exits 0.

The API server, token and CA come from the standard in-cluster places; ``CW_KEEPER_API``,
``CW_KEEPER_TOKEN_FILE``, ``CW_KEEPER_CA_FILE`` and ``CW_KEEPER_NAMESPACE`` override them (tests
run it as a local process against a real API server). ``CW_PIPELINE_FILE`` names the document.
``--once`` makes one round and exits 0 (all decided) or 3 (not yet).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # cw_pod_api.py is shipped beside this file
from cw_pod_api import PodApi, poll, read_text  # noqa: E402

_PREFIX = "[cw-pipeline]"
STATES_ANNOTATION = "cw-cli.dev/pipeline-stages"
DONE = ("Succeeded", "Failed", "Skipped", "Deleted")


def log(message: str) -> None:
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)


class Api(PodApi):
    """The keeper's calls, with the pipeline's ServiceAccount token (``CW_KEEPER_*`` overrides)."""

    def __init__(self, environ: dict) -> None:
        super().__init__(environ, "CW_KEEPER")


def owner_state(owner: dict | None) -> str:
    """Succeeded, Failed, Gone (no such object) or Running, from the owner's conditions."""
    if owner is None:
        return "Gone"
    status = owner.get("status") if isinstance(owner, dict) else None
    listed = status.get("conditions") if isinstance(status, dict) else None
    conditions = {c["type"] for c in listed if isinstance(c, dict) and isinstance(c.get("type"), str) and c.get("status") == "True"} \
        if isinstance(listed, list) else set()  # fmt: skip
    if conditions & {"Complete", "Completed", "SuccessCriteriaMet"}:
        return "Succeeded"
    if conditions & {"Failed", "FailureTarget"}:
        return "Failed"
    return "Running"


def _create(api: Api, path: str, body: dict) -> dict | None:
    """Create one object; None where it exists already (made by an earlier round cut short)."""
    try:
        return api.call("POST", path, body)
    except urllib.error.HTTPError as exc:
        if exc.code == 409:
            return None
        raise


def create_stage(api: Api, stage: dict) -> None:
    """Create a stage's objects as cw creates a run: the owner first (suspended where cw releases
    it), every other object owned by it, then the owner released."""
    owner_spec = stage["objects"][0]
    body = json.loads(json.dumps(owner_spec["body"]))
    if stage.get("suspend"):
        body["spec"]["suspend"] = True
    made = _create(api, owner_spec["path"], body) or api.call("GET", f"{owner_spec['path']}/{body['metadata']['name']}")
    if made is None:
        raise ValueError(f"{body['metadata']['name']} was neither created nor found")
    reference = {"apiVersion": made["apiVersion"], "kind": made["kind"], "name": made["metadata"]["name"],
                 "uid": made["metadata"]["uid"], "controller": False, "blockOwnerDeletion": False}  # fmt: skip
    for item in stage["objects"][1:]:
        body = json.loads(json.dumps(item["body"]))
        body["metadata"]["ownerReferences"] = [reference]
        _create(api, item["path"], body)
    if stage.get("suspend"):
        api.call("PATCH", f"{owner_spec['path']}/{made['metadata']['name']}", {"spec": {"suspend": False}})


def decide(document: dict, states: dict, owners: dict) -> dict:
    """Each stage's state this round, from the recorded states and the owners read: the stages to
    create are those now ``Create``."""
    decided: dict = {}
    for name in document.get("order") or list(document["stages"]):  # each after those it waits for
        stage = document["stages"][name]
        recorded = states.get(name)
        if recorded in ("Skipped",):
            decided[name] = recorded
        elif stage.get("created") or recorded in ("Created", "Running", "Succeeded", "Failed", "Deleted"):
            state = owner_state(owners.get(name))
            decided[name] = "Deleted" if state == "Gone" else state
        else:
            before = [decided.get(p, "Waiting") for p in stage["after"]]
            if any(b in ("Failed", "Skipped", "Deleted") for b in before):
                decided[name] = "Skipped"
            elif all(b == "Succeeded" for b in before):
                decided[name] = "Create"
            else:
                decided[name] = "Waiting"
    return decided


def one_round(api: Api, document: dict) -> bool:
    """Read, create what may start, record; whether every stage is decided."""
    path = f"/api/v1/namespaces/{{ns}}/configmaps/{document['configmap']}"
    config_map = api.call("GET", path) or {}
    text = ((config_map.get("metadata") or {}).get("annotations") or {}).get(STATES_ANNOTATION) or "{}"
    states = json.loads(text)
    owners = {}
    for name, stage in document["stages"].items():
        if stage.get("created") or states.get(name) not in (None, "Waiting", "Skipped"):
            owner = stage["owner"]
            owners[name] = api.call("GET", f"{owner['path']}/{owner['name']}")
    decided = decide(document, states, owners)
    for name, state in decided.items():
        if state == "Create":
            log(f"stage {name}: every stage it waits for succeeded; creating run {document['stages'][name]['run']}")
            create_stage(api, document["stages"][name])
            decided[name] = "Created"
        elif state == "Skipped" and states.get(name) != "Skipped":
            log(f"stage {name}: skipped (a stage it waits for failed or was deleted)")
    if decided != states:
        api.call("PATCH", path, {"metadata": {"annotations": {STATES_ANNOTATION: json.dumps(decided, sort_keys=True)}}})
    return all(state in DONE for state in decided.values())


def main(argv: list[str] | None = None, environ: dict | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if environ is None else environ)
    document = json.loads(read_text(env.get("CW_PIPELINE_FILE") or "/etc/cw/pipeline.json"))
    api = Api(env)
    poll_s = float(env.get("CW_PIPELINE_POLL_S", "20"))
    log(f"keeping pipeline {document['name']}: stages {', '.join(document.get('order') or document['stages'])}")

    def a_round() -> bool:
        done = one_round(api, document)
        if done:
            log("every stage is decided")
        return done

    return poll(a_round, poll_s, "--once" in args, log)


if __name__ == "__main__":
    raise SystemExit(main())
