"""cw_cli.diagnosis.diagnose: why a run died, from pod/Job/JobSet status as the API server returns it
and real log tails (texts taken from torch, huggingface_hub, transformers and Kubernetes)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest

from cw_cli.diagnosis.diagnose import diagnose, explain_log, explain_owner, explain_pod, log_requests, summary
from cw_cli.frameworks.trl import TRL_WORDS

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)

# torch 2.x, c10/cuda/CUDACachingAllocator.cpp (the strings are in libc10_cuda.so)
CUDA_OOM_LOG = """\
{'loss': 1.9231, 'grad_norm': 3.1, 'learning_rate': 2e-05, 'epoch': 0.01}
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 125, in forward
    return F.linear(input, self.weight, self.bias)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.81 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated memory 74.32 GiB is allocated by PyTorch, and 2.91 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)
[rank0]:[W301 12:00:01.000000000 ProcessGroupNCCL.cpp:1496] Warning: WARNING: destroy_process_group() was not called before program exit
""".splitlines()

# huggingface_hub utils/_http.py (RepoNotFound branch, a 401 without a token), then transformers' OSError
HF_401_LOG = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/huggingface_hub/utils/_http.py", line 409, in hf_raise_for_status
    response.raise_for_status()
huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-67c2f0aa-3b1e0c5d2e6f7a8b9c0d1e2f;0b1c2d3e)

Repository Not Found for url: https://huggingface.co/api/models/meta-llama/Llama-3.1-8B/revision/main.
Please make sure you specified the correct `repo_id` and `repo_type`.
If you are trying to access a private or gated repo, make sure you are authenticated and your token has the required permissions.
For more details, see https://huggingface.co/docs/huggingface_hub/authentication
""".splitlines()

HF_GATED_LOG = """\
huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-67c2f0aa-0a1b2c3d4e5f)

Cannot access gated repo for url https://huggingface.co/api/models/meta-llama/Llama-3.1-8B/revision/main.
Access to model meta-llama/Llama-3.1-8B is restricted and you are not in the authorized list. Visit https://huggingface.co/meta-llama/Llama-3.1-8B to ask for access.

The above exception was the direct cause of the following exception:

OSError: You are trying to access a gated repo.
Make sure to have access to it at https://huggingface.co/meta-llama/Llama-3.1-8B.
""".splitlines()

HF_404_LOG = """\
huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-67c2f0aa-77)

Repository Not Found for url: https://huggingface.co/api/models/Qwen/Qwen9-0.5B/revision/main.
Please make sure you specified the correct `repo_id` and `repo_type`.
""".splitlines()

# ProcessGroupNCCL's watchdog (the strings are in libtorch_cuda.so)
NCCL_LOG = """\
{'loss': 1.2, 'epoch': 0.4}
[rank1]:[E301 11:59:31.123456789 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2117, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800083 milliseconds before timing out.
[rank1]:[E301 11:59:31.223456789 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 1] failure detected by watchdog at work sequence id: 2117 PG status: last enqueued work: 2117, last completed work: 2116
[rank1]:[E301 11:59:31.323456789 ProcessGroupNCCL.cpp:681] [Rank 1] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[rank1]:[E301 11:59:31.423456789 ProcessGroupNCCL.cpp:695] [Rank 1] To avoid data inconsistency, we are taking the entire process down.
terminate called after throwing an instance of 'c10::DistBackendError'
""".splitlines()

# An NCCL set-up log (TORCH_DISTRIBUTED_DEBUG / NCCL_DEBUG=INFO) mentions timeouts without one happening.
NCCL_INFO_LOG = """\
[rank0]:[I301 11:00:00.1 ProcessGroupNCCL.cpp:950] [PG ID 0 PG GUID 0 Rank 0] ProcessGroupNCCL initialization options: size: 2, global rank: 0, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0
ValueError: dataset_text_field 'text' not found in the dataset columns ['messages']
""".splitlines()


def _pod(name="r-trainer-0-abcde", role="trainer", phase="Failed", containers=None, init=None, conditions=None, **status):
    pod = {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "creationTimestamp": "2026-03-01T11:00:00Z",
            "labels": {"app.kubernetes.io/component": role, "cw-cli.dev/run": "r"},
        },
        "spec": {
            "containers": [{"name": role, "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": {"limits": {"memory": "64Gi", "nvidia.com/gpu": "8"}}}],
            "initContainers": [{"name": "wait-server", "image": "python:3.12-slim", "resources": {"limits": {"memory": "128Mi"}}}],
        },
        "status": {"phase": phase, "conditions": conditions or [], "containerStatuses": containers or [], "initContainerStatuses": init or [], **status},
    }
    return pod


