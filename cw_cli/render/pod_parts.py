"""The parts every pod of a run is made of: resources, security contexts, environment, the
wait-for-server init containers and the affinities. Pure values, no templates."""

from __future__ import annotations

from typing import Any

from cw_cli.config.quantity import parse_quantity
from cw_cli.frameworks.base import ServiceDef
from cw_cli.frameworks.distributed import MASTER_ADDR_ENV, MASTER_PORT, MASTER_PORT_ENV, NODE_RANK_ENV, NUM_NODES_ENV
from cw_cli.frameworks.runtime_files import WAIT_FILE, runtime_file
from cw_cli.labels import COMPLETION_INDEX_ANNOTATION, COMPONENT_LABEL, GPU_RESOURCE, INSTANCE_LABEL, MANAGED_BY_LABEL, TRAINER

#: `rdma: true`: CoreWeave's InfiniBand scheduling resource (a flag, not a device count) and the
#: NCCL/UCX settings its documentation gives for its fabrics.
RDMA_RESOURCE = "rdma/ib"
RDMA_ENV = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "ibp", "UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}
#: Keep service-mesh sidecars (Istio, Linkerd) out of the trainer: a sidecar that never exits keeps a
#: finished Job's pod running. The run's own `annotations` win.
NO_MESH_ANNOTATIONS = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}


def resources(gpus: int, cpu: str | None, memory: str | None, rdma: bool = False) -> dict[str, dict[str, str]]:
    """Requests equal to limits (a Guaranteed pod where CPU and memory are given)."""
    amounts: dict[str, str] = {}
    if gpus:
        amounts[GPU_RESOURCE] = str(gpus)
    if rdma:
        amounts[RDMA_RESOURCE] = "1"
    if cpu:
        amounts["cpu"] = cpu
    if memory:
        amounts["memory"] = memory
    return {"requests": dict(amounts), "limits": dict(amounts)}


#: Requests of a server that states none: a pod with only a GPU request is BestEffort, the
#: first evicted under memory pressure. Per GPU, with a floor for GPU-less servers.
SERVER_CPU_PER_GPU = 4
SERVER_MEMORY_GI_PER_GPU = 32
#: Every container: no privilege escalation, no Linux capabilities, the runtime's default seccomp
#: profile (what Pod Security "baseline" and most admission policies ask for).
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
POD_SECURITY = {"seccompProfile": {"type": "RuntimeDefault"}}
#: cw's own helpers (the wait-for-server init containers, the keeper) only run stdlib Python: they
#: need neither root nor a writable file system. The trainer and servers run as their images
#: want (root, writing caches and pip installs).
HELPER_SECURITY = {
    **CONTAINER_SECURITY,
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "runAsGroup": 65534,
    "readOnlyRootFilesystem": True,
}
HELPER_RESOURCES = {
    "requests": {"cpu": "10m", "memory": "32Mi", "ephemeral-storage": "10Mi"},
    "limits": {"cpu": "200m", "memory": "128Mi", "ephemeral-storage": "100Mi"},
}
#: Under Kueue the helpers ask only for CPU and memory: Kueue does not admit a pod that requests a
#: resource its ClusterQueue does not cover, and ClusterQueues rarely cover ephemeral-storage.
QUEUED_HELPER_RESOURCES = {
    part: {name: amount for name, amount in amounts.items() if name != "ephemeral-storage"}
    for part, amounts in HELPER_RESOURCES.items()
}


def helper_resources(queued: bool) -> dict[str, dict[str, str]]:
    """Requests and limits of cw's helper containers (wait-for-server init containers, keeper)."""
    return QUEUED_HELPER_RESOURCES if queued else HELPER_RESOURCES


def server_requests(service: ServiceDef) -> tuple[str, str]:
    """CPU and memory of a server: its own settings, else a default sized by its GPUs."""
    cpu = service.cpu or str(max(2, SERVER_CPU_PER_GPU * service.gpus))
    memory = service.memory or f"{max(16, SERVER_MEMORY_GI_PER_GPU * service.gpus)}Gi"
    return cpu, memory


MAX_SHM = 64 * 2**30


def shm_size(explicit: str | None, memory: str | None) -> str:
    """/dev/shm counts against the memory limit: default to half of it, at most 64Gi."""
    if explicit:
        return explicit
    if not memory:
        return "64Gi"
    half_gib = max(1, int(min(parse_quantity(memory) / 2, MAX_SHM) // 2**30))
    return f"{half_gib}Gi"


def env_list(literal: dict[str, str], secret_refs: dict[str, Any]) -> list[dict[str, Any]]:
    """A container's ``env``: the literal values, then the variables read from Secrets."""
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in literal.items()]
    for variable, ref in secret_refs.items():
        env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return env


def multi_node_env(master: str, nodes: int) -> list[dict[str, Any]]:
    """The rank, node count and rank 0's address of a multi-node trainer (cw's names and torchrun's)."""
    rank_source = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}
    return [
        {"name": NODE_RANK_ENV, "valueFrom": rank_source},
        {"name": "NODE_RANK", "valueFrom": rank_source},
        {"name": NUM_NODES_ENV, "value": str(nodes)},
        {"name": "NNODES", "value": str(nodes)},
        {"name": MASTER_ADDR_ENV, "value": master},
        {"name": "MASTER_ADDR", "value": master},
        {"name": MASTER_PORT_ENV, "value": str(MASTER_PORT)},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
    ]


def wait_container(
    service: ServiceDef, service_name: str, image: str, pull_policy: str, timeout_s: int, queued: bool
) -> dict[str, Any]:
    """The init container that holds the trainer until a server answers."""
    # Runs inside the cluster, where the Service name resolves; cw itself only reads object status.
    url = f"http://{service_name}:{service.port}{service.health_path}"
    script = runtime_file(WAIT_FILE)  # inline (-c): init containers do not mount the ConfigMap
    return {
        "name": f"wait-{service.role}",
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["python3", "-c", script, url, str(timeout_s)],
        "resources": helper_resources(queued),
        "securityContext": HELPER_SECURITY,
    }


def spread_affinity(labels: dict[str, str]) -> dict[str, Any]:
    """One trainer pod per node."""
    selector = {key: labels[key] for key in (INSTANCE_LABEL, MANAGED_BY_LABEL)}
    selector[COMPONENT_LABEL] = TRAINER
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }


def pack_services_affinity(labels: dict[str, str], roles: list[str]) -> dict[str, Any]:
    """Prefer putting a run's servers on one node, so whole nodes stay free for the trainer."""
    return {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {
                            "matchLabels": {INSTANCE_LABEL: labels[INSTANCE_LABEL]},
                            "matchExpressions": [
                                {"key": COMPONENT_LABEL, "operator": "In", "values": roles}
                            ],
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }
