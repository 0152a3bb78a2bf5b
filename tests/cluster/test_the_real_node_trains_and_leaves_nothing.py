"""The test cluster's real node (kubelet, containerd, runc): the README's example trains a LoRA
adapter in a real pod; what it wrote is read back through a reader pod and `cw download`; each
checkpoint and the final model are scored by evaluation pods whose scores reach `cw artifacts`;
`cw export --merge`, `cw try` (transformers' server on CPU, through a real port-forward), `cw eval`
and a DPO run from `run:NAME` work on it as a newcomer types them; a pipeline (SFT, DPO from it, the
DPO model's evaluation) runs its keeper in a real pod, as a user holding only the shipped Roles; a `--nodes 2` run's pods, on two
real nodes, rendezvous over gloo and train one model, through the Job and the JobSet; pods reach the API server
through the `kubernetes` Service and each other by name through the cluster's DNS, and nothing
outside the machine; `cw cluster down` leaves no process, mount, network namespace or route behind.

One run is trained for the whole module (about a minute of CPU); every test reads it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = "readme-sft"
#: A chain on the host that counts packets for the pods' and Services' ranges leaving through any
#: interface but the real node's links (cwr*): it must count none.
LEAK_CHAIN = "CW-TEST-LEAKS"


def _cw(real_cluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cw_cli", *args], env=real_cluster.env(), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def leak_counter():
    """Counts, on the host, packets to the fake pods', the real pods' and the Services' ranges that
    leave through an interface other than the real node's links."""
    from cw_cli.testcluster import argv
    from cw_cli.testcluster.realnode import network

    _iptables("-N", LEAK_CHAIN)
    for chain in ("OUTPUT", "FORWARD"):
        _iptables("-I", chain, "1", "-j", LEAK_CHAIN)
    ranges = (argv.POD_CIDR, str(network.REAL_POD_NET), argv.SERVICE_CIDR)
    for net in ranges:
        _iptables("-A", LEAK_CHAIN, "-d", net, "!", "-o", "cwr+", "-j", "RETURN")

    def count() -> dict[str, int]:
        listed = _iptables("-L", LEAK_CHAIN, "-v", "-x", "-n").stdout.splitlines()[2:]  # after two header lines
        return {line.split()[-1]: int(line.split()[0]) for line in listed}  # destination: packets

    yield count
    for chain in ("OUTPUT", "FORWARD"):
        _iptables("-D", chain, "-j", LEAK_CHAIN)
    _iptables("-F", LEAK_CHAIN)
    _iptables("-X", LEAK_CHAIN)


@pytest.fixture(scope="module")
def trained(real_cluster, leak_counter) -> subprocess.CompletedProcess[str]:
    """The README's first command, as a newcomer types it (but with a fixed run name)."""
    return _cw(real_cluster, "trl", "sft", "configs/test-cluster-sft.yaml", "--gpu", "4", "--wait", "--name", RUN,
               timeout=900)  # fmt: skip


def test_the_readme_example_trains_in_a_real_pod(real_cluster, trained):
    said = trained.stdout + trained.stderr
    assert trained.returncode == 0, said
    assert f"run {RUN} succeeded" in said and "simulated" not in said, said
    logs = _cw(real_cluster, "logs", RUN)
    for _ in range(30):  # a log read the moment the pod ended may lack its last lines: wait for them
        if logs.returncode != 0 or "Training completed" in logs.stdout:
            break
        time.sleep(1)
        logs = _cw(real_cluster, "logs", RUN)
    assert logs.returncode == 0, logs.stderr
    losses = [float(x) for x in re.findall(r"'loss': '([0-9.]+)'", logs.stdout)]
    assert len(losses) >= 4, logs.stdout[-3000:]  # logging_steps 5 of 40 steps
    assert "Training completed" in logs.stdout, logs.stdout[-3000:]
    status = _cw(real_cluster, "status", RUN)
    assert re.search(r"cw-real-\d", status.stdout), status.stdout


