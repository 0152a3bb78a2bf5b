"""The after-training helper pods are rendered from kubeconfigs/common/ like every other manifest:
the reader is a small Python image without a GPU, placed anywhere unless a ReadWriteOnce volume
pins it beside the pod that holds it; reader and server meet Pod Security "restricted"; the server
asks for CPU and memory; no value changes a manifest's structure."""

from __future__ import annotations

import pytest

from cw_cli.render.helper_pods import (
    READER_DEADLINE_S,
    READER_IMAGE,
    ReaderPlacement,
    ServedModel,
    ServeSpec,
    manifests_yaml,
    reader_manifest,
    server_manifests,
)

RUN_LABELS = {"cw-cli.dev/run": "ex", "app.kubernetes.io/instance": "ex", "kueue.x-k8s.io/queue-name": "q"}


def _restricted_violations(pod: dict) -> list[str]:
    """Pod Security "restricted" (v1.3x) checks that a pod spec can fail, as the API server applies them."""
    spec = pod["spec"]
    pod_sc = spec.get("securityContext") or {}
    found = []
    for container in spec["containers"] + spec.get("initContainers", []):
        sc = container.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append("allowPrivilegeEscalation != false")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"] or set((sc.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append("capabilities")
        if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))):
            found.append("runAsNonRoot != true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            found.append("runAsUser=0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append("seccompProfile")
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
    found += [f"volume {v['name']}" for v in spec.get("volumes") or [] if not set(v) - {"name"} <= allowed]
    return found


def test_the_reader_is_a_small_image_without_a_gpu_anywhere_and_restricted():
    pod = reader_manifest("ex", RUN_LABELS, "ckpts")
    spec = pod["spec"]
    container = spec["containers"][0]
    assert container["image"] == READER_IMAGE and READER_IMAGE.startswith("python:3.12.")
    assert container["command"] == ["sleep", str(READER_DEADLINE_S)] and spec["activeDeadlineSeconds"] == READER_DEADLINE_S
    assert "nvidia.com/gpu" not in str(container["resources"]) and set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert "nodeSelector" not in spec and "affinity" not in spec and spec["tolerations"] == []
    assert spec["volumes"] == [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpts", "readOnly": True}}]
    assert container["volumeMounts"] == [{"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True}]
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert _restricted_violations(pod) == []
    assert spec["automountServiceAccountToken"] is False
    assert pod["metadata"]["labels"] == {"cw-cli.dev/run": "ex", "app.kubernetes.io/instance": "ex",
                                         "app.kubernetes.io/component": "reader"}  # fmt: skip


def test_a_reader_of_a_held_read_write_once_volume_goes_to_the_node_that_holds_it():
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec = reader_manifest("ex", RUN_LABELS, "ckpts", ReaderPlacement(node="gpu-7", tolerations=tolerations))["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]}]
    assert spec["tolerations"] == tolerations
    assert "nvidia.com/gpu" not in str(spec["containers"][0]["resources"])


def _serve_spec(**changes) -> ServeSpec:
    model = ServedModel(path="/checkpoints/ex/out", heads=32, kv_heads=8, max_positions=8192)
    values = {"run_name": "ex", "run_labels": RUN_LABELS, "claim": "ckpts", "model": model, "lifetime_s": 3600, "gpus": 2,
              "node_selector": {"pool": "gpu"}, "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}]}  # fmt: skip
    return ServeSpec(**{**values, **changes})


def test_the_server_is_restricted_asks_for_cpu_and_memory_and_ends_at_its_lifetime():
    pod, service = server_manifests(_serve_spec())
    spec = pod["spec"]
    container = spec["containers"][0]
    assert _restricted_violations(pod) == []
    assert spec["securityContext"]["runAsUser"] == 2000  # the vLLM image's own `vllm` user
    assert container["resources"] == {"requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 2},
                                      "limits": {"memory": "32Gi", "nvidia.com/gpu": 2}}  # fmt: skip
    assert spec["activeDeadlineSeconds"] == 3600 and spec["nodeSelector"] == {"pool": "gpu"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in spec["volumes"]
    assert container["env"] == _serve_spec().env
    assert service["spec"]["selector"] == {"app.kubernetes.io/component": "serve", "cw-cli.dev/run": "ex"}
    assert service["metadata"]["name"] == pod["metadata"]["name"] == "ex-serve"
    assert "kueue.x-k8s.io/queue-name" not in pod["metadata"]["labels"]


def test_a_cpu_only_server_still_asks_for_cpu_and_memory():
    container = server_manifests(_serve_spec(gpus=0))[0]["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "16Gi"}}


@pytest.mark.parametrize("hostile", ["a\nkind: Secret", "{{ name }}", "x\"]\n---\nkind: Pod", "- item"])
def test_no_value_changes_the_structure_of_a_helper_manifest(hostile):
    labels = {"cw-cli.dev/run": hostile}
    reader = reader_manifest("ex", labels, hostile, ReaderPlacement(node=hostile))
    assert reader["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == hostile
    assert reader["metadata"]["labels"]["cw-cli.dev/run"] == hostile
    pod, service = server_manifests(_serve_spec(run_labels=labels, claim=hostile,
                                                model=ServedModel(path=f"/checkpoints/{hostile}")))  # fmt: skip
    assert pod["spec"]["containers"][0]["command"][2] == f"/checkpoints/{hostile}"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == hostile
    assert set(pod["spec"]) >= {"containers", "volumes"} and service["kind"] == "Service"


def test_the_dry_run_yaml_reads_back_as_the_manifests():
    import yaml

    manifests = server_manifests(_serve_spec())
    assert list(yaml.safe_load_all(manifests_yaml(manifests))) == manifests
