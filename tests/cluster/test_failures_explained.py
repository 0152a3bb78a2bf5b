"""`cw status` and `cw list` say why a run died, on a real API server and Job controller.

KWOK drives the pods (kubeconfigs/cluster/stages/): pod-fail ends a Job pod with the exit code
and reason of its annotations (OOMKilled), pod-waiting keeps one waiting (ImagePullBackOff,
CrashLoopBackOff, init containers still running). A kwok `Logs` object gives a pod's container
the log text of a real failure (torch's CUDA OOM, huggingface_hub's 401, ProcessGroupNCCL's
watchdog); an eviction is the status a kubelet writes. cw reads it all through the API server.
Several runs share one namespace and start together, to keep this module quick.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml
from kubernetes import client
from test_cw_end_to_end import GRPO_CONFIG, SFT_CONFIG, run_cw, write_config

CUDA_OOM = """\
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 125, in forward
    return F.linear(input, self.weight, self.bias)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.81 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated memory 74.32 GiB is allocated by PyTorch, and 2.91 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)
"""
HF_401 = """\
huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-67c2f0aa-3b1e0c5d2e6f7a8b9c0d1e2f)

Repository Not Found for url: https://huggingface.co/api/models/meta-llama/Llama-3.1-8B/revision/main.
Please make sure you specified the correct `repo_id` and `repo_type`.
If you are trying to access a private or gated repo, make sure you are authenticated and your token has the required permissions.
For more details, see https://huggingface.co/docs/huggingface_hub/authentication
"""
NCCL = """\
[rank0]:[E301 11:59:31.123456789 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2117, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600083 milliseconds before timing out.
[rank0]:[E301 11:59:31.323456789 ProcessGroupNCCL.cpp:681] [Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[rank0]:[E301 11:59:31.423456789 ProcessGroupNCCL.cpp:695] [Rank 0] To avoid data inconsistency, we are taking the entire process down.
"""
SERVER_CRASH = """\
INFO 03-01 11:59:00 api_server.py:912] vLLM API server version 0.9.9
ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (21856). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""
EVICTION = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi. "


def _launch(env, tmp_path: Path, namespace: str, name: str, data: dict, *args: str) -> subprocess.Popen:
    config = write_config(tmp_path, data, f"{name}.yaml")
    command = [sys.executable, "-m", "cw_cli", *args, str(config), "--name", name, "-n", namespace]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def _launched(procs: dict[str, subprocess.Popen]) -> None:
    for name, proc in procs.items():
        _, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"{name}: {stderr}"


def _pods(core, namespace: str, run: str, role: str = "trainer") -> list:
    selector = f"cw-cli.dev/run={run},app.kubernetes.io/component={role}"
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def _give_log(custom, tmp_path: Path, namespace: str, pod: str, container: str, text: str, previous: str | None = None) -> None:
    """A kwok Logs object: the container's log (and its previous run's) from CRI-format files."""

    def cri(name: str, body: str) -> str:
        path = tmp_path / f"{pod}-{container}-{name}.log"
        path.write_text("".join(f"2026-03-01T11:59:{i:02d}.000000000Z stdout F {line}\n" for i, line in enumerate(body.splitlines())))
        return str(path)

    entry = {"containers": [container], "logsFile": cri("current", text), "follow": False}
    if previous is not None:
        entry["previousLogsFile"] = cri("previous", previous)
    custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
        "metadata": {"name": pod, "namespace": namespace}, "spec": {"logs": [entry]},
    })  # fmt: skip


def _job_failed(batch, namespace: str, run: str) -> bool:
    job = batch.read_namespaced_job(f"{run}-trainer", namespace)
    return any(c.type == "Failed" and c.status == "True" for c in job.status.conditions or [])


