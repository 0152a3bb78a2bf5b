"""cw's command line against a real API server, scheduler and controllers (KWOK fake GPU nodes).

Each test drives the real `cw` CLI in a subprocess and checks the cluster's objects with the
official client, in a namespace of its own.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml
from kubernetes import client

SFT_CONFIG = {
    "model_name_or_path": "Qwen/Qwen2.5-0.5B",
    "dataset_name": "trl-lib/Capybara",
    "learning_rate": 2.0e-5,
    "max_steps": 10,
    "cpu": "4",
    "memory": "16Gi",
    "checkpoint_volume": "none",  # these tests are about scheduling; volumes are tested below
}
GRPO_CONFIG = {
    **SFT_CONFIG,
    # 4 + 1 + 1 GPUs fit two 8-GPU nodes however the scheduler spreads the services.
    "gpu": 4,
    "reward_funcs": ["rewards.length_penalty"],
    "files": [str(Path(__file__).resolve().parents[2] / "configs" / "rewards.py")],
    "services": {"server": {"gpu": 1, "cpu": "4", "memory": "16Gi"}, "reward": {"model": "/checkpoints/rm", "gpu": 1}},
}


def run_cw(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real CLI (python -m cw_cli) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "cw_cli", *args], env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def write_config(tmp_path: Path, data: dict, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def completed_job(api: client.ApiClient, namespace: str, name: str, timeout: float = 60, condition: str = "Complete") -> client.V1Job:
    """The Job once its terminal ``condition`` (``Complete``, or ``Failed``) is set, to read its counts.

    `cw --wait` ends at ``SuccessCriteriaMet``, which the Job controller sets one status update
    before the one that moves the pod from ``uncountedTerminatedPods`` into ``status.succeeded``
    and adds ``Complete`` (20 ms apart on an idle machine, seconds under load: the test that read
    ``succeeded`` at once failed once in a full suite run). So the counts are read after the event
    they follow, not right after cw returns.
    """
    batch = client.BatchV1Api(api)

    def complete() -> client.V1Job | None:
        job = batch.read_namespaced_job(name, namespace)
        return job if any(c.type == condition and c.status == "True" for c in job.status.conditions or []) else None

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = complete()
        if job is not None:
            return job
        time.sleep(0.25)
    raise AssertionError(f"Job {name} not {condition} after {timeout} s: {batch.read_namespaced_job(name, namespace).status}")


def run_objects(api: client.ApiClient, namespace: str, run: str) -> list[str]:
    """Every object of a run still on the cluster (pods included)."""
    selector = f"cw-cli.dev/run={run}"
    core, batch, apps = client.CoreV1Api(api), client.BatchV1Api(api), client.AppsV1Api(api)
    found = [f"Job/{o.metadata.name}" for o in batch.list_namespaced_job(namespace, label_selector=selector).items]
    found += [f"Deployment/{o.metadata.name}" for o in apps.list_namespaced_deployment(namespace, label_selector=selector).items]
    found += [f"Service/{o.metadata.name}" for o in core.list_namespaced_service(namespace, label_selector=selector).items]
    found += [f"ConfigMap/{o.metadata.name}" for o in core.list_namespaced_config_map(namespace, label_selector=selector).items]
    found += [f"Pod/{o.metadata.name}" for o in core.list_namespaced_pod(namespace, label_selector=selector).items]
    return found


def test_sft_with_4_gpus_waits_until_the_job_completes(kube_api, namespace, cw_env, tmp_path):
    config = write_config(tmp_path, SFT_CONFIG)
    result = run_cw(cw_env, "trl", "sft", str(config), "--gpu", "4", "--name", "sft-four", "-n", namespace, "--wait")
    assert result.returncode == 0, result.stderr
    assert "succeeded" in result.stderr

    job = completed_job(kube_api, namespace, "sft-four-trainer")
    assert job.status.succeeded == 1
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="job-name=sft-four-trainer").items
    assert len(pods) == 1
    trainer = pods[0].spec.containers[0]
    assert trainer.resources.requests["nvidia.com/gpu"] == "4"
    assert trainer.resources.limits["nvidia.com/gpu"] == "4"
    node = client.CoreV1Api(kube_api).read_node(pods[0].spec.node_name)
    assert node.status.allocatable["nvidia.com/gpu"] == "8"

    config_map = client.CoreV1Api(kube_api).read_namespaced_config_map("sft-four-config", namespace)
    mounted = yaml.safe_load(config_map.data["config.yaml"])
    assert mounted["model_name_or_path"] == "Qwen/Qwen2.5-0.5B"
    assert mounted["learning_rate"] == 2.0e-5
    assert "gpu" not in mounted and "cpu" not in mounted and "memory" not in mounted
    assert config_map.metadata.owner_references[0].name == "sft-four-trainer"


def test_sixteen_gpus_on_one_node_stays_pending_and_status_says_why(kube_api, namespace, cw_env, tmp_path, wait_for):
    config = write_config(tmp_path, SFT_CONFIG)
    result = run_cw(cw_env, "trl", "sft", str(config), "--gpu", "16", "--name", "too-big", "-n", namespace)
    assert result.returncode == 0, result.stderr
    core = client.CoreV1Api(kube_api)

    def unschedulable():
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=too-big-trainer").items
        return pods and any(c.type == "PodScheduled" and c.status == "False" for c in pods[0].status.conditions or [])

    wait_for(unschedulable, 30, what="the scheduler to refuse the pod")
    status = run_cw(cw_env, "status", "too-big", "-n", namespace)
    assert status.returncode == 0, status.stderr
    assert "needs 16 nvidia.com/gpu, the largest node has 8" in status.stdout
    assert core.list_namespaced_pod(namespace, label_selector="job-name=too-big-trainer").items[0].status.phase == "Pending"


def test_services_flag_creates_only_the_services_and_they_become_ready(kube_api, namespace, cw_env, tmp_path):
    config = write_config(tmp_path, GRPO_CONFIG)
    result = run_cw(cw_env, "trl", "rlhf", str(config), "--services", "--ttl", "6h", "--wait", "--name", "svc-only", "-n", namespace)
    assert result.returncode == 0, result.stderr
    objects = run_objects(kube_api, namespace, "svc-only")
    assert not [o for o in objects if o.startswith("Job/")]
    assert {"Deployment/svc-only-server", "Deployment/svc-only-reward", "Service/svc-only-server", "Service/svc-only-reward"} <= set(objects)
    apps = client.AppsV1Api(kube_api)
    for name in ("svc-only-server", "svc-only-reward"):
        assert apps.read_namespaced_deployment(name, namespace).status.ready_replicas == 1
    server = apps.read_namespaced_deployment("svc-only-server", namespace).spec.template.spec.containers[0]
    assert server.resources.limits["nvidia.com/gpu"] == "1"
    assert server.command[:2] == ["vllm", "serve"]


def test_multi_service_trainer_waits_in_the_cluster_for_its_services(kube_api, namespace, cw_env, tmp_path):
    config = write_config(tmp_path, GRPO_CONFIG)
    result = run_cw(
        cw_env, "trl", "grpo", str(config), "--name", "grpo-full", "-n", namespace, "--wait", "--timeout", "900", timeout=180
    )
    assert result.returncode == 0, result.stderr
    apps = client.AppsV1Api(kube_api)
    job = completed_job(kube_api, namespace, "grpo-full-trainer")
    assert job.status.succeeded == 1
    # The trainer needs no cw to wait: one init container per server polls the server's Service
    # until it answers, and gives up at the launch's --timeout (KWOK runs no container, so the
    # wait itself is run in tests/unit/test_launch_safety.py).
    waits = {c.name: c.command for c in job.spec.template.spec.init_containers}
    assert waits["wait-server"][-2:] == ["http://grpo-full-server:8000/health", "900"]
    assert waits["wait-reward"][-2] == "http://grpo-full-reward:8001/health"
    for name in ("grpo-full-server", "grpo-full-reward"):
        deployment = apps.read_namespaced_deployment(name, namespace)
        assert any(c.type == "Available" and c.status == "True" for c in deployment.status.conditions)
    stderr = result.stderr
    assert stderr.index("started Job grpo-full-trainer") < stderr.index("is Ready")
    # --wait stopped the servers once the trainer finished, freeing their GPUs.
    replicas = [apps.read_namespaced_deployment(f"grpo-full-{r}", namespace).spec.replicas for r in ("server", "reward")]
    assert replicas == [0, 0] and "stopped grpo-full-" in stderr


def test_two_nodes_of_eight_gpus_put_one_pod_on_each_gpu_node(kube_api, namespace, cw_env, tmp_path, wait_for):
    config = write_config(tmp_path, SFT_CONFIG)
    result = run_cw(cw_env, "trl", "sft", str(config), "--nodes", "2", "--gpu", "8", "--name", "two-nodes", "-n", namespace)
    assert result.returncode == 0, result.stderr
    core = client.CoreV1Api(kube_api)

    def scheduled():
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=two-nodes-trainer").items
        return len(pods) == 2 and all(p.spec.node_name for p in pods) and pods

    pods = wait_for(scheduled, 30, what="both trainer pods to be scheduled")
    assert len({p.spec.node_name for p in pods}) == 2
    for pod in pods:
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"
        assert core.read_node(pod.spec.node_name).metadata.labels.get("nvidia.com/gpu.product")
        assert pod.spec.subdomain == "two-nodes-nodes"
    ranks = sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert ranks == ["0", "1"]
    headless = core.read_namespaced_service("two-nodes-nodes", namespace)
    assert headless.spec.cluster_ip == "None"


def test_delete_removes_the_whole_run_and_nothing_else(kube_api, namespace, cw_env, tmp_path, wait_for):
    config = write_config(tmp_path, GRPO_CONFIG)
    for name in ("keep-me", "drop-me"):
        result = run_cw(cw_env, "trl", "grpo", str(config), "--name", name, "-n", namespace, timeout=180)
        assert result.returncode == 0, result.stderr
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert listed.returncode == 0 and "keep-me" in listed.stdout and "drop-me" in listed.stdout
    before_keep = sorted(run_objects(kube_api, namespace, "keep-me"))

    result = run_cw(cw_env, "delete", "drop-me", "-n", namespace)
    assert result.returncode == 0, result.stderr
    wait_for(lambda: not run_objects(kube_api, namespace, "drop-me"), 60, what="every object of drop-me to go")
    assert sorted(run_objects(kube_api, namespace, "keep-me")) == before_keep
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert "drop-me" not in listed.stdout and "keep-me" in listed.stdout
    assert run_cw(cw_env, "status", "drop-me", "-n", namespace).returncode == 4


def test_deleting_the_job_garbage_collects_the_rest_of_the_run(kube_api, namespace, cw_env, tmp_path, wait_for):
    config = write_config(tmp_path, GRPO_CONFIG)
    assert run_cw(cw_env, "trl", "grpo", str(config), "--name", "gc-run", "-n", namespace, timeout=180).returncode == 0
    client.BatchV1Api(kube_api).delete_namespaced_job("gc-run-trainer", namespace, propagation_policy="Background")
    wait_for(lambda: not run_objects(kube_api, namespace, "gc-run"), 60, what="garbage collection of gc-run")


def test_reusing_a_run_name_is_an_error_and_leaves_the_running_job_alone(kube_api, namespace, cw_env, tmp_path):
    config = write_config(tmp_path, SFT_CONFIG)
    assert run_cw(cw_env, "trl", "sft", str(config), "--gpu", "2", "--name", "taken", "-n", namespace).returncode == 0
    job = client.BatchV1Api(kube_api).read_namespaced_job("taken-trainer", namespace)
    again = run_cw(cw_env, "trl", "sft", str(config), "--gpu", "4", "--name", "taken", "-n", namespace)
    assert again.returncode == 5
    assert "already exists" in again.stderr and "Traceback" not in again.stderr
    after = client.BatchV1Api(kube_api).read_namespaced_job("taken-trainer", namespace)
    assert after.metadata.generation == job.metadata.generation  # spec untouched (status may move on)
    assert after.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"


def test_a_missing_secret_is_refused_before_anything_is_created(kube_api, namespace, cw_env, tmp_path):
    config = write_config(tmp_path, {**SFT_CONFIG, "secrets": {"HF_TOKEN": "no-such-secret"}})
    result = run_cw(cw_env, "trl", "sft", str(config), "--name", "no-secret", "-n", namespace)
    assert result.returncode == 4
    assert "no-such-secret" in result.stderr and "Traceback" not in result.stderr
    assert run_objects(kube_api, namespace, "no-secret") == []


def test_a_forbidden_namespace_gives_the_documented_error_and_creates_nothing(kube_api, namespace, cw_env, tmp_path):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody")))
    token = core.create_namespaced_service_account_token(
        "nobody", namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    ).status.token
    admin = yaml.safe_load(Path(cw_env["KUBECONFIG"]).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    limited = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "nobody", "user": {"token": token}}],
        "contexts": [{"name": "nobody", "context": {"cluster": cluster["name"], "user": "nobody"}}],
        "current-context": "nobody",
    }
    kubeconfig = tmp_path / "limited-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(limited))
    config = write_config(tmp_path, SFT_CONFIG)
    result = run_cw({**cw_env, "KUBECONFIG": str(kubeconfig)}, "trl", "sft", str(config), "--name", "forbidden", "-n", namespace)
    assert result.returncode == 7, result.stderr
    assert "forbidden" in result.stderr and "Traceback" not in result.stderr
    assert run_objects(kube_api, namespace, "forbidden") == []


def reject_config_maps_containing(api: client.ApiClient, namespace: str, marker: str, wait_for) -> None:
    """A ValidatingAdmissionPolicy (CEL, enforced by the API server itself) that refuses ConfigMaps
    whose data contains ``marker``, in ``namespace`` only: a rejection cw cannot foresee."""
    admission = client.AdmissionregistrationV1Api(api)
    name = f"cw-test-reject-{namespace}"
    admission.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{
                "expression": f"!has(object.data) || !object.data.exists(k, object.data[k].contains('{marker}'))",
                "message": "cw test: this ConfigMap is refused",
            }],
        },
    })  # fmt: skip
    admission.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    })  # fmt: skip
    core = client.CoreV1Api(api)

    def refused() -> bool:
        try:
            core.create_namespaced_config_map(namespace, {"metadata": {"name": "probe"}, "data": {"x": marker}})
        except client.ApiException as exc:
            return exc.status in (400, 403, 422)
        core.delete_namespaced_config_map("probe", namespace)
        return False

    wait_for(refused, 30, 0.5, what="the admission policy to be enforced")


def test_a_manifest_the_api_server_rejects_rolls_back_what_was_created(kube_api, namespace, cw_env, tmp_path, wait_for):
    # The ConfigMap is refused by the API server after the Job was already created.
    marker = "cw-test-refuse-this-config"
    reject_config_maps_containing(kube_api, namespace, marker, wait_for)
    config = write_config(tmp_path, {**SFT_CONFIG, "dataset_text_field": marker})
    result = run_cw(cw_env, "trl", "sft", str(config), "--name", "refused-cm", "-n", namespace)
    assert result.returncode == 6, result.stderr
    assert "rejected by the API server" in result.stderr and "removed what it had created" in result.stderr
    time.sleep(1)
    assert run_objects(kube_api, namespace, "refused-cm") == []


def test_server_dry_run_is_validated_by_the_server_and_creates_nothing(kube_api, namespace, cw_env, tmp_path):
    config = write_config(tmp_path, GRPO_CONFIG)
    result = run_cw(cw_env, "trl", "grpo", str(config), "--server-dry-run", "--name", "dry", "-n", namespace)
    assert result.returncode == 0, result.stderr
    printed = run_cw(cw_env, "trl", "grpo", str(config), "--dry-run", "--name", "dry")
    count = len([d for d in yaml.safe_load_all(printed.stdout) if d])
    # Job, ConfigMap, keeper ServiceAccount/Role/RoleBinding, NetworkPolicy, 2 x (Deployment, Service)
    assert count == 10 and f"accepted all {count} objects" in result.stderr
    assert run_objects(kube_api, namespace, "dry") == []
    bad = write_config(tmp_path, {**SFT_CONFIG, "node_selector": {"not a valid key!": "x"}}, "bad.yaml")
    rejected = run_cw(cw_env, "trl", "sft", str(bad), "--server-dry-run", "--name", "dry-bad", "-n", namespace)
    assert rejected.returncode == 6
    assert run_objects(kube_api, namespace, "dry-bad") == []


def test_unreachable_cluster_is_one_line_with_a_hint(tmp_path, cw_env):
    kubeconfig = tmp_path / "dead"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "dead", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
        "current-context": "dead",
    }))
    result = run_cw({**cw_env, "KUBECONFIG": str(kubeconfig)}, "list")
    assert result.returncode == 3
    assert "cannot reach the API server" in result.stderr and "Traceback" not in result.stderr


def test_logs_are_read_and_followed_through_the_api_server(kube_api, namespace, cw_env, tmp_path, wait_for):
    # KWOK serves one fixed log file for every container (ClusterLogs); following ends with the pod.
    config = write_config(tmp_path, SFT_CONFIG)
    assert run_cw(cw_env, "trl", "sft", str(config), "--gpu", "1", "--name", "logged", "-n", namespace).returncode == 0
    result = run_cw(cw_env, "logs", "logged", "-f", "-n", namespace, timeout=90)
    assert result.returncode == 0, result.stderr
    assert "KWOK fake node" in result.stdout
    assert len(result.stdout.splitlines()) == len(set(result.stdout.splitlines())), "a line was repeated"
    missing = run_cw(cw_env, "logs", "logged", "--role", "server", "-n", namespace)
    assert missing.returncode == 4 and "no server pod" in missing.stderr


def test_a_full_node_trainer_and_two_servers_fit_two_gpu_nodes(kube_api, namespace, cw_env, tmp_path, wait_for):
    # The servers prefer one node together, so the 8-GPU trainer still finds a whole node.
    config = write_config(tmp_path, {**GRPO_CONFIG, "gpu": 8})
    result = run_cw(cw_env, "trl", "grpo", str(config), "--name", "packed", "-n", namespace, timeout=180)
    assert result.returncode == 0, result.stderr
    core = client.CoreV1Api(kube_api)

    def placed():
        pods = core.list_namespaced_pod(namespace, label_selector="cw-cli.dev/run=packed").items
        nodes = {p.metadata.labels["app.kubernetes.io/component"]: p.spec.node_name for p in pods}
        return len(nodes) == 3 and all(nodes.values()) and nodes

    nodes = wait_for(placed, 30, what="the trainer and both servers to be scheduled")
    assert nodes["server"] == nodes["reward"] != nodes["trainer"]


def test_wait_exits_1_when_the_run_fails(kube_api, namespace, cw_env, tmp_path):
    # The test cluster's KWOK stages fail a Job pod whose annotation asks for an exit code.
    config = write_config(tmp_path, {**SFT_CONFIG, "annotations": {"kwok.cw/exit-code": "3"}, "backoff_limit": 0})
    result = run_cw(cw_env, "trl", "sft", str(config), "--gpu", "1", "--name", "failing", "-n", namespace, "--wait")
    assert result.returncode == 1, result.stderr
    assert "run failed" in result.stderr and "Traceback" not in result.stderr
    job = completed_job(kube_api, namespace, "failing-trainer", condition="Failed")  # cw ends at FailureTarget, one update sooner
    assert job.status.failed == 1


def test_a_failed_rank_fails_the_whole_multi_node_run_at_once(kube_api, namespace, cw_env, tmp_path):
    # Retrying one rank alone would hang the others; the Job must fail instead, despite backoff_limit.
    config = write_config(tmp_path, {**SFT_CONFIG, "annotations": {"kwok.cw/exit-code": "7"}, "backoff_limit": 5})
    result = run_cw(cw_env, "trl", "sft", str(config), "--nodes", "2", "--gpu", "8", "--name", "rank-fail", "-n", namespace, "--wait")
    assert result.returncode == 1, result.stderr
    job = client.BatchV1Api(kube_api).read_namespaced_job("rank-fail-trainer", namespace)
    failed = next(c for c in job.status.conditions if c.type == "Failed" and c.status == "True")
    assert failed.reason == "PodFailurePolicy"
    assert (job.status.failed or 0) <= 2  # no retries beyond the first failures


def test_verifiers_run_reaches_its_server_and_weight_sync_port_through_the_service(kube_api, namespace, cw_env, tmp_path):
    import tomllib

    configs = Path(__file__).resolve().parents[2] / "configs"
    data = yaml.safe_load((configs / "verifiers-grpo.yaml").read_text())
    data.update(cpu="4", memory="16Gi", checkpoint_volume="none", files=[str(configs / "cw_reverse_text.py")])
    data["services"]["server"].update(cpu="4", memory="16Gi")
    config = write_config(tmp_path, {k: v for k, v in data.items() if v is not None})
    result = run_cw(cw_env, "verifiers", "grpo", str(config), "--name", "vf", "-n", namespace, "--wait", timeout=180)
    assert result.returncode == 0, result.stderr
    core = client.CoreV1Api(kube_api)
    assert completed_job(kube_api, namespace, "vf-trainer").status.succeeded == 1
    service = core.read_namespaced_service("vf-server", namespace)
    ports = {p.name: (p.port, p.target_port) for p in service.spec.ports}
    assert ports["weight-sync"] == (51216, 51216)
    assert service.spec.cluster_ip == "None" and service.spec.publish_not_ready_addresses is True
    mounted = tomllib.loads(core.read_namespaced_config_map("vf-config", namespace).data["config.toml"])
    args = mounted["trainer"]["args"]
    assert (args["vllm_server_host"], args["vllm_server_port"]) == (service.metadata.name, ports["http"][0])
    assert mounted["inference"]["gpus"] == 2 and mounted["trainer"]["gpus"] == 4


def create_bound_volumes(api: client.ApiClient, namespace: str, *claims: str) -> None:
    """Claims the test cluster's real PV controller binds at once (no provisioner here)."""
    from cw_cli.testcluster.volumes import volume_manifests

    core = client.CoreV1Api(api)
    for claim in claims:
        volume, pvc = volume_manifests(namespace, claim)
        core.create_persistent_volume(volume)
        core.create_namespaced_persistent_volume_claim(namespace, pvc)