def test_a_reader_pod_lists_and_downloads_what_the_trainer_wrote(real_cluster, trained, tmp_path):
    assert trained.returncode == 0
    listed = _cw(real_cluster, "artifacts", RUN, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    paths = json.dumps(json.loads(listed.stdout))
    assert "checkpoint-20" in paths and "checkpoint-40" in paths, paths
    dest = tmp_path / "model"
    fetched = _cw(real_cluster, "download", RUN, str(dest))
    assert fetched.returncode == 0, fetched.stderr
    assert (dest / "adapter_model.safetensors").stat().st_size > 10_000  # the LoRA adapter the reader could read
    assert json.loads((dest / "adapter_config.json").read_text())["r"] == 8


def _scored(real_cluster) -> dict[str, float]:
    """Each model of the run -> its score, as `cw artifacts -o json` shows them."""
    listed = _cw(real_cluster, "artifacts", RUN, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    found = {}
    for item in json.loads(listed.stdout)["artifacts"]:
        scores = (item.get("scores") or {}).get("scores") or {}
        if "cw_test_cluster_mc/acc" in scores:
            found[item["kind"] if item["kind"] == "final" else f"checkpoint-{item['step']}"] = scores["cw_test_cluster_mc/acc"]
    return found


def test_evaluation_pods_score_each_checkpoint_and_the_final_model(real_cluster, trained):
    assert trained.returncode == 0
    deadline, scored = time.monotonic() + 420, {}
    while time.monotonic() < deadline and len(scored) < 3:
        time.sleep(5)
        scored = _scored(real_cluster)
    assert set(scored) == {"checkpoint-20", "checkpoint-40", "final"}, scored
    assert all(0.0 <= score <= 1.0 for score in scored.values()), scored
    again = _cw(real_cluster, "eval", RUN)  # what a newcomer types next: the final model is scored already
    assert again.returncode != 0 and "is scored already" in again.stderr, again.stderr
    base = _cw(real_cluster, "eval", RUN, "--checkpoint", "base", "--wait", timeout=600)
    assert base.returncode == 0, base.stdout + base.stderr
    listed = json.loads(_cw(real_cluster, "artifacts", RUN, "-o", "json").stdout)
    assert "cw_test_cluster_mc/acc" in (listed["base_scores"] or {}).get("scores", {}), listed["base_scores"]


def test_export_merge_try_and_a_dpo_run_from_the_run(real_cluster, trained):
    assert trained.returncode == 0
    exported = _cw(real_cluster, "export", RUN, "--merge", "--wait", timeout=600)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    asked = _cw(real_cluster, "try", RUN, "what is the sun", "--max-tokens", "8", timeout=600)
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert asked.stdout.strip(), asked.stderr  # the tiny model's words, through a real port-forward
    dpo = _cw(real_cluster, "trl", "dpo", "configs/test-cluster-dpo.yaml", "--set", f"model_name_or_path=run:{RUN}",
              "--wait", "--name", f"{RUN}-dpo", timeout=900)  # fmt: skip
    said = dpo.stdout + dpo.stderr
    assert dpo.returncode == 0 and f"run {RUN}-dpo succeeded" in said, said
    assert f"/checkpoints/{RUN}/exported/final-merged" in said, said  # the adapter's merged export
    logs = _cw(real_cluster, "logs", f"{RUN}-dpo").stdout
    assert "'loss'" in logs, logs[-3000:]


@pytest.fixture
def newcomer(real_cluster, tmp_path):
    """`cw` as a user of namespace default bound to the three shipped Roles (docs/rbac-*.yaml), no more."""
    from documented_users import DocumentedUsers
    from kubernetes import config as kconfig

    api = kconfig.new_client_from_config(config_file=str(real_cluster.kubeconfig))
    users = DocumentedUsers(api, real_cluster.kubeconfig, "default", tmp_path)
    yield users.make("read-only", "launch", "after-training")
    users.close()
    api.close()


def test_a_pipeline_trains_sft_then_dpo_from_it_and_scores_the_dpo_model(real_cluster, newcomer):
    """`cw pipeline configs/test-cluster-pipeline.yaml`, by a user holding only the shipped Roles: the
    SFT stage starts at once; the keeper, a Job of cw's helper image on a real node (namespace
    default's pods run there), creates the DPO run from the SFT model once SFT succeeded, then the
    DPO model's evaluation, whose score reaches `cw artifacts`."""

    def cw(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cw_cli", *args], env=newcomer, cwd=REPO, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip

    launched = cw("pipeline", "configs/test-cluster-pipeline.yaml")
    assert launched.returncode == 0, launched.stdout + launched.stderr
    kube = _admin(real_cluster)
    try:
        def states() -> dict[str, str]:
            found = kube.request("GET", "/api/v1/namespaces/default/configmaps/tc-pipeline", what="keeper's ConfigMap")
            return json.loads((found["metadata"].get("annotations") or {}).get("cw-cli.dev/pipeline-stages", "{}"))

        deadline, seen = time.monotonic() + 1200, {}
        while time.monotonic() < deadline and not (seen and all(s in ("Succeeded", "Failed", "Skipped") for s in seen.values())):
            time.sleep(10)
            seen = states()
        assert seen == {"sft": "Succeeded", "dpo": "Succeeded", "eval": "Succeeded"}, seen
        keepers = kube.request("GET", "/api/v1/namespaces/default/pods",
                               query={"labelSelector": "batch.kubernetes.io/job-name=tc-pipeline"}, what="pods")["items"]  # fmt: skip
        assert keepers and all(pod["spec"]["nodeName"].startswith("cw-real-") for pod in keepers), keepers
        assert keepers[0]["spec"]["containers"][0]["image"] == real_cluster.info.runtime_image

        def job(name: str) -> dict:
            return kube.request("GET", f"/apis/batch/v1/namespaces/default/jobs/{name}", what=f"Job {name}")

        def finished(found: dict) -> str:
            return next(c["lastTransitionTime"] for c in found["status"]["conditions"] if c["type"] == "Complete")

        sft, dpo, evaluation = job("tc-sft-trainer"), job("tc-dpo-trainer"), job("tc-dpo-eval-final")
        assert dpo["metadata"]["creationTimestamp"] >= finished(sft)  # RFC 3339 in UTC: text order is time order
        assert evaluation["metadata"]["creationTimestamp"] >= finished(dpo)
    finally:
        kube.close()
    listed = cw("artifacts", "tc-dpo", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    final = next(item for item in json.loads(listed.stdout)["artifacts"] if item["kind"] == "final")
    score = final["scores"]["scores"]["cw_test_cluster_mc/acc"]
    assert 0.0 <= score <= 1.0, final
    listed = cw("list")
    assert "pipeline tc: evaluations: eval succeeded" in listed.stderr, (listed.stdout, listed.stderr)
    assert {"tc/sft", "tc/dpo"} <= set(listed.stdout.split()), listed.stdout
    for run in ("tc-sft", "tc-dpo"):
        cw("delete", run)


def test_a_trainer_over_its_memory_limit_is_oom_killed_by_the_kernel_and_cw_status_says_so(real_cluster, trained):
    """A real cgroup limit, a real OOM kill reported by the kubelet (no stand-in's annotation)."""
    assert trained.returncode == 0
    name = f"{RUN}-oom"
    launched = _cw(real_cluster, "trl", "sft", "configs/test-cluster-sft.yaml", "--gpu", "1", "--name", name,
                   "--set", "memory=160Mi", "--set", "backoff_limit=0", "--set", "eval=null", "--wait", timeout=300)  # fmt: skip
    assert launched.returncode != 0, launched.stdout  # torch alone needs more than 160Mi
    status = _cw(real_cluster, "status", name)
    said = " ".join(status.stdout.split())
    assert "OOMKilled (trainer)" in said and "more memory than its limit of 160Mi" in said, said
    _cw(real_cluster, "delete", name)


def _admin(real_cluster):
    from cw_cli.testcluster import api
    from cw_cli.testcluster.pki import load_pki

    return api.admin_client(real_cluster.info.server, load_pki(real_cluster.state_dir / "pki"))


def test_a_drained_node_stops_the_trainer_with_a_checkpoint_and_the_next_pod_resumes_on_the_other_node(real_cluster, trained):
    """The trainer's /dev/shm is the memory-backed volume cw sized. A warned fault as a cluster delivers it: the node drained as `kubectl drain` does (cordoned,
    the pod evicted through the Eviction API with its grace period), the kubelet's SIGTERM to PID 1,
    a checkpoint at the next step end, exit 143 (not counted), and the Job's next pod resumes from
    that checkpoint on the other real node, from the same volume."""
    from cw_cli.client.channels import exec_in_pod

    assert trained.returncode == 0
    name = f"{RUN}-drained"
    launched = _cw(real_cluster, "trl", "sft", "configs/test-cluster-sft.yaml", "--gpu", "1", "--name", name,
                   "--set", "max_steps=300", "--set", "save_steps=1000", "--set", "logging_steps=1", "--set", "eval=null")  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    kube = _admin(real_cluster)
    drained = ""
    try:
        selector = f"batch.kubernetes.io/job-name={name}-trainer"
        deadline, first, seen = time.monotonic() + 240, None, 0
        while time.monotonic() < deadline and seen < 3:  # training, past its first steps
            pods = kube.request("GET", "/api/v1/namespaces/default/pods", query={"labelSelector": selector}, what="pods")["items"]
            first = pods[0] if pods else None
            if first:
                log = _cw(real_cluster, "logs", name).stdout
                seen = len(re.findall(r"'loss': '", log))
            time.sleep(1)
        assert first and seen >= 3, f"the trainer never logged 3 steps: {seen}"
        drained, pod_name = first["spec"]["nodeName"], first["metadata"]["name"]
        shm = exec_in_pod(kube, pod_name, "trainer", ["df", "-k", "--output=fstype,size", "/dev/shm"], timeout_s=30)
        # The memory-backed emptyDir cw renders, sized as cw says (half the 6Gi limit), not a 64M default.
        assert shm.stdout.decode().split()[-2:] == ["tmpfs", str(3 * 2**20)], shm
        kube.raw("PATCH", f"/api/v1/nodes/{drained}", body={"spec": {"unschedulable": True}},
                 content_type="application/merge-patch+json", what="cordon")  # fmt: skip
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod_name, "namespace": "default"},
                    "deleteOptions": {"gracePeriodSeconds": 60}}  # fmt: skip
        kube.request("POST", f"/api/v1/namespaces/default/pods/{pod_name}/eviction", body=eviction, what="evict")
        deadline, state = time.monotonic() + 420, ""
        while time.monotonic() < deadline and state not in ("Complete", "Failed"):
            job = kube.request("GET", f"/apis/batch/v1/namespaces/default/jobs/{name}-trainer", what="job")
            state = next((c["type"] for c in job["status"].get("conditions", []) if c["status"] == "True"
                          and c["type"] in ("Complete", "Failed")), "")  # fmt: skip
            time.sleep(2)
        pods = kube.request("GET", "/api/v1/namespaces/default/pods", query={"labelSelector": selector}, what="pods")["items"]
    finally:
        if drained:
            kube.raw("PATCH", f"/api/v1/nodes/{drained}", body={"spec": {"unschedulable": False}},
                     content_type="application/merge-patch+json", what="uncordon")  # fmt: skip
        kube.close()
    assert state == "Complete", state  # the warned stop was not counted as a failure
    nodes = {pod["metadata"]["name"]: pod["spec"]["nodeName"] for pod in pods}
    assert set(nodes.values()) - {drained}, nodes  # the next pod ran on the other node
    logs = _cw(real_cluster, "logs", name).stdout + _cw(real_cluster, "logs", name).stderr
    resumed = re.search(r"resuming from checkpoint \S+/checkpoint-(\d+)", logs)
    assert resumed and int(resumed.group(1)) >= seen, logs[-3000:]  # saved where it was: at most the step under way lost
    assert int(resumed.group(1)) % 1000, resumed.group(0)  # the warned checkpoint, not a periodic one
    _cw(real_cluster, "delete", name)


_PROBE = """
import json, os, socket, ssl, time, urllib.request
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
context = ssl.create_default_context(cafile=sa + "/ca.crt")
request = urllib.request.Request(f"https://{host}:{port}/version", headers={"Authorization": "Bearer " + open(sa + "/token").read()})
print("api", host, json.load(urllib.request.urlopen(request, context=context, timeout=10))["gitVersion"], flush=True)
print("dns", socket.gethostbyname("kubernetes.default"), flush=True)  # a Service by name, through the search list
start = time.monotonic()
try:
    socket.getaddrinfo("huggingface.co", 443)
    print("lookup answered", flush=True)
except OSError:
    print("lookup failed after", round(time.monotonic() - start, 2), flush=True)
try:
    socket.create_connection(("10.244.0.9", 80), timeout=3)
    print("fake pod answered", flush=True)
except OSError as e:
    print("fake pod unreachable", type(e).__name__, flush=True)
"""


def _run_pod(real_cluster, name: str, command: list[str], until: tuple[str, ...] = ("Succeeded", "Failed"),
             labels: dict[str, str] | None = None) -> tuple[str, str]:  # fmt: skip
    """Run a pod of the runtime image on a real node (namespace default puts its pods there, with no
    node selector of the pod's own) until one of the phases ``until``; (its phase, its log)."""
    kube = _admin(real_cluster)
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": real_cluster.info.runtime_image, "command": command}]},
    }  # fmt: skip
    try:
        kube.request("POST", "/api/v1/namespaces/default/pods", body=pod, what=f"create pod {name}")
        deadline, phase = time.monotonic() + 120, ""
        while time.monotonic() < deadline and phase not in until:
            phase = kube.request("GET", f"/api/v1/namespaces/default/pods/{name}", what="read").get("status", {}).get("phase", "")
            time.sleep(0.5)
        log = kube.raw("GET", f"/api/v1/namespaces/default/pods/{name}/log", what=f"read {name}'s log").read().decode()
        return phase, log
    finally:
        kube.close()


def test_pods_reach_the_api_server_by_its_service_and_nothing_leaves_the_machine(real_cluster, trained, leak_counter):
    phase, log = _run_pod(real_cluster, "network-probe", ["python3", "-c", _PROBE])
    assert phase == "Succeeded", log
    assert re.search(r"^api 10\.96\.0\.1 v1\.\d+\.\d+$", log, re.M), log  # in-cluster config, through kube-proxy
    assert re.search(r"^dns 10\.96\.0\.1$", log, re.M), log  # CoreDNS, through the kube-dns Service
    failed_after = re.search(r"^lookup failed after ([0-9.]+)$", log, re.M)
    assert failed_after and float(failed_after.group(1)) < 2.0, log  # no forwarding: a hub's name fails at once
    assert "fake pod unreachable" in log, log
    counts = leak_counter()
    assert counts and all(n == 0 for n in counts.values()), counts


_RECEIVER = """
import http.server, sys
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        print("received", self.path, body, flush=True)
        self.send_response(200)
        self.end_headers()
http.server.HTTPServer(("", 8080), Hook).serve_forever()
"""
RECEIVER = "notify-receiver"


@pytest.fixture(scope="module")
def notify_receiver(real_cluster):
    """A webhook receiver running in the cluster (a pod and its Service); its log, read on demand."""
    kube = _admin(real_cluster)
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": RECEIVER, "namespace": "default"},
               "spec": {"selector": {"app": RECEIVER}, "ports": [{"port": 8080}]}}  # fmt: skip
    try:
        kube.request("POST", "/api/v1/namespaces/default/services", body=service, what="the receiver's Service")
    finally:
        kube.close()
    phase, log = _run_pod(real_cluster, RECEIVER, ["python3", "-c", _RECEIVER], until=("Running", "Failed"),
                          labels={"app": RECEIVER})  # fmt: skip
    assert phase == "Running", log

    def received() -> str:
        kube = _admin(real_cluster)
        try:
            return kube.raw("GET", f"/api/v1/namespaces/default/pods/{RECEIVER}/log", what="the receiver's log").read().decode()
        finally:
            kube.close()

    return received


