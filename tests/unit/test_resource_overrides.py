"""--gpu/--cpu/--memory change the trainer only; services keep what `services:` gives them."""

from __future__ import annotations

import pytest
from unit_helpers import CONFIGS, container, obj, plan_for, pod_spec

RUN = "golden-run"


def _res(manifest, name):
    return container(manifest, name)["resources"]


def test_gpu_flag_sets_trainer_requests_and_limits():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", gpu=4)
    trainer = _res(plan.manifests[0], "trainer")
    assert trainer["requests"]["nvidia.com/gpu"] == "4" and trainer["limits"]["nvidia.com/gpu"] == "4"
    assert "--num_processes" in container(plan.manifests[0], "trainer")["command"]
    command = container(plan.manifests[0], "trainer")["command"]
    assert command[command.index("--num_processes") + 1] == "4"


def test_gpu_flag_leaves_vllm_and_reward_servers_alone():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", gpu=4, memory="100Gi", cpu="12")
    server = _res(obj(plan, "Deployment", f"{RUN}-server"), "server")
    reward = _res(obj(plan, "Deployment", f"{RUN}-reward"), "reward")
    for part in ("requests", "limits"):  # their own memory; CPU by default 4 per GPU, never the trainer's
        assert server[part] == {"nvidia.com/gpu": "2", "cpu": "8", "memory": "128Gi"}
        assert reward[part] == {"nvidia.com/gpu": "1", "cpu": "4", "memory": "64Gi"}


def test_memory_and_cpu_flags_set_trainer_requests_and_limits():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", memory="100Gi", cpu="12")
    trainer = _res(plan.manifests[0], "trainer")
    for part in ("requests", "limits"):
        assert trainer[part]["memory"] == "100Gi" and trainer[part]["cpu"] == "12"


def test_wait_init_containers_get_no_gpus_or_trainer_resources():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", gpu=4, memory="100Gi")
    for init in pod_spec(plan.manifests[0])["initContainers"]:
        assert "nvidia.com/gpu" not in init["resources"]["limits"]
        assert init["resources"]["limits"]["memory"] != "100Gi"


@pytest.mark.parametrize(
    "stem,framework,type_name",
    [("axolotl-grpo", "axolotl", "grpo"), ("verifiers-grpo", "verifiers", "grpo")],
)
def test_gpu_flag_leaves_server_of_other_frameworks_alone(stem, framework, type_name):
    plan = plan_for(framework, type_name, CONFIGS / f"{stem}.yaml", gpu=3)
    assert _res(plan.manifests[0], "trainer")["limits"]["nvidia.com/gpu"] == "3"
    assert _res(obj(plan, "Deployment", f"{RUN}-server"), "server")["limits"]["nvidia.com/gpu"] == "2"


def test_service_resources_from_set_apply_to_that_service_only():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", ["services.server.gpu=4", "services.server.cpu=6"])
    server = _res(obj(plan, "Deployment", f"{RUN}-server"), "server")
    assert server["limits"] == {"nvidia.com/gpu": "4", "cpu": "6", "memory": "128Gi"}
    assert _res(obj(plan, "Deployment", f"{RUN}-reward"), "reward")["limits"]["nvidia.com/gpu"] == "1"
    assert _res(plan.manifests[0], "trainer")["limits"]["nvidia.com/gpu"] == "8"


def test_server_data_parallel_follows_its_own_gpus_not_the_trainers():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml", gpu=4)
    command = container(obj(plan, "Deployment", f"{RUN}-server"), "server")["command"]
    assert command[command.index("--data-parallel-size") + 1] == "2"
