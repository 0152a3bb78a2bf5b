"""JobSet on the test cluster (started by ``cw cluster up --kueue``, before Kueue): the real controller.

JobSet (sigs.k8s.io/jobset, built unchanged from its Go module by ``tools/build.sh jobset``) is a
controller-runtime manager like Kueue, and runs the same way (:mod:`.controllers`): a local
process serving its webhooks on 127.0.0.1 with the cluster's loopback serving certificate, and
its own webhook manifests installed with ``clientConfig.url`` pointing there and the cluster CA as
``caBundle``. All four of its webhooks are kept (JobSet defaulting and validation, pod mutation and
validation), with ``failurePolicy`` as shipped. The raw ``manifests.yaml`` has no selector on the
pod webhooks; the release applies two kustomize patches that limit them to pods labelled
``jobset.sigs.k8s.io/jobset-name``, and so does :func:`webhook_configurations` (without them every
pod of the cluster would go through JobSet).

Its configuration file turns off what only makes sense in-cluster: its certificate management
(it would issue certificates for the Service name and patch the webhook configurations' CA),
leader election, and binds health and metrics to 127.0.0.1 with the metrics certificate from the
same folder (otherwise it reads ``/tmp/k8s-metrics-server/serving-certs``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from . import api, controllers
from .errors import StartError
from .paths import cache_dir, load_versions

API_VERSION = "jobset.x-k8s.io/v1alpha2"


def jobset_dir(cache: Path | None = None) -> Path:
    """Where tools/build.sh puts JobSet, its CRDs, webhook manifests and their kustomize patches."""
    return (cache or cache_dir()) / "bin" / f"jobset-{load_versions().jobset}"


def webhook_configurations(home: Path, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """JobSet's webhook configurations as released (kustomize patches applied), reached on 127.0.0.1.

    Args:
        home: JobSet's build folder (``webhooks.yaml`` and ``webhook-patches/``).
        port: JobSet's webhook port on 127.0.0.1.
        ca_pem: The CA that signed the serving certificate.
    """
    documents = [d for d in yaml.safe_load_all((home / "webhooks.yaml").read_text(encoding="utf-8")) if d]
    documents = controllers.kustomize_json_patches(documents, home / "webhook-patches")
    return controllers.webhook_configurations(documents, port, ca_pem, "jobset")


def configuration(webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path) -> dict[str, Any]:
    """JobSet's Configuration (config.jobset.x-k8s.io/v1alpha1) for a controller on this machine."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "certDir": str(cert_dir)},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def start(host: controllers.Host, ports: tuple[int, int, int]) -> None:
    """Install JobSet's CRD and webhooks, start the controller and wait until it serves them.

    Args:
        host: The test cluster (see :class:`.controllers.Host`).
        ports: (webhook, health, metrics) on 127.0.0.1.

    Raises:
        StartError: JobSet is not built, or an object is refused.
    """
    home = jobset_dir()
    if not os.access(home / "jobset", os.X_OK):
        raise StartError(f"JobSet is not built ({home}); run `bash tools/build.sh jobset` (a few minutes)")

    host.say("installing JobSet's CRD")
    api.install_crds(host.kube, home / "crds", host.wait)
    webhook_port, health_port, metrics_port = ports
    folder, _ = controllers.controller_folder(
        host, "jobset", lambda certs: configuration(webhook_port, health_port, metrics_port, certs)
    )
    webhooks = webhook_configurations(home, webhook_port, host.ca_cert.read_bytes())
    # Info level: JobSet's default (development logging) writes debug lines for every reconcile.
    argv = [str(home / "jobset"), f"--config={folder / 'config.yaml'}", "--zap-log-level=info"]
    controllers.run_controller(host, "JobSet", "jobset", argv, dict(os.environ), webhooks, health_port)
    host.say(f"JobSet: controller and webhooks on 127.0.0.1:{webhook_port}")