def test_each_way_a_trainer_dies_is_explained_by_status_and_list(kube_api, namespace, cw_env, tmp_path, wait_for):
    core, batch, custom = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api), client.CustomObjectsApi(kube_api)
    fails = lambda code, **more: {**SFT_CONFIG, "backoff_limit": 0, "annotations": {"kwok.cw/exit-code": str(code), **more}}  # noqa: E731
    runs = {
        "oom": fails(137, **{"kwok.cw/terminated-reason": "OOMKilled"}),
        # Slow enough (delay) that the log exists before the pod fails, as it would.
        "cudaoom": fails(1, **{"pod-complete.stage.kwok.x-k8s.io/delay": "8s"}),
        "hf401": fails(1, **{"pod-complete.stage.kwok.x-k8s.io/delay": "8s"}),
        "nccl": fails(1, **{"pod-complete.stage.kwok.x-k8s.io/delay": "8s"}),
        "pull": {**SFT_CONFIG, "annotations": {"kwok.cw/waiting-reason": "ImagePullBackOff"}},
        "evicted": {**SFT_CONFIG, "backoff_limit": 0, "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}},
    }
    procs = {}
    for name, data in runs.items():
        extra = ("--image", "registry.example.com/team/trainer:no-such-tag") if name == "pull" else ()
        procs[name] = _launch(cw_env, tmp_path, namespace, name, data, "trl", "sft", "--gpu", "1", *extra)
    _launched(procs)

    for run, text in (("cudaoom", CUDA_OOM), ("hf401", HF_401), ("nccl", NCCL)):
        pod = wait_for(lambda run=run: next(iter(_pods(core, namespace, run)), None), 60, what=f"the pod of {run}")
        _give_log(custom, tmp_path, namespace, pod.metadata.name, "trainer", text)

    # The kubelet's eviction of a running pod: a DisruptionTarget condition, then phase Failed.
    evicted = wait_for(lambda: next((p for p in _pods(core, namespace, "evicted") if p.status.phase == "Running"), None),
                       60, what="the evicted run's pod to run")  # fmt: skip
    now = datetime.now(timezone.utc).isoformat()
    core.patch_namespaced_pod_status(evicted.metadata.name, namespace, {"status": {
        "phase": "Failed", "reason": "Evicted",
        "message": EVICTION + "Container trainer was using 17Gi, request is 16Gi, has larger consumption of memory. ",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": EVICTION, "lastTransitionTime": now}],
        "containerStatuses": [{"name": "trainer", "image": evicted.spec.containers[0].image, "imageID": "", "ready": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": 137, "reason": "Error", "startedAt": now, "finishedAt": now}}}],
    }})  # fmt: skip

    for run in ("oom", "cudaoom", "hf401", "nccl"):
        wait_for(lambda run=run: _job_failed(batch, namespace, run), 90, what=f"Job {run}-trainer to fail")
    # cw's Job ignores a disruption (podFailurePolicy): it replaces the pod, the run goes on.
    wait_for(lambda: len(_pods(core, namespace, "evicted")) == 2, 60, what="a replacement of the evicted pod")
    wait_for(lambda: any(s.state.waiting for p in _pods(core, namespace, "pull") for s in p.status.container_statuses or []),
             60, what="the pull run's container to wait")  # fmt: skip

    listed = run_cw(cw_env, "list", "-n", namespace, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    failure = {item["name"]: item["failure"] for item in json.loads(listed.stdout)["items"]}
    assert failure == {"oom": "OOMKilled (trainer)", "cudaoom": "CUDA OOM", "hf401": "HF token 401", "nccl": "NCCL timeout",
                       "pull": "image pull", "evicted": None}  # fmt: skip
    table = run_cw(cw_env, "list", "-n", namespace)
    assert table.returncode == 0 and "REASON" in table.stdout
    row = next(line for line in table.stdout.splitlines() if line.split()[:1] == ["oom"])
    assert "Failed" in row and "OOMKilled (trainer)" in row
    failed_only = json.loads(run_cw(cw_env, "list", "-n", namespace, "--state", "failed", "-o", "json").stdout)["items"]
    assert sorted(item["name"] for item in failed_only) == ["cudaoom", "hf401", "nccl", "oom"]

    def status(run: str) -> str:
        result = run_cw(cw_env, "status", run, "-n", namespace)
        assert result.returncode == 0, result.stderr
        return " ".join(result.stdout.split())  # rich wraps long lines

    text = status("oom")
    assert "was killed for using more memory than its limit of 16Gi" in text and "raise `memory:`" in text
    assert "backoff limit" in text
    started = time.monotonic()
    text = status("cudaoom")
    print(f"\n`cw status` of a failed run (CUDA OOM, logs read): {time.monotonic() - started:.2f} s")
    assert "ran out of GPU memory" in text and "per_device_train_batch_size" in text and "gradient_checkpointing" in text
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.81 GiB" in text
    text = status("hf401")
    assert "Hugging Face Hub answered 401 for meta-llama/Llama-3.1-8B" in text and "secrets: {HF_TOKEN: hf-token}" in text
    assert "Repository Not Found for url" in text
    text = status("nccl")
    assert "NCCL collective timed out (ALLREDUCE ran 600.083 s)" in text and "Watchdog caught collective operation timeout" in text
    text = status("pull")
    assert "registry.example.com/team/trainer:no-such-tag" in text and "tag no-such-tag" in text
    assert 'Back-off pulling image "registry.example.com/team/trainer:no-such-tag"' in text and "imagePullSecrets" in text
    text = status("evicted")
    assert "was evicted: the node (its kubelet) stopped it: The node was low on resource: memory" in text
    assert "replaces a disrupted trainer pod by itself" in text and "failed:" not in text

    detail = json.loads(run_cw(cw_env, "status", "cudaoom", "-n", namespace, "-o", "json").stdout)
    assert detail["failure"] == "CUDA OOM" and detail["state"] == "Failed"
    assert [e["kind"] for e in detail["explanations"]] == ["cuda-oom", "backoff-limit"]
    assert detail["explanations"][0]["container"] == "trainer" and detail["explanations"][0]["log"]


def test_a_crash_looping_server_and_a_trainer_waiting_for_its_servers(kube_api, namespace, cw_env, tmp_path, wait_for):
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    crash = {**GRPO_CONFIG, "annotations": {"kwok.cw/waiting-reason": "CrashLoopBackOff"}}
    waiting = {**GRPO_CONFIG, "annotations": {"kwok.cw/waiting-reason": "PodInitializing"}}
    # Both launches wait for their servers to be Ready, which they never are: the checks below run
    # meanwhile (as from a second terminal), then the launches are stopped.
    procs = [
        _launch(cw_env, tmp_path, namespace, "crashing", crash, "trl", "rlhf", "--services", "--ttl", "1h"),
        _launch(cw_env, tmp_path, namespace, "waiting", waiting, "trl", "grpo"),
    ]
    try:
        _check_crash_loop_and_init_wait(core, custom, namespace, cw_env, tmp_path, wait_for)
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate(timeout=60)


def _check_crash_loop_and_init_wait(core, custom, namespace, cw_env, tmp_path, wait_for) -> None:
    server = wait_for(lambda: next(iter(_pods(core, namespace, "crashing", "server")), None), 60, what="the server pod")
    # The current container has just restarted; the crash is in the previous one's log.
    _give_log(custom, tmp_path, namespace, server.metadata.name, "server", "INFO starting again", previous=SERVER_CRASH)
    wait_for(lambda: any((s.state.waiting and s.state.waiting.reason == "CrashLoopBackOff")
                         for s in core.read_namespaced_pod(server.metadata.name, namespace).status.container_statuses or []),
             60, what="CrashLoopBackOff")  # fmt: skip
    trainer = wait_for(lambda: next((p for p in _pods(core, namespace, "waiting")
                                     if any(s.state.running for s in p.status.init_container_statuses or [])), None),
                       60, what="the trainer's init containers to run")  # fmt: skip
    _give_log(custom, tmp_path, namespace, trainer.metadata.name, "wait-server",
              "waiting for http://waiting-server:8000/health: <urlopen error [Errno 111] Connection refused>")

    result = run_cw(cw_env, "status", "crashing", "-n", namespace)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "server keeps crashing: restarted 5 times, last exit code 1" in text
    assert "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens" in text
    assert "INFO starting again" not in text  # the previous run's log, not the fresh container's

    result = run_cw(cw_env, "status", "waiting", "-n", namespace)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "init container wait-server has waited for" in text and "for its server service to answer" in text
    assert "init container wait-reward has waited for" in text
    assert "waiting for http://waiting-server:8000/health: <urlopen error [Errno 111] Connection refused>" in text
    listed = {i["name"]: i for i in json.loads(run_cw(cw_env, "list", "-n", namespace, "-o", "json").stdout)["items"]}
    assert listed["crashing"]["failure"] in ("crash loop (server)", "crash loop (reward)") and listed["crashing"]["state"] == "Services only"
    assert listed["waiting"]["failure"] in ("waiting for server", "waiting for reward")


def test_json_of_a_live_run_all_namespaces_filters_and_run_name_completion(kube_api, namespace, cw_env, tmp_path, wait_for):
    data = {**SFT_CONFIG, "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}}
    _launched({"live": _launch(cw_env, tmp_path, namespace, "live", data, "trl", "sft", "--gpu", "2")})
    batch = client.BatchV1Api(kube_api)
    wait_for(lambda: batch.read_namespaced_job("live-trainer", namespace).status.ready, 60, what="the trainer to run")

    status = json.loads(run_cw(cw_env, "status", "live", "-n", namespace, "-o", "json").stdout)
    assert (status["kind"], status["name"], status["namespace"], status["state"], status["gpus"]) == ("Run", "live", namespace, "Running", 2)
    assert status["failure"] is None and status["explanations"] == [] and status["pods"][0]["ready"] is True
    assert yaml.safe_load(run_cw(cw_env, "status", "live", "-n", namespace, "-o", "yaml").stdout)["name"] == "live"

    # -A from the kubeconfig's own namespace (default) still finds the run, and says where it is.
    everywhere = json.loads(run_cw(cw_env, "list", "-A", "-o", "json").stdout)["items"]
    assert {"name": "live", "namespace": namespace} in [{"name": i["name"], "namespace": i["namespace"]} for i in everywhere]
    table = run_cw(cw_env, "list", "-A", "--state", "running")
    assert table.stdout.split()[0] == "NAMESPACE" and any(line.split()[:2] == [namespace, "live"] for line in table.stdout.splitlines())
    assert json.loads(run_cw(cw_env, "list", "-n", namespace, "--framework", "axolotl", "-o", "json").stdout)["items"] == []
    assert [i["name"] for i in json.loads(run_cw(cw_env, "list", "-n", namespace, "--framework", "trl", "-o", "json").stdout)["items"]] == ["live"]

    # Shell completion of RUN (click's bash protocol, as `eval "$(cw completion bash)"` sets it up).
    script = "import sys; sys.argv[0] = 'cw'; from cw_cli.cli.app import main; main()"
    env = {**cw_env, "_CW_COMPLETE": "bash_complete", "COMP_WORDS": f"cw status -n {namespace} li", "COMP_CWORD": "4"}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 0 and result.stdout.split() == ["plain,live"] and result.stderr == "", result
    print(f"\ncompletion of a run name: {elapsed:.2f} s")


def test_a_trainer_preempted_by_the_scheduler_is_explained(kube_api, namespace, cw_env, tmp_path, wait_for):
    """A low-priority 1-GPU run; a high-priority run pinned to its node asks for all 8 GPUs there,
    so the real scheduler must preempt every lower-priority pod on that node, the low run's
    included (condition DisruptionTarget, reason PreemptionByScheduler). One GPU and the pinning
    keep the test independent of what other tests' pods still hold on the shared cluster."""
    scheduling = client.SchedulingV1Api(kube_api)
    low, high = f"{namespace}-low", f"{namespace}-high"
    for name, value in ((low, 100), (high, 1000)):
        scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))
    try:
        waiting = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "300s"}}
        core = client.CoreV1Api(kube_api)

        def running_node(run: str) -> str | None:
            pods = core.list_namespaced_pod(namespace, label_selector=f"cw-cli.dev/run={run}").items
            return next((p.spec.node_name for p in pods if p.status.phase == "Running"), None)

        data = {**SFT_CONFIG, **waiting, "priority_class": low}
        result = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, data, "low.yaml")), "--gpu", "1",
                        "--name", "low-a", "-n", namespace)  # fmt: skip
        assert result.returncode == 0, result.stderr
        node = wait_for(lambda: running_node("low-a"), 180, what="low-a to run")
        data = {**SFT_CONFIG, **waiting, "priority_class": high, "node_selector": {"kubernetes.io/hostname": node}}
        result = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, data, "high.yaml")), "--gpu", "8",
                        "--name", "high", "-n", namespace)  # fmt: skip
        assert result.returncode == 0, result.stderr

        def preempted():
            status = run_cw(cw_env, "status", "low-a", "-n", namespace)
            return status if "preempted" in status.stdout else None

        status = wait_for(preempted, 90, interval=2, what="low-a to be preempted and explained")
        assert "higher-priority pod" in status.stdout and "fix:" in status.stdout, status.stdout
    finally:
        for name in (low, high):
            scheduling.delete_priority_class(name)