def _terminated(name="trainer", code=1, reason="Error", restarts=0):
    return {"name": name, "image": "nvcr.io/nvidia/pytorch:25.01-py3", "ready": False, "restartCount": restarts,
            "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": "2026-03-01T11:00:05Z", "finishedAt": "2026-03-01T11:30:00Z"}}}  # fmt: skip


def _waiting(name, reason, message="", last=None, restarts=0):
    status = {"name": name, "image": "vllm/vllm-openai:v0.9.9", "ready": False, "restartCount": restarts,
              "state": {"waiting": {"reason": reason, "message": message}}}  # fmt: skip
    if last:
        status["lastState"] = {"terminated": last}
    return status


def _job(reason, message, failed=1, backoff=2, deadline=None):
    job = {"metadata": {"name": "r-trainer"}, "spec": {"backoffLimit": backoff},
           "status": {"failed": failed, "conditions": [
               {"type": "FailureTarget", "status": "True", "reason": reason, "message": message},
               {"type": "Failed", "status": "True", "reason": reason, "message": message}]}}  # fmt: skip
    if deadline:
        job["spec"]["activeDeadlineSeconds"] = deadline
    return job


# --- logs -----------------------------------------------------------------------------------


def test_cuda_oom_in_the_log_names_the_allocation_and_suggests_a_smaller_batch():
    found = explain_log(CUDA_OOM_LOG, "p", "trainer", words=TRL_WORDS)
    assert found is not None and found.kind == "cuda-oom" and found.summary == "CUDA OOM"
    assert "3.81 GiB" in found.message
    assert "per_device_train_batch_size" in found.fix and "gradient_checkpointing" in found.fix and "more GPUs" in found.fix
    assert any("torch.OutOfMemoryError: CUDA out of memory" in line for line in found.log)
    assert len(found.log) <= 5 and all(len(line) <= 300 for line in found.log)


@pytest.mark.parametrize(
    "log, summary_, repo",
    [(HF_401_LOG, "HF token 401", "meta-llama/Llama-3.1-8B"), (HF_GATED_LOG, "HF gated repo", "meta-llama/Llama-3.1-8B"),
     (HF_404_LOG, "HF repo not found", "Qwen/Qwen9-0.5B")],  # fmt: skip
)
def test_hugging_face_refusals_suggest_the_token_secret(log, summary_, repo):
    found = explain_log(log, "p", "trainer")
    assert found is not None and found.kind == "hf-auth"
    assert found.summary == summary_
    assert repo in found.message
    assert "secrets: {HF_TOKEN:" in found.fix
    assert found.log


def test_nccl_watchdog_timeout_names_the_collective():
    found = explain_log(NCCL_LOG, "p", "trainer")
    assert found is not None and found.kind == "nccl-timeout" and found.summary == "NCCL timeout"
    assert "ALLREDUCE" in found.message and "1800.08 s" in found.message
    assert any("Watchdog caught collective operation timeout" in line for line in found.log)


def test_ordinary_errors_and_nccl_set_up_lines_are_not_mistaken_for_a_known_cause():
    assert explain_log(NCCL_INFO_LOG) is None
    assert explain_log(["Traceback (most recent call last):", "KeyError: 'prompt'"]) is None
    assert explain_log(["requests.exceptions.HTTPError: 403 Forbidden: rate limited for url https://api.wandb.ai/x"]) is None


# --- pods -----------------------------------------------------------------------------------


def test_oom_killed_names_the_memory_limit_and_the_field():
    pod = _pod(containers=[_terminated(code=137, reason="OOMKilled")])
    (found,) = explain_pod(pod, now=NOW)
    assert found.kind == "oom-killed" and found.summary == "OOMKilled (trainer)"
    assert "64Gi" in found.message and "`memory:`" in found.fix
    assert log_requests(pod) == []  # the kubelet's reason says it all: no log to read


def test_a_server_oom_points_at_its_own_memory_field():
    pod = _pod(name="r-server-1", role="server", phase="Running",
               containers=[_waiting("server", "CrashLoopBackOff", last={"exitCode": 137, "reason": "OOMKilled"}, restarts=3)])  # fmt: skip
    pod["spec"]["containers"][0]["name"] = "server"
    found = explain_pod(pod, now=NOW)
    assert found[0].kind == "oom-killed" and "`services.server.memory`" in found[0].fix


