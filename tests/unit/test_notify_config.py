"""`notify:` (issue 34 item 6): the field's shape is checked with the config, each URL by Apprise at
launch (a bad one names `notify.urls[i]` and the file); the trainer container alone reads the
Secret's keys, and no secret value is in the ConfigMap or any manifest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from unit_helpers import REPO, container, env_map, obj, plan_for, pod_spec, write_config

from cw_cli.errors import ConfigError
from cw_cli.features.notify.config import EVENTS, NotifySpec, check_urls

SFT = {"model_name_or_path": "m", "dataset_name": "d"}
SLACK = "slack://{SLACK_A}/{SLACK_B}/{SLACK_C}"
NOTIFY = {"urls": [SLACK, "json://hooks.example.com/cw?token={HOOK_TOKEN}"], "secret": "cw-notify"}


def _issues(error: pytest.ExceptionInfo) -> str:
    return str(error.value) + " ".join(getattr(error.value, "issues", []) or []) + str(getattr(error.value, "hint", ""))


def test_the_events_default_to_all_four_and_the_keys_are_the_placeholders():
    spec = NotifySpec.model_validate(NOTIFY)
    assert spec.events == list(EVENTS) == ["succeeded", "failed", "stalled", "restarted"]
    assert spec.keys() == ["HOOK_TOKEN", "SLACK_A", "SLACK_B", "SLACK_C"]


@pytest.mark.parametrize(
    ("notify", "said"),
    [
        ({"urls": []}, "notify.urls"),
        ({"urls": ["hooks.example.com/x"]}, "is not a notification URL"),
        ({"urls": [SLACK]}, "urls[0] takes {SLACK_A} from a Secret, but `secret` names none"),
        ({"urls": ["json://h/x"], "events": ["done"]}, "notify.events.0"),
        ({"urls": ["json://h/x"], "secret": "Not_A_Name"}, "is not a Secret name"),
        ({"url": ["json://h/x"]}, "did you mean `urls`?"),
    ],
)
def test_a_malformed_notify_is_refused_with_the_file_and_field(tmp_path, notify, said):
    config = write_config(tmp_path, {**SFT, "notify": notify})
    with pytest.raises(ConfigError) as error:
        plan_for("trl", "sft", config)
    assert said in _issues(error) and str(config) in _issues(error)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("foo://bar", "is not a notification URL Apprise understands"),
        ("https://hooks.example.com/x", "is not a notification URL Apprise understands"),
        ("slack://T0000/B0000/XXXXXXXXXX", "holds a secret part"),
        ("mailtos://user:hunter2@example.com", "holds a secret part"),
    ],
)
def test_apprise_refuses_a_bad_url_or_a_written_out_secret_at_launch(tmp_path, url, said):
    spec = NotifySpec.model_validate({"urls": ["json://ok.example.com/x", url]})
    with pytest.raises(ConfigError) as error:
        check_urls(spec, tmp_path / "run.yaml")
    text = _issues(error)
    assert f"{tmp_path / 'run.yaml'}: `notify.urls[1]`" in text and said in text
    assert "hunter2" not in text and "XXXXXXXXXX" not in text  # the refusal does not repeat the secret


def test_urls_whose_secrets_are_placeholders_pass(tmp_path):
    check_urls(NotifySpec.model_validate({**NOTIFY, "urls": [*NOTIFY["urls"], "mailtos://me:{PASS}@example.com",
                                                                  "discord://{ID}/{TOKEN}"]}), tmp_path / "c.yaml")  # fmt: skip


def test_the_trainer_reads_the_secrets_keys_and_nothing_secret_is_in_a_manifest(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "notify": NOTIFY}))
    job = plan.manifests[0]
    env = {item["name"]: item for item in container(job, "trainer")["env"]}
    settings = json.loads(env["CW_NOTIFY"]["value"])
    assert settings["run"] == "golden-run" and settings["urls"] == NOTIFY["urls"]
    assert settings["keys"] == {"HOOK_TOKEN": "CW_NOTIFY_SECRET_0", "SLACK_A": "CW_NOTIFY_SECRET_1",
                                "SLACK_B": "CW_NOTIFY_SECRET_2", "SLACK_C": "CW_NOTIFY_SECRET_3"}  # fmt: skip
    assert env["CW_NOTIFY_SECRET_1"]["valueFrom"] == {"secretKeyRef": {"name": "cw-notify", "key": "SLACK_A", "optional": True}}
    configmap = obj(plan, "ConfigMap", "golden-run-config")
    assert "cw_notify.py" in configmap["data"]  # shipped beside the entrypoint
    assert "cw-notify" not in yaml.safe_dump(configmap["data"]["config.yaml"])  # the native config has no notify


def test_only_the_trainer_container_gets_the_notification_settings(tmp_path):
    config = write_config(tmp_path, {"model_name_or_path": "m", "dataset_name": "d", "notify": NOTIFY})
    plan = plan_for("trl", "grpo", config)
    for manifest in plan.manifests:
        if manifest["kind"] in ("Job", "Deployment"):
            for spec_container in [*pod_spec(manifest).get("containers", []), *pod_spec(manifest).get("initContainers", [])]:
                has = "CW_NOTIFY" in env_map(spec_container)
                assert has == (manifest["kind"] == "Job" and spec_container["name"] == "trainer"), spec_container["name"]


def test_a_run_without_notify_is_unchanged(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, SFT))
    assert not any(name.startswith("CW_NOTIFY") for name in env_map(container(plan.manifests[0], "trainer")))
    assert "cw_notify.py" not in obj(plan, "ConfigMap", "golden-run-config")["data"]


def test_a_dry_run_with_notify_never_imports_apprise(tmp_path):
    config = write_config(tmp_path, {**SFT, "notify": NOTIFY})
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "cw_cli", "trl", "sft", str(config), "--dry-run"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CW_NOTIFY" in done.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "cw_cli.features.notify.config" in imported and not any(name.split(".")[0] == "apprise" for name in imported)


def test_a_jobset_runs_trainers_get_the_settings_too(tmp_path):
    jobset = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "notify": NOTIFY}), nodes=2, jobset_available=True).manifests[0]
    assert jobset["kind"] == "JobSet"
    trainer = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "trainer")["template"]["spec"]
    env = env_map(trainer["template"]["spec"]["containers"][0])
    assert "CW_NOTIFY" in env and "CW_NOTIFY_SECRET_0" in env  # every node has it; cw_notify sends from rank 0 only
