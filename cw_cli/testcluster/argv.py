"""The command lines of the control plane's processes, as pure functions of state, PKI and ports.

Each ``*_args`` function returns the flags (``--name=value``) of one component, without the
program; :mod:`.cluster` puts the binary in front and starts it. Nothing here reads or writes a
file, so the flags can be checked without starting anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .names import NAME
from .pki import Pki

#: The ports one cluster listens on (all on 127.0.0.1), one per name.
PORT_NAMES = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"  # data only: pod IPs written by kwok are never reachable
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The components that talk to the API server with a kubeconfig of their own, and the admin one.
KUBECONFIG_USERS = ("kube-controller-manager", "kube-scheduler", "kwok", "admin")


def assign_ports(free: list[int]) -> dict[str, int]:
    """Name the free ports by :data:`PORT_NAMES`.

    Raises:
        ValueError: Not exactly one port per name.
    """
    return dict(zip(PORT_NAMES, free, strict=True))


def server_url(ports: Mapping[str, int], address: str = "127.0.0.1") -> str:
    """The API server's URL (``address``: where it listens, see :func:`apiserver_args`)."""
    return f"https://{address}:{ports['kube-apiserver']}"


def etcd_url(ports: Mapping[str, int]) -> str:
    """Where etcd serves its clients (the API server); plain HTTP on loopback."""
    return f"http://127.0.0.1:{ports['etcd']}"


def kubeconfig_path(state: Path, user: str) -> Path:
    """The kubeconfig file of one of :data:`KUBECONFIG_USERS`, inside the state folder."""
    return state / "kubeconfigs" / f"{user}.kubeconfig"


def kwok_dir(state: Path) -> Path:
    """kwok's folder: its config, its fake container log, and its HOME."""
    return state / "kwok"


def kwok_config_path(state: Path) -> Path:
    """kwok's ``--config`` file (stages and ClusterLogs), written by :mod:`.cluster`."""
    return kwok_dir(state) / "kwok.yaml"


def etcd_args(state: Path, ports: Mapping[str, int]) -> list[str]:
    """etcd: one member, data in ``state/etcd``, no fsync (a throw-away test cluster)."""
    client, peer = etcd_url(ports), f"http://127.0.0.1:{ports['etcd-peer']}"
    return [
        f"--name={NAME}",
        f"--data-dir={state / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={NAME}={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
        "--quota-backend-bytes=2147483648",
    ]


def apiserver_args(pki: Pki, ports: Mapping[str, int], address: str = "127.0.0.1") -> list[str]:
    """kube-apiserver on ``address``: client certificates of the PKI's CA, RBAC, kwok as the kubelets.

    ``address`` is 127.0.0.1 without a real node. With one, it is the host end of the real node's
    link (a pod cannot reach the host's loopback): the ``kubernetes`` Service's endpoints point
    there, so pods reach the API server through in-cluster config as on a real cluster.
    """
    # 127.0.0.1 may not be written into the kubernetes Service's Endpoints; nothing needs them then.
    reconciler = "none" if address == "127.0.0.1" else "lease"
    return [
        f"--etcd-servers={etcd_url(ports)}",
        f"--bind-address={address}",
        f"--advertise-address={address}",
        f"--secure-port={ports['kube-apiserver']}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--allow-privileged=true",
        f"--endpoint-reconciler-type={reconciler}",
        # A real node's kubelet may change only its own Node and its pods' status; a namespace
        # may give its pods default tolerations and a node selector (namespace default's pods run
        # on the real nodes).
        "--enable-admission-plugins=NodeRestriction,PodTolerationRestriction,PodNodeSelector",
        # pods/log, exec etc. are proxied to kwok's kubelet-like server on 127.0.0.1, or to a real
        # node's kubelet on its own address.
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        f"--kubelet-certificate-authority={pki.ca.cert}",
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
    ]


def _component_auth(state: Path, user: str, port: int) -> list[str]:
    """What kube-controller-manager and kube-scheduler share: one kubeconfig, a loopback port."""
    kubeconfig = kubeconfig_path(state, user)
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
    ]


def controller_manager_args(state: Path, pki: Pki, ports: Mapping[str, int]) -> list[str]:
    """kube-controller-manager: signs service-account tokens and certificates with the PKI."""
    return [
        *_component_auth(state, "kube-controller-manager", ports["kube-controller-manager"]),
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca.cert}",
        f"--cluster-signing-cert-file={pki.ca.cert}",
        f"--cluster-signing-key-file={pki.ca.key}",
        "--use-service-account-credentials=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def scheduler_args(state: Path, ports: Mapping[str, int]) -> list[str]:
    """kube-scheduler with its defaults."""
    return [
        *_component_auth(state, "kube-scheduler", ports["kube-scheduler"]),
        "--leader-elect=false",
        "--profiling=false",
    ]


def kwok_args(state: Path, pki: Pki, ports: Mapping[str, int]) -> list[str]:
    """kwok: plays the kubelet of the nodes annotated ``kwok.x-k8s.io/node=fake``.

    Its server (logs, exec) listens on the port the nodes advertise, with a serving certificate
    the API server's ``--kubelet-certificate-authority`` trusts.
    """
    port = ports["kwok"]
    return [
        f"--config={kwok_config_path(state)}",
        f"--kubeconfig={kubeconfig_path(state, 'kwok')}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-ip=127.0.0.1",
        f"--node-port={port}",
        f"--server-address=127.0.0.1:{port}",
        f"--tls-cert-file={pki.kwok_serving.cert}",
        f"--tls-private-key-file={pki.kwok_serving.key}",
        "--node-lease-duration-seconds=40",
        f"--cidr={POD_CIDR}",
        "--enable-crds=Logs,Exec,PortForward",  # tests route logs, exec and port-forward to local files and processes
    ]


def component_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of the cluster's processes: the caller's, less what would point them
    elsewhere (a KUBECONFIG, ETCD_* settings, which etcd reads as flags)."""
    return {k: v for k, v in environ.items() if not k.startswith(("KUBECONFIG", "ETCD"))}


def kwok_env(environ: Mapping[str, str], state: Path) -> dict[str, str]:
    """kwok's environment: HOME inside the state folder, or it also loads ~/.kwok/kwok.yaml."""
    return {**component_env(environ), "HOME": str(kwok_dir(state))}