def test_volumes_working_dir_and_shipped_files_are_accepted_and_scheduled(kube_api, namespace, cw_env, tmp_path, wait_for):
    """A GRPO run with a checkpoint volume, a data volume, the shared HF cache and files its config
    names (a binary one included): the real API server accepts every object, the PV controller
    binds the claims and the scheduler places the pods, and the run succeeds."""
    create_bound_volumes(kube_api, namespace, "ckpts", "datasets", "hf-cache")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    (tmp_path / "data" / "blob.bin").write_bytes(bytes(range(256)))
    data = {
        **GRPO_CONFIG,
        "checkpoint_volume": "ckpts",
        "volumes": {"datasets": "/data"},
        "hf_cache_volume": "hf-cache",
        "dataset_name": "data",
        "output_dir": "outputs/grpo",
        "services": {"server": {"gpu": 1, "cpu": "4", "memory": "16Gi"}},
    }
    config = write_config(tmp_path, data)
    result = run_cw(cw_env, "trl", "grpo", str(config), "--name", "vol", "-n", namespace, "--wait", timeout=180)
    assert result.returncode == 0, result.stderr
    assert "ships data with the run as /etc/cw/files/data" in result.stderr

    core = client.CoreV1Api(kube_api)
    assert completed_job(kube_api, namespace, "vol-trainer").status.succeeded == 1
    for claim in ("ckpts", "datasets", "hf-cache"):
        assert core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase == "Bound"
    trainer_pod = core.list_namespaced_pod(namespace, label_selector="job-name=vol-trainer").items[0]
    trainer = trainer_pod.spec.containers[0]
    assert trainer.working_dir == "/checkpoints/vol"
    mounts = {m.mount_path: m for m in trainer.volume_mounts}
    assert mounts["/data"].read_only is True and not mounts["/checkpoints"].read_only
    claims = {v.name: v.persistent_volume_claim for v in trainer_pod.spec.volumes if v.persistent_volume_claim}
    assert {c.claim_name for c in claims.values()} == {"ckpts", "datasets", "hf-cache"}
    assert {e.name: e.value for e in trainer.env}["HF_HOME"] == "/hf-cache"
    # The server was scaled to zero once the run ended; its template is what its pods ran.
    server = client.AppsV1Api(kube_api).read_namespaced_deployment("vol-server", namespace).spec.template
    assert "/hf-cache" in {m.mount_path for m in server.spec.containers[0].volume_mounts}
    assert {e.name: e.value for e in server.spec.containers[0].env}["HF_HOME"] == "/hf-cache"

    config_map = core.read_namespaced_config_map("vol-config", namespace)
    mounted = yaml.safe_load(config_map.data["config.yaml"])
    assert mounted["dataset_name"] == "/etc/cw/files/data" and mounted["output_dir"] == "outputs/grpo"
    assert list(config_map.binary_data.values()) and "train.jsonl" in "".join(config_map.data)
    items = {i.path for i in next(v for v in trainer_pod.spec.volumes if v.name == "config").config_map.items}
    assert {"config.yaml", "files/data/train.jsonl", "files/data/blob.bin"} <= items


