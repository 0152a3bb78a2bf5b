"""--nodes N: an Indexed Job with a headless Service, stable pod DNS and per-pod rank."""

from __future__ import annotations

import pytest
from unit_helpers import CONFIGS, container, env_map, kinds_and_names, obj, plan_for, pod_spec, write_config

from cw_cli.errors import ConfigError

RUN = "golden-run"
BASE = {"model_name_or_path": "m", "dataset_name": "d", "gpu": 8}


@pytest.fixture
def two_nodes(tmp_path):
    return plan_for("trl", "sft", write_config(tmp_path, BASE), nodes=2)


def test_two_nodes_make_an_indexed_job_of_two_pods(two_nodes):
    spec = two_nodes.manifests[0]["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == 2 and spec["parallelism"] == 2
    assert spec["suspend"] is False  # printed runnable; the launcher creates it suspended


def test_two_nodes_add_a_headless_service_selecting_the_trainer_pods(two_nodes):
    assert kinds_and_names(two_nodes) == [
        ("Job", f"{RUN}-trainer"),
        ("ConfigMap", f"{RUN}-config"),
        ("Service", f"{RUN}-nodes"),
        ("NetworkPolicy", f"{RUN}-network"),
    ]
    service = obj(two_nodes, "Service", f"{RUN}-nodes")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    pod_labels = two_nodes.manifests[0]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "trainer"
    assert service["spec"]["ports"][0]["port"] == 29500
    trainer = container(two_nodes.manifests[0], "trainer")
    assert trainer["ports"] == [{"name": "rendezvous", "containerPort": 29500}]


def test_pods_get_the_subdomain_and_one_per_host(two_nodes):
    spec = pod_spec(two_nodes.manifests[0])
    assert spec["subdomain"] == f"{RUN}-nodes"
    terms = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(terms) == 1 and terms[0]["topologyKey"] == "kubernetes.io/hostname"
    pod_labels = two_nodes.manifests[0]["spec"]["template"]["metadata"]["labels"]
    assert terms[0]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    assert terms[0]["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == RUN


def test_rank_comes_from_completion_index_and_master_is_pod_zero(two_nodes):
    env = env_map(container(two_nodes.manifests[0], "trainer"))
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["CW_NODE_RANK"] == index and env["NODE_RANK"] == index
    assert env["CW_MASTER_ADDR"] == f"{RUN}-trainer-0.{RUN}-nodes" == env["MASTER_ADDR"]
    assert env["CW_MASTER_PORT"] == "29500" and env["CW_NUM_NODES"] == "2"


def _after(command, flag):
    return command[command.index(flag) + 1]


def test_trl_command_spans_all_nodes(two_nodes):
    command = container(two_nodes.manifests[0], "trainer")["command"]
    assert _after(command, "--num_processes") == "16"
    assert _after(command, "--num_machines") == "2"
    assert _after(command, "--machine_rank") == "$(CW_NODE_RANK)"
    assert _after(command, "--main_process_ip") == "$(CW_MASTER_ADDR)"
    assert _after(command, "--main_process_port") == "$(CW_MASTER_PORT)"
    # Every $(VAR) the kubelet must expand is defined in the container's env.
    env = env_map(container(two_nodes.manifests[0], "trainer"))
    for arg in command:
        if arg.startswith("$("):
            assert arg[2:-1] in env


@pytest.mark.parametrize(
    "framework,type_name,stem", [("axolotl", "sft", "axolotl-sft"), ("verifiers", "grpo", "verifiers-grpo"), ("trl", "grpo", "trl-grpo")]
)
def test_other_frameworks_span_nodes_too(framework, type_name, stem):
    plan = plan_for(framework, type_name, CONFIGS / f"{stem}.yaml", nodes=3, gpu=4)
    command = container(plan.manifests[0], "trainer")["command"]
    assert _after(command, "--num_processes") == "12" and _after(command, "--num_machines") == "3"
    assert plan.manifests[0]["spec"]["completions"] == 3
    assert ("Service", f"{RUN}-nodes") in kinds_and_names(plan)
    assert all(m["spec"].get("replicas", 1) == 1 for m in plan.manifests if m["kind"] == "Deployment")


def test_one_node_has_no_multi_node_parts(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, BASE))
    job = plan.manifests[0]
    assert "completionMode" not in job["spec"] and "subdomain" not in pod_spec(job)
    assert "affinity" not in pod_spec(job)
    assert ("Service", f"{RUN}-nodes") not in kinds_and_names(plan)
    env = env_map(container(job, "trainer"))
    assert "CW_NODE_RANK" not in env and "CW_MASTER_ADDR" not in env
    assert "--num_machines" not in container(job, "trainer")["command"]


def test_nodes_flag_beats_file(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**BASE, "nodes": 4}), nodes=2)
    assert plan.manifests[0]["spec"]["completions"] == 2


@pytest.mark.parametrize("where", ["flags", "file"])
def test_many_nodes_without_gpus_are_refused(tmp_path, where):
    if where == "flags":
        path, flags = write_config(tmp_path, BASE), {"nodes": 9, "gpu": 0}
    else:
        path, flags = write_config(tmp_path, {**BASE, "nodes": 9, "gpu": 0}), {}
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", path, **flags)
    text = "\n".join(info.value.issues)
    assert "9 nodes with gpu: 0" in text and "`nodes`" in text
    # The message points at where the value came from: the flag, or the file's line.
    assert ("--nodes" in text) if where == "flags" else (f"{path}:" in text)


@pytest.mark.parametrize("nodes", [0, -1, 513])
def test_node_count_out_of_range_is_refused(tmp_path, nodes):
    with pytest.raises(ConfigError, match="--nodes"):
        plan_for("trl", "sft", write_config(tmp_path, BASE), nodes=nodes)


def test_multi_node_job_fails_whole_on_a_failed_rank_and_single_node_retries(tmp_path):
    multi = plan_for("trl", "sft", write_config(tmp_path, BASE), nodes=2).manifests[0]["spec"]
    disruption, warned_stop, stall, failure = multi["podFailurePolicy"]["rules"]
    assert disruption == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}  # checked first
    # a rank that stopped on SIGTERM with a complete checkpoint (exit 143) is replaced, before FailJob sees it
    assert warned_stop == {"action": "Ignore", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]}}
    # a stall (exit 75) retries every node's pod, counted once per index, before FailJob sees it
    assert stall == {"action": "Count", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [75]}}
    assert failure["action"] == "FailJob"
    assert failure["onExitCodes"] == {"containerName": "trainer", "operator": "NotIn", "values": [0]}
    assert (multi["backoffLimitPerIndex"], multi["maxFailedIndexes"]) == (2, 0) and "backoffLimit" not in multi
    single = plan_for("trl", "sft", write_config(tmp_path, BASE)).manifests[0]["spec"]
    assert single["podFailurePolicy"]["rules"] == [disruption, warned_stop] and single["backoffLimit"] == 2
    assert "backoffLimitPerIndex" not in single
