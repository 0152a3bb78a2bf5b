"""`notify:` on the real API server (issue 34 item 6): the trainer pods the Job controller creates
read the URLs' secret parts from the Secret (secretKeyRef), and no object of the run holds a secret
value; a bad URL is refused at launch, naming `notify.urls[i]` and the file, with nothing created."""

from __future__ import annotations

import json

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw, write_config

SECRET_VALUES = {"SLACK_A": "T0SECRETA", "SLACK_B": "B0SECRETB", "SLACK_C": "xoxSECRETC", "HOOK": "hook-SECRET-token"}
NOTIFY = {"urls": ["slack://{SLACK_A}/{SLACK_B}/{SLACK_C}", "json://hooks.example.com/cw/{HOOK}"], "secret": "cw-notify",
          "events": ["failed", "stalled"]}  # fmt: skip


def _run_objects(kube_api, namespace: str, run: str) -> list[dict]:
    """Every object of the run, as the API server returns them."""
    selector = f"cw-cli.dev/run={run}"
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
    found = [*core.list_namespaced_config_map(namespace, label_selector=selector).items,
             *core.list_namespaced_pod(namespace, label_selector=selector).items,
             *batch.list_namespaced_job(namespace, label_selector=selector).items]  # fmt: skip
    return [kube_api.sanitize_for_serialization(item) for item in found]


def test_the_trainer_pod_reads_the_urls_secret_parts_from_the_secret(cw_env, kube_api, namespace, tmp_path, wait_for):
    client.CoreV1Api(kube_api).create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="cw-notify"), string_data=SECRET_VALUES)
    )
    config = write_config(tmp_path, {**SFT_CONFIG, "gpu": 1, "notify": NOTIFY})
    launched = run_cw(cw_env, "trl", "sft", str(config), "--name", "told", "-n", namespace)
    assert launched.returncode == 0, launched.stderr
    pods = wait_for(lambda: client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="cw-cli.dev/run=told").items,
                    timeout=60, what="the trainer pod")  # fmt: skip
    trainer = next(c for c in pods[0].spec.containers if c.name == "trainer")
    env = {e.name: e for e in trainer.env}
    settings = json.loads(env["CW_NOTIFY"].value)
    assert settings["urls"] == NOTIFY["urls"] and settings["events"] == ["failed", "stalled"] and settings["run"] == "told"
    refs = {settings["keys"][key]: key for key in SECRET_VALUES}
    for variable, key in refs.items():
        ref = env[variable].value_from.secret_key_ref
        assert (ref.name, ref.key, ref.optional) == ("cw-notify", key, True)
    configmap = client.CoreV1Api(kube_api).read_namespaced_config_map("told-config", namespace)
    assert "cw_notify.py" in configmap.data and "cw_entrypoint.py" in configmap.data
    every_object = json.dumps(_run_objects(kube_api, namespace, "told"))
    assert not [value for value in SECRET_VALUES.values() if value in every_object]


def test_a_bad_url_is_refused_at_launch_and_nothing_is_created(cw_env, kube_api, namespace, tmp_path):
    client.CoreV1Api(kube_api).create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="cw-notify"), string_data=SECRET_VALUES)
    )
    for index, bad in enumerate(["nosuchservice://x/y", "slack://T0000/B0000/XXXXXXXXXXXX"]):
        notify = {**NOTIFY, "urls": [NOTIFY["urls"][0], bad]}
        config = write_config(tmp_path, {**SFT_CONFIG, "gpu": 1, "notify": notify}, name=f"bad-{index}.yaml")
        refused = run_cw(cw_env, "trl", "sft", str(config), "--name", f"bad-{index}", "-n", namespace)
        assert refused.returncode == 2, refused.stderr
        assert f"{config}: `notify.urls[1]`" in refused.stderr and "Traceback" not in refused.stderr
        assert "XXXXXXXXXXXX" not in refused.stderr
        assert _run_objects(kube_api, namespace, f"bad-{index}") == []


def test_a_missing_notify_secret_is_refused_at_launch_and_nothing_is_created(cw_env, kube_api, namespace, tmp_path):
    config = write_config(tmp_path, {**SFT_CONFIG, "gpu": 1, "notify": NOTIFY})
    refused = run_cw(cw_env, "trl", "sft", str(config), "--name", "untold", "-n", namespace)
    assert refused.returncode == 4, refused.stderr
    assert "secret 'cw-notify' (named in the config's `secrets` or `notify.secret`) does not exist" in refused.stderr
    assert _run_objects(kube_api, namespace, "untold") == []