def test_readme_quick_start_runs_on_the_checkpoint_volume_cw_cluster_up_creates(kube_api, cw_env):
    """`cw trl sft configs/test-cluster-sft.yaml --gpu 4 --wait` as the README has it: its volume is the
    claim `checkpoints` that `cw cluster up` made in namespace default, bound by the PV controller."""
    core = client.CoreV1Api(kube_api)
    assert core.read_namespaced_persistent_volume_claim("checkpoints", "default").status.phase == "Bound"
    config = Path(__file__).resolve().parents[2] / "configs" / "test-cluster-sft.yaml"
    name = f"quick-{int(time.time()) % 100000}"
    try:
        result = run_cw(cw_env, "trl", "sft", str(config), "--gpu", "4", "--wait", "--name", name, "-n", "default")
        assert result.returncode == 0, result.stderr
        job = completed_job(kube_api, "default", f"{name}-trainer")
        assert job.status.succeeded == 1
        volumes = {v.name: v for v in job.spec.template.spec.volumes}
        assert volumes["checkpoints"].persistent_volume_claim.claim_name == "checkpoints"
        assert job.spec.template.spec.containers[0].working_dir == f"/checkpoints/{name}"
    finally:
        run_cw(cw_env, "delete", name, "-n", "default")


def test_a_grpo_run_is_admitted_under_pod_security_baseline_and_deleted_whole(kube_api, namespace, cw_env, tmp_path, wait_for):
    """The real PodSecurity admission, enforcing "baseline" in the namespace, admits every pod of a
    run with servers; the run's keeper identity and NetworkPolicy are accepted and go with it."""
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(kube_api)
    labels = {"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "latest"}
    core.patch_namespace(namespace, {"metadata": {"labels": labels}})
    privileged = client.V1Pod(
        metadata=client.V1ObjectMeta(name="privileged"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="c", image="x", security_context=client.V1SecurityContext(privileged=True))]),
    )
    try:
        core.create_namespaced_pod(namespace, privileged)
        raise AssertionError("baseline was not enforced: a privileged pod was admitted")
    except ApiException as exc:
        assert exc.status == 403 and "baseline" in exc.body

    config = write_config(tmp_path, {**GRPO_CONFIG, "services": {"server": {"gpu": 1}, "reward": {"model": "/checkpoints/rm", "gpu": 1}}})
    result = run_cw(cw_env, "trl", "grpo", str(config), "--name", "psa", "-n", namespace, "--wait", timeout=180)
    assert result.returncode == 0, result.stderr
    assert completed_job(kube_api, namespace, "psa-trainer").status.succeeded == 1
    rbac, net = client.RbacAuthorizationV1Api(kube_api), client.NetworkingV1Api(kube_api)
    assert rbac.read_namespaced_role_binding("psa-keeper", namespace).subjects[0].namespace == namespace
    assert net.read_namespaced_network_policy("psa-network", namespace).spec.policy_types == ["Ingress"]
    for deployment in client.AppsV1Api(kube_api).list_namespaced_deployment(namespace).items:
        requests = deployment.spec.template.spec.containers[0].resources.requests
        assert {"cpu", "memory"} <= set(requests), deployment.metadata.name

    deleted = run_cw(cw_env, "delete", "psa", "-n", namespace)
    assert deleted.returncode == 0, deleted.stderr
    for kind in ("NetworkPolicy/psa-network", "RoleBinding/psa-keeper", "Role/psa-keeper", "ServiceAccount/psa-keeper"):
        assert kind in deleted.stdout + deleted.stderr
    wait_for(lambda: not rbac.list_namespaced_role(namespace).items and not net.list_namespaced_network_policy(namespace).items,
             30, what="the keeper Role and the NetworkPolicy to be gone")  # fmt: skip


