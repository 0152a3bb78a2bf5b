"""`cw export` refuses, before any Job exists, every value the Job would fail on: Hub names the Hub
refuses (checked against huggingface_hub's own validator), a bad `--to` URL or `--secret`, a
`--merge` of a full model, `--checkpoint latest` of a run without a checkpoint, a `--timeout` that
cannot be waited for; and a valid run name with a long checkpoint number gets a Job name Kubernetes
takes (63 at most, the same each time). The upload's credentials reach the Job as `secretKeyRef`
entries only. A property test over export's inputs holds all of this together."""

from __future__ import annotations

import re
import string

import pytest
import yaml
from huggingface_hub.utils import HFValidationError, validate_repo_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cw_cli.render.export import (
    MAX_JOB_NAME,
    ExportChoice,
    ExportFacts,
    check_choice,
    destination_problem,
    export_manifests,
    export_name,
    listing_problems,
    repo_id_problem,
)
from cw_cli.render.naming import MAX_RUN_NAME, is_run_name

FACTS = ExportFacts(run_name="ex", run_dir="/checkpoints/ex", claim="ckpts", image="huggingface/trl:1.16.0",
                    labels={"cw-cli.dev/run": "ex"}, env=[
                        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}},
                        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "old", "key": "id"}}}])  # fmt: skip
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _hub_accepts(repo: str) -> bool:
    try:
        validate_repo_id(repo)
    except HFValidationError:
        return False
    return True


@pytest.mark.parametrize("repo", ["org/name--x", "org/model.git", "org/a..b", "-org/x", "org/x-", "a/b/c", "org/" + "x" * 97])
def test_hub_names_the_hub_refuses_are_refused(repo):
    assert not _hub_accepts(repo)  # huggingface_hub's own verdict
    assert any(line.startswith("--push-to-hub") for line in check_choice(ExportChoice(push_to_hub=repo)))


@pytest.mark.parametrize(
    "choice,problem",
    [
        (ExportChoice(to="ftp://bucket/x"), "--to 'ftp://bucket/x': expected s3://BUCKET/PATH"),
        (ExportChoice(to="s3://Bucket/x"), "bucket 'Bucket'"),
        (ExportChoice(to="s3://bucket/../x"), "path segment '..'"),
        (ExportChoice(to="s3://bucket/a\nkind: Secret"), "path segment"),
        (ExportChoice(to="s3://bucket/x", secrets=("AWS_SECRET_ACCESS_KEY",)), "--secret 'AWS_SECRET_ACCESS_KEY': expected"),
        (ExportChoice(to="s3://bucket/x", secrets=("X=Bad_Name",)), "--secret 'X=Bad_Name'"),
        (ExportChoice(to="s3://bucket/x", secrets=("X=a", "X=b")), "--secret X: given twice"),
        (ExportChoice(secrets=("X=a",)), "--secret is for --to or --push-to-hub"),
    ],
)
def test_bad_destinations_and_secrets_are_named(choice, problem):
    assert any(problem in line for line in check_choice(choice)), check_choice(choice)


def _listing(*items, exists=True):
    return {"run_dir": "/checkpoints/ex", "exists": exists, "artifacts": list(items)}


FULL_FINAL = {"kind": "final", "path": "/checkpoints/ex", "step": 10, "complete": True, "adapter": False}
ADAPTER_FINAL = {**FULL_FINAL, "adapter": True}
HALF_WRITTEN = {"kind": "checkpoint", "path": "/checkpoints/ex/checkpoint-30", "step": 30, "complete": False, "adapter": False}
CHECKPOINT_10 = {"kind": "checkpoint", "path": "/checkpoints/ex/checkpoint-10", "step": 10, "complete": True, "adapter": True}


@pytest.mark.parametrize(
    "choice,listing,problem",
    [
        (ExportChoice(merge=True), _listing(FULL_FINAL), "holds a full model, not a LoRA adapter"),
        (ExportChoice(checkpoint="latest"), _listing(HALF_WRITTEN), "holds no complete checkpoint yet"),
        (ExportChoice(checkpoint="30"), _listing(HALF_WRITTEN, FULL_FINAL), "has no complete checkpoint-30"),
        (ExportChoice(), _listing(CHECKPOINT_10), "holds no final model (complete checkpoints: checkpoint 10)"),
        (ExportChoice(), _listing(exists=False), "is not on the run's volume"),
    ],
)
def test_what_the_runs_folder_lacks_is_named(choice, listing, problem):
    assert any(problem in line for line in listing_problems(choice, listing))


@pytest.mark.parametrize(
    "choice,listing",
    [(ExportChoice(merge=True), _listing(ADAPTER_FINAL)), (ExportChoice(checkpoint="latest", merge=True), _listing(CHECKPOINT_10)),
     (ExportChoice(checkpoint="10"), _listing(CHECKPOINT_10, HALF_WRITTEN))],  # fmt: skip
)
def test_what_the_folder_holds_is_exported(choice, listing):
    assert listing_problems(choice, listing) == []


def test_a_long_run_name_and_step_get_a_short_stable_job_name():
    run = "r" + "x" * (MAX_RUN_NAME - 1)
    choice = ExportChoice(checkpoint="9" * 11, merge=True)
    name = export_name(run, choice)
    assert len(name) <= MAX_JOB_NAME and _DNS_LABEL.fullmatch(name)
    assert name == export_name(run, choice) != export_name(run, ExportChoice(checkpoint="9" * 10 + "8", merge=True))
    assert export_name("ex", ExportChoice(checkpoint="500", merge=True)) == "ex-export-500-merged"  # short names stay


