"""JobSet on the local cluster (started by ``cw cluster up --kueue``, before Kueue): the real controller.

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
from typing import Any, Callable

import yaml

from . import controllers
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


def start(
    api: Any,
    state: Path,
    admin_kubeconfig: Path,
    serving_cert: tuple[Path, Path],
    ca_cert: Path,
    ports: tuple[int, int, int],
    spawn: Callable[[str, list[str], dict], None],
    wait: Callable[[str, Callable[[], bool]], None],
    say: Callable[[str], None],
) -> None:
    """Install JobSet's CRD and webhooks, start the controller and wait until it serves them.

    Args:
        api: The local cluster's admin client (``request``, ``get_json``).
        state: The cluster's state folder.
        admin_kubeconfig: Kubeconfig JobSet runs with.
        serving_cert: (certificate, key) valid for 127.0.0.1.
        ca_cert: The cluster CA (what the API server checks the webhooks against).
        ports: (webhook, health, metrics) on 127.0.0.1.
        spawn: Starts a recorded process ``(name, argv, env)``; ``cw cluster down`` stops it.
        wait: Polls a probe until true or the start deadline.
        say: Progress.

    Raises:
        StartError: JobSet is not built, or an object is refused.
    """
    home = jobset_dir()
    if not os.access(home / "jobset", os.X_OK):
        raise StartError(f"JobSet is not built ({home}); run `bash tools/build.sh jobset` (a few minutes)")

    say("installing JobSet's CRD")
    controllers.install_crds(api, home / "crds", wait)
    folder = state / "jobset"
    certs = controllers.serving_cert_dir(folder, serving_cert)
    webhook_port, health_port, metrics_port = ports
    (folder / "config.yaml").write_text(
        yaml.safe_dump(configuration(webhook_port, health_port, metrics_port, certs)), encoding="utf-8"
    )
    webhooks = webhook_configurations(home, webhook_port, ca_cert.read_bytes())
    controllers.install_webhooks(api, webhooks)

    say("starting JobSet")
    # Info level: JobSet's default (development logging) writes debug lines for every reconcile.
    spawn("jobset", [str(home / "jobset"), f"--config={folder / 'config.yaml'}", "--zap-log-level=info"],
          {**os.environ, "KUBECONFIG": str(admin_kubeconfig)})  # fmt: skip
    # /readyz is true once the webhook server listens; its handlers may come a moment later.
    wait("JobSet to be ready", lambda: controllers.http_ok(f"http://127.0.0.1:{health_port}/readyz"))
    wait("JobSet to serve its webhooks", lambda: controllers.webhooks_served(webhooks, ca_cert))
    say(f"JobSet: controller and webhooks on 127.0.0.1:{webhook_port}")
