"""Kueue on the test cluster (``cw cluster up --kueue``): the real controller, as a local process.

The API server must call Kueue's admission webhooks, and a Service in front of a process on this
machine is not an address it can reach. So Kueue serves its webhooks on 127.0.0.1 with the local
cluster's serving certificate, and its own webhook manifests are installed with
``clientConfig.url`` pointing there and the cluster CA as ``caBundle`` (:mod:`.controllers`):
every webhook Kueue needs for Jobs, JobSets and its own objects stays on, with ``failurePolicy``
as shipped. Kueue's own certificate management is off (it would issue certificates for the
Service name); its aggregated visibility API is off too (an APIService can only name a Service).

JobSet (:mod:`.jobset`) is started first, so its CRD is served when Kueue starts and Kueue sets
up its ``jobset.x-k8s.io/jobset`` integration at once (with the CRD missing it would defer it and
poll with a back-off of up to 2 minutes).

Then one ResourceFlavor, a ClusterQueue ``cw-gpus`` whose quota is the fake nodes' allocatable
CPU, memory and GPUs, and a LocalQueue ``cw`` in namespace default; :func:`local_queue` gives the
manifest for another namespace.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from cw_cli.labels import GPU_RESOURCE

from . import api, controllers
from .errors import StartError
from .paths import cache_dir, load_versions

API_VERSION = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "cw-gpus"
LOCAL_QUEUE = "cw"
FLAVOR = "default"
NAMESPACE = "kueue-system"
#: Webhooks kept from Kueue's manifests: Jobs and JobSets (its integrations here) and Kueue's own objects.
WEBHOOK_PATHS = ("-batch-v1-job", "-jobset-x-k8s-io-", "-kueue-x-k8s-io-")
#: Kueue's integrations: batch/v1 Jobs (cw's runs) and JobSets (the JobSet controller runs too).
FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset")
COVERED = ("cpu", "memory", GPU_RESOURCE)


def kueue_dir(cache: Path | None = None) -> Path:
    """Where tools/build.sh puts Kueue, its CRDs and its webhook manifests."""
    return (cache or cache_dir()) / "bin" / f"kueue-{load_versions().kueue}"


def webhook_configurations(manifests: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, reached at https://127.0.0.1:<port> instead of a Service."""
    return controllers.webhook_configurations(
        yaml.safe_load_all(manifests), port, ca_pem, "kueue", lambda path: any(m in path for m in WEBHOOK_PATHS)
    )


def configuration(webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration for a controller on this machine."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }


def queue_manifests(cpu: str, memory: str, gpus: int) -> list[dict[str, Any]]:
    """ResourceFlavor, ClusterQueue (quota = the given totals) and the LocalQueue of namespace default."""
    quota = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory},
             {"name": GPU_RESOURCE, "nominalQuota": str(gpus)}]  # fmt: skip
    return [
        {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {
            "apiVersion": API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{"coveredResources": list(COVERED), "flavors": [{"name": FLAVOR, "resources": quota}]}],
            },
        },
        local_queue("default"),
    ]


def local_queue(namespace: str) -> dict[str, Any]:
    """The LocalQueue ``cw`` of a namespace, feeding the ClusterQueue ``cw-gpus``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }


def _plural(kind: str) -> str:
    return {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}[kind]


def start(host: controllers.Host, ports: tuple[int, int, int], capacity: tuple[str, str, int]) -> None:
    """Install Kueue's CRDs and webhooks, start the controller, create the queues.

    Args:
        host: The test cluster (see :class:`.controllers.Host`).
        ports: (webhook, health, metrics) on 127.0.0.1.
        capacity: (cpu, memory, gpus) the ClusterQueue may hand out.

    Raises:
        StartError: Kueue is not built, or an object is refused.
    """
    home = kueue_dir()
    if not os.access(home / "kueue", os.X_OK):
        raise StartError(f"Kueue is not built ({home}); run `bash tools/build.sh kueue` (a few minutes)")

    kube = host.kube
    host.say("installing Kueue's CRDs")
    api.install_crds(kube, home / "crds", host.wait)
    api.create(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})

    webhook_port, health_port, metrics_port = ports
    folder, certs = controllers.controller_folder(
        host, "kueue", lambda certs: configuration(webhook_port, health_port, metrics_port, certs)
    )
    manifests = (home / "webhooks.yaml").read_text(encoding="utf-8")
    webhooks = webhook_configurations(manifests, webhook_port, host.ca_cert.read_bytes())
    argv = [str(home / "kueue"), f"--config={folder / 'config.yaml'}", "--feature-gates=VisibilityOnDemand=false"]
    env = {**os.environ, "CW_KUEUE_METRICS_CERTS": str(certs)}
    controllers.run_controller(host, "Kueue", "kueue", argv, env, webhooks, health_port)

    cpu, memory, gpus = capacity
    for body in queue_manifests(cpu, memory, gpus):
        namespace = body["metadata"].get("namespace")
        scope = f"/namespaces/{namespace}" if namespace else ""
        path = f"/apis/{API_VERSION}{scope}/{_plural(body['kind'])}"
        # The webhook answers once the controller's cache is warm: retry the first objects briefly.
        api.create(kube, path, body, attempts=30, pause_s=1.0)
    host.say(f"Kueue: ClusterQueue {CLUSTER_QUEUE} ({gpus} GPUs), LocalQueue {LOCAL_QUEUE} in namespace default")


def capacity_of(nodes: list[dict[str, Any]]) -> tuple[str, str, int]:
    """Allocatable CPU, memory and GPUs of the fake nodes, summed (for the ClusterQueue's quota)."""
    from cw_cli.config.quantity import parse_quantity

    cpu = sum(parse_quantity(str(n["status"]["allocatable"].get("cpu", 0))) for n in nodes)
    memory = sum(parse_quantity(str(n["status"]["allocatable"].get("memory", 0))) for n in nodes)
    gpus = sum(int(n["status"]["allocatable"].get(GPU_RESOURCE, 0)) for n in nodes)
    return str(int(cpu)), f"{int(memory // 2**30)}Gi", gpus