def test_a_failed_container_is_explained_by_its_log():
    pod = _pod(containers=[_terminated(code=1)])
    assert log_requests(pod) == [("trainer", False)]
    (found,) = explain_pod(pod, {"trainer": CUDA_OOM_LOG}, NOW)
    assert found.kind == "cuda-oom" and found.pod == "r-trainer-0-abcde" and found.container == "trainer"
    # Without a known cause in the log: the exit code and the last lines.
    (plain,) = explain_pod(pod, {"trainer": ["step 3", "ValueError: bad column"]}, NOW)
    assert plain.kind == "exit-code" and plain.summary == "exit 1 (trainer)" and plain.log == ["step 3", "ValueError: bad column"]


@pytest.mark.parametrize(
    "reason, message",
    [("ImagePullBackOff", 'Back-off pulling image "nvcr.io/nvidia/pytorch:99.99-py3"'),
     ("ErrImagePull", 'rpc error: code = NotFound desc = failed to pull and unpack image "nvcr.io/nvidia/pytorch:99.99-py3": not found')],  # fmt: skip
)
def test_image_pull_names_image_tag_and_pull_secret(reason, message):
    pod = _pod(phase="Pending", containers=[_waiting("trainer", reason, message)])
    pod["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/pytorch:99.99-py3"
    (found,) = explain_pod(pod, now=NOW)
    assert found.kind == "image-pull" and found.summary == "image pull"
    assert "nvcr.io/nvidia/pytorch" in found.message and "tag 99.99-py3" in found.message and reason in found.message
    assert "imagePullSecrets" in found.fix and "--image" in found.fix


def test_crash_loop_of_a_server_reads_the_previous_log():
    crash = _waiting("server", "CrashLoopBackOff", "back-off 2m40s restarting failed container=server pod=r-server-1_ml(uid)",
                     last={"exitCode": 1, "reason": "Error"}, restarts=5)  # fmt: skip
    pod = _pod(name="r-server-1", role="server", phase="Running", containers=[crash])
    assert log_requests(pod) == [("server", True)]
    log = ["INFO loading model", "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache"]
    (found,) = explain_pod(pod, {"server": log}, NOW)
    assert found.kind == "crash-loop" and found.summary == "crash loop (server)"
    assert "restarted 5 times" in found.message and "exit code 1" in found.message
    assert found.log[-1].startswith("ValueError: The model's max seq len")
    # A crash loop whose log shows a known cause says so.
    (gated,) = explain_pod(pod, {"server": HF_GATED_LOG}, NOW)
    assert gated.kind == "crash-loop" and "HF gated repo" in gated.message and "HF_TOKEN" in gated.fix


def test_init_container_waiting_for_a_server_says_which_and_how_long():
    init = [{"name": "wait-server", "ready": False, "restartCount": 0,
             "state": {"running": {"startedAt": (NOW - timedelta(minutes=7, seconds=5)).isoformat()}}}]  # fmt: skip
    pod = _pod(phase="Pending", init=init, containers=[_waiting("trainer", "PodInitializing")])
    assert log_requests(pod) == [("wait-server", False)]
    log = ["waiting for http://r-server:8000/health: <urlopen error [Errno 111] Connection refused>"]
    (found,) = explain_pod(pod, {"wait-server": log}, NOW)
    assert found.kind == "init-waiting" and found.summary == "waiting for server"
    assert "wait-server" in found.message and "7m 5s" in found.message
    assert found.log == log and "--role server" in found.fix


def test_evicted_by_the_kubelet():
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                   "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 64Mi. "}]  # fmt: skip
    pod = _pod(conditions=conditions, containers=[_terminated(code=137)], reason="Evicted",
               message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 64Mi. Container trainer was using 70Gi, request is 64Gi, has larger consumption of memory. ")  # fmt: skip
    found = diagnose([], [pod], {}, NOW)
    assert found[0].kind == "evicted" and found[0].summary == "evicted"
    assert "low on resource: memory" in found[0].message and "`memory:`" in found[0].fix


def test_preempted_by_the_scheduler():
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                   "message": "default-scheduler: preempting to accommodate a higher priority pod"}]  # fmt: skip
    found = explain_pod(_pod(conditions=conditions, containers=[_terminated(code=143)]), now=NOW)
    assert found[0].kind == "preempted" and "higher priority" in found[0].message and "queue:" in found[0].fix