def _run_pods(real_cluster, run: str) -> list[dict]:
    kube = _admin(real_cluster)
    try:
        query = {"labelSelector": f"app.kubernetes.io/instance={run},app.kubernetes.io/component=trainer"}
        return kube.request("GET", "/api/v1/namespaces/default/pods", query=query, what="the run's pods")["items"]
    finally:
        kube.close()


@pytest.mark.parametrize("workload", ["Job", "JobSet"])
def test_a_two_node_run_rendezvous_on_two_real_nodes_and_trains_one_model(real_cluster, notify_receiver, workload):
    """`--nodes 2`: one trainer pod per real node; rank 1 finds rank 0 through the Service cw
    renders (the cluster's DNS), torchrun's store and gloo join them, and the 64 examples are split
    between the two ranks: 8 steps of 2 x 4 make the epoch (one rank alone would take 16). The
    first trainer pod's `notify:` message reaches a receiver running in the cluster, by its name."""
    run = f"two-nodes-{workload.lower()}"
    hook = f"json://{RECEIVER}.default.svc.cluster.local:8080/{run}"
    launched = _cw(real_cluster, "trl", "sft", "configs/test-cluster-sft.yaml", "--gpu", "1", "--nodes", "2",
                   "--name", run, "--set", f"jobset={'true' if workload == 'JobSet' else 'false'}",
                   "--set", "max_steps=-1", "--set", "num_train_epochs=1", "--set", "save_steps=4",
                   "--set", "logging_steps=1", "--set", "eval=null",
                   "--set", f'notify={{"urls": ["{hook}"], "events": ["succeeded"]}}', "--wait", timeout=600)  # fmt: skip
    said = launched.stdout + launched.stderr
    pods = _run_pods(real_cluster, run)
    assert launched.returncode == 0 and f"run {run} succeeded" in said, said
    owners = {ref["kind"] for pod in pods for ref in pod["metadata"].get("ownerReferences", [])}
    assert owners == {"Job"}, owners  # a JobSet's pods are its child Jobs'
    if workload == "JobSet":
        assert all("jobset.sigs.k8s.io/jobset-name" in pod["metadata"]["labels"] for pod in pods), pods
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == ["cw-real-0", "cw-real-1"], [p["spec"] for p in pods]
    listed = _cw(real_cluster, "artifacts", run, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    steps = sorted(item["step"] for item in json.loads(listed.stdout)["artifacts"] if item["kind"] == "checkpoint")
    assert steps == [4, 8], steps  # the epoch split between the two ranks
    logs = _cw(real_cluster, "logs", run).stdout
    assert "'loss'" in logs, logs[-3000:]
    deadline, received = time.monotonic() + 30, ""
    while time.monotonic() < deadline and f"/{run} " not in received:
        received = notify_receiver()
        time.sleep(1)
    sent = [line for line in received.splitlines() if line.startswith(f"received /{run} ")]
    assert len(sent) == 1 and "the command finished (exit code 0)" in sent[0], received  # rank 0 only, once
    _cw(real_cluster, "delete", run)


def test_cluster_down_leaves_no_process_mount_namespace_or_route(real_cluster, trained):
    from cw_cli import testcluster as lc
    from cw_cli.testcluster import procs
    from cw_cli.testcluster.realnode import cleanup, network

    state = real_cluster.state_dir
    _run_pod(real_cluster, "sleeper", ["sleep", "3600"], until=("Running",))  # a container to stop
    records = procs.load_records(state / "pids")
    shims = cleanup.shim_pids(state / "real-node-0" / "containerd.sock")
    assert shims, "the running pod has no runtime shim"
    result = lc.down(state_dir=state)
    assert result.leftovers == []
    assert not [r.name for r in records if procs.is_alive(r)]
    assert not [pid for pid in shims if pid in cleanup.shim_pids(state / "real-node-0" / "containerd.sock")]
    nodes = [network.NodeNet(index) for index in range(len(real_cluster.info.real_nodes))]
    assert len(nodes) == 2
    assert not [node.netns for node in nodes if network.namespace_exists(node)]
    assert not network.fabric_exists()
    assert cleanup.mounts_under(state) == []
    routes = subprocess.run(["ip", "route", "show"], capture_output=True, text=True).stdout
    assert "blackhole" not in routes and not [n.host_if for n in nodes if n.host_if in routes], routes