def _status_with_event_reads(kube_cluster, namespace: str, run: str):
    """`run_status` of ``run``, and the field selectors of the events it listed (each a scan of
    the namespace's events in etcd: the API server keeps no cache of events)."""
    from cw_cli.client.connection import ClusterTarget, connect
    from cw_cli.k8s.status import run_status

    kube = connect(ClusterTarget(context=kube_cluster.context, namespace=namespace, kubeconfig=str(kube_cluster.kubeconfig)))
    real_list, reads = kube.list, []

    def spying_list(kind, *args, **kwargs):
        if kind == "Event":
            reads.append(kwargs.get("field_selector"))
        return real_list(kind, *args, **kwargs)

    kube.list = spying_list
    try:
        return run_status(kube, run), reads
    finally:
        kube.close()


def test_a_pod_the_scheduler_refuses_is_explained_from_its_condition_without_a_scan_of_events(
    kube_api, kube_cluster, namespace, cw_env, tmp_path, wait_for
):
    """The scheduler writes why on the pod's PodScheduled condition: status reads that, not the
    namespace's FailedScheduling events; and no FailedCreate events for a Job whose pod exists."""
    data = {**SFT_CONFIG, "node_selector": {"cw-test/no-such-node": "x"}}
    result = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, data)), "--gpu", "1", "--name", "nowhere",
                    "-n", namespace)  # fmt: skip
    assert result.returncode == 0, result.stderr
    core = client.CoreV1Api(kube_api)

    def refused_message():
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=nowhere-trainer").items
        conditions = pods[0].status.conditions or [] if pods else []
        return next((c.message for c in conditions if c.type == "PodScheduled" and c.status == "False" and c.message), None)

    message = wait_for(refused_message, 30, what="the scheduler to refuse the pod")
    view, reads = _status_with_event_reads(kube_cluster, namespace, "nowhere")
    assert "node affinity/selector" in message
    assert [pod.reason for pod in view.pods] == [f"cannot be scheduled: {message}"]
    assert reads == ["reason=Preempted"]  # the one read a Pending run still needs: a preempted pod is gone