def test_a_healthy_pod_has_no_explanation():
    running = {"name": "trainer", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-03-01T11:00:05Z"}}}
    init = [{"name": "wait-server", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]
    pod = _pod(phase="Running", containers=[running], init=init)
    assert explain_pod(pod, now=NOW) == [] and log_requests(pod) == []


# --- Jobs, JobSets and the whole run ------------------------------------------------------------


def test_job_conditions():
    (backoff,) = explain_owner("Job", _job("BackoffLimitExceeded", "Job has reached the specified backoff limit", failed=3))
    assert backoff.kind == "backoff-limit" and backoff.summary == "backoff limit" and "3 time(s)" in backoff.message and "(2 retries)" in backoff.message
    (deadline,) = explain_owner("Job", _job("DeadlineExceeded", "Job was active longer than specified deadline", deadline=86400))
    assert deadline.kind == "deadline" and "24h 0m" in deadline.message
    message = "Container trainer for pod ml/r-trainer-1-x failed with exit code 7 matching FailJob rule at index 0"
    (rank,) = explain_owner("Job", _job("PodFailurePolicy", message))
    assert rank.kind == "rank-failed" and rank.summary == "rank failed (exit 7)"
    running = {"metadata": {"name": "r-trainer"}, "status": {"active": 1}}
    assert explain_owner("Job", running) == []


def test_a_multi_node_job_past_its_per_node_limit_says_which_node():
    job = _job("MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes", failed=4)
    job["spec"] = {"backoffLimitPerIndex": 1, "maxFailedIndexes": 0}
    job["status"]["failedIndexes"] = "1"
    (limit,) = explain_owner("Job", job)
    assert limit.kind == "backoff-limit" and "node(s) 1" in limit.message and "(1 retries per node)" in limit.message


def test_jobset_that_reached_its_restarts():
    jobset = {"metadata": {"name": "r"}, "spec": {"failurePolicy": {"maxRestarts": 3}},
              "status": {"restarts": 3, "conditions": [{"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts",
                                                         "message": "jobset failed due to reaching max number of restarts"}]}}  # fmt: skip
    (found,) = explain_owner("JobSet", jobset)
    assert found.kind == "max-restarts" and "3 gang restart(s)" in found.message and "max_restarts 3" in found.message


def test_the_root_cause_comes_before_the_backoff_limit_and_retries_are_not_repeated():
    older, newer = _pod(name="r-trainer-a", containers=[_terminated()]), _pod(name="r-trainer-b", containers=[_terminated()])
    newer["metadata"]["creationTimestamp"] = "2026-03-01T11:10:00Z"
    logs = {("r-trainer-a", "trainer"): CUDA_OOM_LOG, ("r-trainer-b", "trainer"): CUDA_OOM_LOG}
    job = _job("BackoffLimitExceeded", "Job has reached the specified backoff limit", failed=2, backoff=1)
    found = diagnose([("Job", job)], [older, newer], logs, NOW)
    assert [e.kind for e in found] == ["cuda-oom", "backoff-limit"]
    assert found[0].pod == "r-trainer-b"  # the newest attempt
    assert summary(found) == "CUDA OOM" and summary([]) is None


def test_inputs_are_not_modified():
    pod = _pod(containers=[_terminated(code=137, reason="OOMKilled")])
    before = copy.deepcopy(pod)
    diagnose([], [pod], {}, NOW)
    assert pod == before


def test_preemption_events_explain_pods_that_are_gone():
    from cw_cli.diagnosis.diagnose import preemption_events

    def event(pod: str, reason: str = "Preempted") -> dict:
        # The scheduler's text (pkg/scheduler/framework/preemption/executor.go, k8s v1.36.3).
        return {"reason": reason, "involvedObject": {"kind": "Pod", "name": pod},
                "message": "Preempted by pod 5c1f3a2e-0000-4000-8000-000000000000 on node cw-gpu-0"}  # fmt: skip

    events = [event("r1-trainer-0-abcde"), event("r10-trainer-0-xyz12"), event("r1-trainer-0-fghij"),
              event("r1-trainer-0-klmno", reason="Scheduled"), event("r1-0-trainer-0-pqrst")]  # fmt: skip
    found = preemption_events(events, "r1", known_pods={"r1-trainer-0-fghij"})
    assert [(e.kind, e.pod) for e in found] == [("preempted", "r1-trainer-0-abcde")]
    assert "on node cw-gpu-0" in found[0].message and "queue" in found[0].fix
