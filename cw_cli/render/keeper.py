"""The server keeper: what a run's servers need to stop themselves once the trainer has finished.

Each server pod gets a small second container running ``cw_keeper.py`` (shipped in the
ConfigMap). It reads the trainer Job through the API server and scales its own Deployment to zero
when the Job is Complete or Failed, or when a ``--services --ttl`` lifetime is over, so GPUs come
back without cw running anywhere. Its permissions are a per-run Role limited by resourceNames to
the run's own Job and Deployments; the token is mounted into the keeper container only.
"""

from __future__ import annotations

from typing import Any

from cw_cli.frameworks.base import CONFIG_MOUNT
from cw_cli.frameworks.runtime_files import KEEPER_FILE
from cw_cli.labels import KEEPER

TOKEN_VOLUME = "keeper-token"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SECONDS = 3600  # the kubelet refreshes a projected token well before it expires


def keeper_rules(trainer_job: str | None, deployments: list[str]) -> list[dict[str, Any]]:
    """The Role's rules: read the run's Job, read and scale its own Deployments, nothing else."""
    rules: list[dict[str, Any]] = []
    if trainer_job:
        rules.append({"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": [trainer_job], "verbs": ["get"]})
    rules.append({"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": deployments, "verbs": ["get"]})
    rules.append(
        {"apiGroups": ["apps"], "resources": ["deployments/scale"], "resourceNames": deployments, "verbs": ["get", "patch"]}
    )
    return rules


def keeper_subjects(service_account: str, namespace: str | None) -> list[dict[str, Any]]:
    """The RoleBinding's subject: the ServiceAccount the server pods run as."""
    subject: dict[str, Any] = {"kind": "ServiceAccount", "name": service_account}
    if namespace:
        subject["namespace"] = namespace
    return [subject]


def keeper_container(
    image: str,
    pull_policy: str,
    deployment: str,
    trainer_job: str | None,
    lifetime_s: int | None,
    security: dict[str, Any],
    resources: dict[str, Any],
) -> dict[str, Any]:
    """The keeper container of one server pod (the server's own image: it has python3)."""
    env = [{"name": "CW_KEEPER_DEPLOYMENT", "value": deployment}]
    if trainer_job:
        env.append({"name": "CW_TRAINER_JOB", "value": trainer_job})
    if lifetime_s:
        env.append({"name": "CW_LIFETIME_S", "value": str(lifetime_s)})
    return {
        "name": KEEPER,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["python3", f"{CONFIG_MOUNT}/{KEEPER_FILE}"],
        "env": env,
        "resources": resources,
        "securityContext": security,
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
            {"name": TOKEN_VOLUME, "mountPath": SA_DIR, "readOnly": True},
        ],
    }


def token_volume() -> dict[str, Any]:
    """What the kubelet would automount (token, CA, namespace), as a volume only the keeper mounts."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            # Readable by the keeper, which runs as another user than the server beside it.
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]
        },
    }