def test_a_finished_run_reads_no_events(kube_cluster, namespace, cw_env, tmp_path):
    result = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, SFT_CONFIG)), "--gpu", "1", "--name", "done",
                    "-n", namespace, "--wait")  # fmt: skip
    assert result.returncode == 0, result.stderr
    view, reads = _status_with_event_reads(kube_cluster, namespace, "done")
    assert view.state == "Succeeded" and reads == []


def test_status_reads_the_runs_config_map_and_network_policy_by_name_not_by_scanning(
    kube_api, kube_cluster, namespace, cw_env, tmp_path
):
    """One ConfigMap and one NetworkPolicy per run: a label-selected list of them scans every run's;
    status reads them by name, and keeps only what carries the run's labels."""
    from cw_cli.client.connection import ClusterTarget, connect
    from cw_cli.k8s.status import run_status

    for run in ("named", "other"):
        result = run_cw(cw_env, "trl", "sft", str(write_config(tmp_path, SFT_CONFIG)), "--gpu", "1", "--name", run,
                        "-n", namespace)  # fmt: skip
        assert result.returncode == 0, result.stderr
    kube = connect(ClusterTarget(context=kube_cluster.context, namespace=namespace, kubeconfig=str(kube_cluster.kubeconfig)))
    listed: list[str] = []
    for method in ("list", "list_metadata"):
        real = getattr(kube, method)
        setattr(kube, method, lambda kind, *a, _real=real, **k: listed.append(kind) or _real(kind, *a, **k))
    try:
        view = run_status(kube, "named")
        assert {"Job/named-trainer", "ConfigMap/named-config", "NetworkPolicy/named-network"} <= set(view.objects)
        assert not {"ConfigMap", "NetworkPolicy"} & set(listed), listed
        # An object of that name without cw's labels is not the run's: deleted and replaced by a stranger's.
        core = client.CoreV1Api(kube_api)
        core.delete_namespaced_config_map("named-config", namespace)
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="named-config")))
        assert "ConfigMap/named-config" not in run_status(kube, "named").objects
        assert "ConfigMap/other-config" in run_status(kube, "other").objects
    finally:
        kube.close()
