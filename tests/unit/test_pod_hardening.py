"""Every pod cw renders is one a cluster admin accepts: each container has CPU and memory
requests (no BestEffort server), no privilege escalation, no capabilities, the runtime's seccomp
profile; only the server keeper and the evaluation watcher carry an API token; the servers admit only the run's pods."""

from __future__ import annotations

import pytest
from test_golden_rendering import GOLDEN_CONFIGS
from unit_helpers import CONFIGS, obj, plan_for, pod_spec

from cw_cli.render.evaluation import WATCH_CONTAINER

SERVICES_TTL = 6 * 3600


def _pods(plan):
    return [m for m in plan.manifests if m["kind"] in ("Job", "Deployment")]


def _all_plans():
    for stem, (framework, type_name) in GOLDEN_CONFIGS.items():
        yield stem, plan_for(framework, type_name, CONFIGS / f"{stem}.yaml")
    yield "trl-grpo --services", plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", services_only=True,
                                         services_lifetime_s=SERVICES_TTL)  # fmt: skip


@pytest.mark.parametrize("stem,plan", list(_all_plans()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_container_has_requests_and_a_locked_down_security_context(stem, plan):
    for manifest in _pods(plan):
        spec = pod_spec(manifest)
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False, manifest["metadata"]["name"]
        for container in spec["containers"] + spec.get("initContainers", []):
            where = f"{stem}: {manifest['metadata']['name']}/{container['name']}"
            requests = container["resources"]["requests"]
            assert {"cpu", "memory"} <= set(requests), f"{where} has no cpu/memory request (BestEffort)"
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}, where
            assert security["seccompProfile"] == {"type": "RuntimeDefault"}, where
            token_mounts = [m for m in container.get("volumeMounts", []) if "serviceaccount" in m["mountPath"]]
            # Only the containers whose job is an API call hold a token: the keeper (its Role reads the
            # run's objects) and the evaluation watcher (its Role creates the evaluation Jobs).
            assert not token_mounts or container["name"] in ("keeper", WATCH_CONTAINER), f"{where} mounts an API token"


@pytest.mark.parametrize("config,type_name", [("trl-grpo", "grpo"), ("trl-sft", "sft")])
def test_only_the_runs_own_pods_reach_its_pods(config, type_name):
    plan = plan_for("trl", type_name, CONFIGS / f"{config}.yaml", run_name="net")
    policy = obj(plan, "NetworkPolicy", "net-network")["spec"]
    own = {"app.kubernetes.io/instance": "net", "app.kubernetes.io/managed-by": "cw"}
    assert policy == {"podSelector": {"matchLabels": own}, "policyTypes": ["Ingress"],
                      "ingress": [{"from": [{"podSelector": {"matchLabels": own}}]}]}  # fmt: skip
    for manifest in _pods(plan):  # the policy selects every pod of the run
        labels = manifest["spec"]["template"]["metadata"]["labels"]
        assert own.items() <= labels.items(), manifest["metadata"]["name"]


def test_a_run_without_servers_has_no_keeper():
    plan = plan_for("trl", "sft", CONFIGS / "trl-sft.yaml")
    assert {m["kind"] for m in plan.manifests} == {"Job", "ConfigMap", "NetworkPolicy"}


def test_cws_own_helper_containers_run_as_nobody_on_a_read_only_file_system():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", run_name="h")
    helpers = pod_spec(plan.manifests[0])["initContainers"] + [
        c for m in _pods(plan)[1:] for c in pod_spec(m)["containers"] if c["name"] == "keeper"
    ]
    assert len(helpers) == 4  # wait-server, wait-reward and a keeper beside each server
    for container in helpers:
        security = container["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] == 65534, container["name"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert container["resources"]["limits"]["ephemeral-storage"] == "100Mi"
    token = next(v for v in pod_spec(obj(plan, "Deployment", "h-server"))["volumes"] if v["name"] == "keeper-token")
    assert token["projected"]["defaultMode"] == 0o444  # readable by the keeper's user


def test_rdma_requests_the_fabric_and_sets_its_nccl_variables_unless_the_run_sets_them(tmp_path):
    from unit_helpers import container, env_map, write_config

    data = {"model_name_or_path": "m", "dataset_name": "d", "rdma": True, "env": {"NCCL_IB_HCA": "mlx5"}}
    plan = plan_for("trl", "sft", write_config(tmp_path, data), nodes=2)
    trainer = container(plan.manifests[0], "trainer")
    assert trainer["resources"]["requests"]["rdma/ib"] == "1" == trainer["resources"]["limits"]["rdma/ib"]
    env = env_map(trainer)
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["UCX_TLS"] == "tcp" and env["NCCL_IB_HCA"] == "mlx5"
    plain = container(plan_for("trl", "sft", write_config(tmp_path, {**data, "rdma": False})).manifests[0], "trainer")
    assert "rdma/ib" not in plain["resources"]["requests"] and "NCCL_SOCKET_IFNAME" not in env_map(plain)


def test_trainer_pods_keep_service_mesh_sidecars_out_unless_the_run_says_otherwise(tmp_path):
    from unit_helpers import write_config

    base = {"model_name_or_path": "m", "dataset_name": "d"}
    annotations = plan_for("trl", "sft", write_config(tmp_path, base)).manifests[0]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
    mine = {**base, "annotations": {"sidecar.istio.io/inject": "true", "team": "rl"}}
    annotations = plan_for("trl", "sft", write_config(tmp_path, mine)).manifests[0]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["sidecar.istio.io/inject"] == "true" and annotations["team"] == "rl"
