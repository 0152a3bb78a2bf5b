"""A `priority_class` the cluster does not have is refused before anything is created (before, the
Job was created and the API server refused each of its pods); one that exists launches. A user
whose Role may not read PriorityClasses (cluster-scoped; the shipped launch Role does not grant
it) still launches: cw cannot tell, and the pods' refusal would be explained by `cw status`."""

from __future__ import annotations

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw, run_objects, write_config


def test_a_missing_priority_class_creates_nothing(kube_api, namespace, cw_env, tmp_path):
    config = write_config(tmp_path, {**SFT_CONFIG, "priority_class": "no-such-class"})
    refused = run_cw(cw_env, "trl", "sft", str(config), "--name", "prio", "-n", namespace)
    assert refused.returncode == 4, refused.stderr
    assert "PriorityClass 'no-such-class'" in refused.stderr and "Traceback" not in refused.stderr
    assert run_objects(kube_api, namespace, "prio") == []

    scheduling = client.SchedulingV1Api(kube_api)
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=f"{namespace}-low"), value=10))
    try:
        config = write_config(tmp_path, {**SFT_CONFIG, "gpu": 1, "priority_class": f"{namespace}-low"})  # 1 GPU: the class is the point
        launched = run_cw(cw_env, "trl", "sft", str(config), "--name", "prio", "-n", namespace)
        assert launched.returncode == 0, launched.stderr
    finally:
        scheduling.delete_priority_class(f"{namespace}-low")


def test_a_user_who_cannot_read_priority_classes_is_not_stopped(kube_api, namespace, as_documented_roles, tmp_path):
    scheduling = client.SchedulingV1Api(kube_api)
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=f"{namespace}-mid"), value=20))
    try:
        env = as_documented_roles("read-only", "launch")
        config = write_config(tmp_path, {**SFT_CONFIG, "gpu": 1, "priority_class": f"{namespace}-mid"})
        launched = run_cw(env, "trl", "sft", str(config), "--name", "prio2", "-n", namespace)
        assert launched.returncode == 0, launched.stderr
    finally:
        scheduling.delete_priority_class(f"{namespace}-mid")