def test_an_evicted_rank_is_replaced_and_the_multi_node_run_still_succeeds(kube_api, namespace, cw_env, tmp_path, wait_for):
    """A disruption (here the Eviction API, as a node drain uses it) marks the pod DisruptionTarget;
    the Job's podFailurePolicy ignores it, so the rank is recreated instead of failing the run."""
    data = {**SFT_CONFIG, "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "20s"}}
    result = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, data)), "--gpu", "8", "--nodes", "2",
                    "--name", "evict", "-n", namespace)  # fmt: skip
    assert result.returncode == 0, result.stderr
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)

    def running_rank_one():
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=evict-trainer").items
        return next((p for p in pods if p.metadata.annotations.get("batch.kubernetes.io/job-completion-index") == "1"
                     and p.status.phase == "Running"), None)  # fmt: skip

    victim = wait_for(running_rank_one, 60, what="rank 1 to run")
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=victim.metadata.name, namespace=namespace))
    core.create_namespaced_pod_eviction(victim.metadata.name, namespace, eviction)

    def finished():
        job = batch.read_namespaced_job("evict-trainer", namespace)
        return next((c.type for c in job.status.conditions or [] if c.type in ("Complete", "Failed") and c.status == "True"), None)

    assert wait_for(finished, 90, what="the run to finish") == "Complete"  # "Failed" without the Ignore rule
    job = batch.read_namespaced_job("evict-trainer", namespace)
    assert job.status.succeeded == 2 and not job.status.failed  # the evicted rank was not counted
    ranks = [p for p in core.list_namespaced_pod(namespace, label_selector="job-name=evict-trainer").items
             if p.metadata.annotations.get("batch.kubernetes.io/job-completion-index") == "1"]  # fmt: skip
    assert victim.metadata.name not in {p.metadata.name for p in ranks}  # rank 1 ran again in a new pod
