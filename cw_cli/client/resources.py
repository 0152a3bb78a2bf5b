"""The kinds cw reads and writes, and where the API server serves each."""

from __future__ import annotations

#: kind -> (API path prefix, plural, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Job": ("/apis/batch/v1", "jobs", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "Pod": ("/api/v1", "pods", True),
    "Event": ("/api/v1", "events", True),
    "Secret": ("/api/v1", "secrets", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    # A gang run (render/jobset.py); the API exists only where JobSet is installed.
    "JobSet": ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", True),
    # Kueue's objects, read for `cw status` of a run with `queue:`.
    "Workload": ("/apis/kueue.x-k8s.io/v1beta2", "workloads", True),
    "LocalQueue": ("/apis/kueue.x-k8s.io/v1beta2", "localqueues", True),
    "ClusterQueue": ("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    "Namespace": ("/api/v1", "namespaces", False),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "Node": ("/api/v1", "nodes", False),
}