def test_the_upload_credentials_come_from_secrets_and_the_driver_is_installed_first():
    choice = ExportChoice(to="s3://cw-models/runs/ex", secrets=("AWS_ACCESS_KEY_ID=s3-creds", "AWS_SECRET_ACCESS_KEY=s3-creds:secret",
                                                                 "AWS_ENDPOINT_URL=s3-creds"))  # fmt: skip
    assert check_choice(choice) == []
    job, config_map = export_manifests(FACTS, choice)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python3", "/etc/cw/cw_pip.py", "fsspec", "s3fs", "--", "python3", "/etc/cw/cw_export.py",
                                    "--run-dir", "/checkpoints/ex", "--checkpoint", "final", "--to", "s3://cw-models/runs/ex"]  # fmt: skip
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["AWS_ACCESS_KEY_ID"] == {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}}}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "secret"}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf"  # the trainer's, taken over
    assert all("value" not in entry for entry in container["env"])  # no credential is written into the manifest
    assert len(container["env"]) == 4  # --secret replaced the trainer's AWS_ACCESS_KEY_ID, not added a second one
    assert set(config_map["data"]) == {"cw_export.py", "cw_pip.py"}
    assert "s3-creds" not in str(config_map) and "s3-creds" not in " ".join(container["command"])
    assert job["metadata"]["name"].startswith("ex-export-final-to-")


def test_without_a_destination_nothing_is_installed():
    job, config_map = export_manifests(FACTS, ExportChoice())
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:2] == ["python3", "/etc/cw/cw_export.py"]
    assert set(config_map["data"]) == {"cw_export.py"}


def test_the_pod_checks_a_destination_with_cws_own_rules():
    """cw checks `--to` with the pod-side script's function itself (one rule, not a copy), and that
    script, loaded as the plain file the pod runs, refuses a trailing newline (`$` let one through)."""
    import importlib.util

    from cw_cli.frameworks.runtime_files import RUNTIME_DIR
    from cw_cli.runtime import cw_export

    assert destination_problem is cw_export.destination_problem
    spec = importlib.util.spec_from_file_location("cw_export_copy", RUNTIME_DIR / "cw_export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for url in ["s3://bucket/x\n", "s3://bucket\n", "s3://bucket\n/x", "gs://b.c.d/a\n/b"]:
        assert module.destination_problem(url) is not None, url
    for url in ["s3://bucket/x", "gs://b.c.d/a/b/", "az://container", "abfss://con/x=1/y"]:
        assert module.destination_problem(url) is None, url


# --------------------------------------------------------------------------- the property

_RUN_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,39}", fullmatch=True).filter(is_run_name)
_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-_./:@ \n\u00e9%", max_size=120)
_REPOS = st.one_of(st.none(), _TEXT, st.from_regex(r"[A-Za-z0-9_.-]{1,100}(/[A-Za-z0-9_.-]{1,100})?", fullmatch=True))
_URLS = st.one_of(st.none(), _TEXT, st.builds(lambda scheme, bucket, path: f"{scheme}://{bucket}/{path}",
                                              st.sampled_from(["s3", "gs", "az", "ftp", "S3"]),
                                              st.from_regex(r"[a-z0-9.-]{1,70}", fullmatch=True), _TEXT))  # fmt: skip
_CHECKPOINTS = st.one_of(st.sampled_from(["final", "latest"]), st.integers(0, 10**12).map(str), _TEXT)
_SECRETS = st.lists(st.one_of(st.from_regex(r"[A-Z_]{1,20}=[a-z0-9-]{1,30}(:[a-z_]{1,20})?", fullmatch=True), _TEXT), max_size=3)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=_RUN_NAMES, checkpoint=_CHECKPOINTS, merge=st.booleans(), repo=_REPOS, url=_URLS, secrets=_SECRETS)
def test_every_export_input_is_refused_or_makes_a_job_kubernetes_and_the_hub_take(run, checkpoint, merge, repo, url, secrets):
    choice = ExportChoice(checkpoint=checkpoint, merge=merge, push_to_hub=repo, to=url, secrets=tuple(secrets))
    problems = check_choice(choice)
    if problems:
        assert all(line.startswith("--") for line in problems)  # each names its flag
        return
    facts = ExportFacts(run_name=run, run_dir=f"/checkpoints/{run}", claim="ckpts", image="img:1", labels={"cw-cli.dev/run": run})
    job, config_map = export_manifests(facts, choice)
    name = job["metadata"]["name"]
    assert len(name) <= MAX_JOB_NAME and _DNS_LABEL.fullmatch(name), name
    assert config_map["metadata"]["name"] == name
    if repo is not None:
        assert _hub_accepts(repo) and repo_id_problem(repo) is None
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--checkpoint") + 1] == checkpoint
    if url is not None:
        assert command[command.index("--to") + 1] == url and "\n" not in url
    assert yaml.safe_load(yaml.safe_dump(job)) == job
    assert all("value" not in entry for entry in job["spec"]["template"]["spec"]["containers"][0]["env"])
