"""The test cluster's command lines (cw_cli/testcluster/argv.py), checked without starting
anything: every flag well-formed, every port and certificate in the flag that needs it, no port
shared between components. The processes themselves start in tests/cluster/test_the_test_cluster.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from unit_helpers import REPO

from cw_cli.testcluster import argv, cluster, state_files
from cw_cli.testcluster.pki import Pki, load_pki

FLAG = re.compile(r"^--[a-z][a-z0-9-]*=\S+$")
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def pki(state: Path) -> Pki:
    return load_pki(state / "pki")  # paths only: nothing is generated or read


@pytest.fixture
def ports() -> dict[str, int]:
    return argv.assign_ports([41001, 41002, 41003, 41004, 41005, 41006])


@pytest.fixture
def args(state: Path, pki: Pki, ports: dict[str, int]) -> dict[str, list[str]]:
    """Each component's flags."""
    return {
        "etcd": argv.etcd_args(state, ports),
        "kube-apiserver": argv.apiserver_args(pki, ports),
        "kube-controller-manager": argv.controller_manager_args(state, pki, ports),
        "kube-scheduler": argv.scheduler_args(state, ports),
        "kwok": argv.kwok_args(state, pki, ports),
    }


def flags(arguments: list[str]) -> dict[str, str]:
    """``--name=value`` flags as a dict (each name once: a repeated flag fails the test)."""
    pairs = [a[2:].split("=", 1) for a in arguments]
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), f"a flag is given twice: {names}"
    return dict(pairs)


def ports_in(value: str) -> set[int]:
    return {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", value)}


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_flag_is_name_equals_value(args, component):
    bad = [a for a in args[component] if not FLAG.match(a)]
    assert bad == []
    assert all(isinstance(a, str) for a in args[component])
    flags(args[component])


def test_builders_are_pure(state, pki, ports, args):
    again = {
        "etcd": argv.etcd_args(state, ports),
        "kube-apiserver": argv.apiserver_args(pki, ports),
        "kube-controller-manager": argv.controller_manager_args(state, pki, ports),
        "kube-scheduler": argv.scheduler_args(state, ports),
        "kwok": argv.kwok_args(state, pki, ports),
    }
    assert again == args
    assert not state.exists()  # nothing written


def test_etcd_listens_on_its_ports_with_data_in_the_state_dir(args, state, ports):
    etcd = flags(args["etcd"])
    client, peer = f"http://127.0.0.1:{ports['etcd']}", f"http://127.0.0.1:{ports['etcd-peer']}"
    assert etcd["listen-client-urls"] == etcd["advertise-client-urls"] == client
    assert etcd["listen-peer-urls"] == etcd["initial-advertise-peer-urls"] == peer
    assert etcd["initial-cluster"] == f"{etcd['name']}={peer}"
    assert Path(etcd["data-dir"]) == state / "etcd"


def test_apiserver_talks_to_this_etcd_and_listens_on_its_port(args, ports):
    apiserver, etcd = flags(args["kube-apiserver"]), flags(args["etcd"])
    assert apiserver["etcd-servers"] == etcd["advertise-client-urls"]
    assert apiserver["secure-port"] == str(ports["kube-apiserver"])
    assert apiserver["bind-address"] == apiserver["advertise-address"] == "127.0.0.1"
    assert argv.server_url(ports) == f"https://127.0.0.1:{ports['kube-apiserver']}"


def test_apiserver_trusts_the_pki_ca_and_serves_its_certificate(args, pki):
    apiserver = flags(args["kube-apiserver"])
    assert Path(apiserver["client-ca-file"]) == pki.ca.cert
    assert Path(apiserver["kubelet-certificate-authority"]) == pki.ca.cert
    assert (Path(apiserver["tls-cert-file"]), Path(apiserver["tls-private-key-file"])) == (pki.apiserver.cert, pki.apiserver.key)
    assert Path(apiserver["kubelet-client-certificate"]) == pki.apiserver_kubelet_client.cert
    assert Path(apiserver["kubelet-client-key"]) == pki.apiserver_kubelet_client.key
    assert apiserver["authorization-mode"] == "Node,RBAC"


def test_service_account_keys_pair_up(args, pki):
    apiserver, manager = flags(args["kube-apiserver"]), flags(args["kube-controller-manager"])
    assert Path(apiserver["service-account-key-file"]) == pki.sa_pub
    assert Path(apiserver["service-account-signing-key-file"]) == pki.sa_key
    assert Path(manager["service-account-private-key-file"]) == pki.sa_key
    assert apiserver["service-cluster-ip-range"] == manager["service-cluster-ip-range"] == argv.SERVICE_CIDR


def test_controller_manager_signs_with_the_pki_ca(args, pki):
    manager = flags(args["kube-controller-manager"])
    assert Path(manager["root-ca-file"]) == pki.ca.cert
    assert (Path(manager["cluster-signing-cert-file"]), Path(manager["cluster-signing-key-file"])) == (pki.ca.cert, pki.ca.key)


@pytest.mark.parametrize("component", ["kube-controller-manager", "kube-scheduler"])
def test_components_use_their_own_kubeconfig_and_port(args, state, ports, component):
    own = flags(args[component])
    kubeconfig = str(argv.kubeconfig_path(state, component))
    assert own["kubeconfig"] == own["authentication-kubeconfig"] == own["authorization-kubeconfig"] == kubeconfig
    assert own["secure-port"] == str(ports[component])
    assert own["bind-address"] == "127.0.0.1"
    assert own["leader-elect"] == "false"


def test_kwok_serves_on_its_port_with_the_serving_certificate(args, state, pki, ports):
    kwok = flags(args["kwok"])
    assert kwok["node-port"] == str(ports["kwok"])
    assert kwok["server-address"] == f"127.0.0.1:{ports['kwok']}"
    assert (Path(kwok["tls-cert-file"]), Path(kwok["tls-private-key-file"])) == (pki.kwok_serving.cert, pki.kwok_serving.key)
    assert Path(kwok["kubeconfig"]) == argv.kubeconfig_path(state, "kwok")
    assert Path(kwok["config"]) == argv.kwok_config_path(state)
    assert kwok["cidr"] == argv.POD_CIDR


def test_no_two_components_share_a_port(args, ports):
    used: dict[str, set[int]] = {}
    for component, arguments in args.items():
        found = set()
        for name, value in flags(arguments).items():
            found |= ports_in(value)
            if name in ("secure-port", "node-port"):
                found.add(int(value))
        used[component] = found
    # The API server names etcd's client port: that one it uses, it does not listen on it.
    used["kube-apiserver"] -= {ports["etcd"]}
    listening = sorted(p for found in used.values() for p in found)
    assert len(listening) == len(set(listening)), used
    assert set(listening) == set(ports.values())


def test_ports_are_named_once_each():
    assert len(argv.PORT_NAMES) == len(set(argv.PORT_NAMES))
    with pytest.raises(ValueError):
        argv.assign_ports([1, 2, 3])


def test_every_path_stays_in_the_state_dir(args, state):
    for component, arguments in args.items():
        for name, value in flags(arguments).items():
            if value.startswith("/"):
                assert Path(value).is_relative_to(state), f"{component} --{name}={value}"


def test_every_kubeconfig_user_has_a_client_certificate(pki):
    certs = state_files.client_certs(pki)
    assert set(certs) == set(argv.KUBECONFIG_USERS)
    assert certs["admin"] == pki.admin
    assert len({pair.cert for pair in certs.values()}) == len(certs)  # each its own identity


def test_environment_drops_what_points_elsewhere(state):
    environ = {"PATH": "/bin", "KUBECONFIG": "/x", "ETCD_DATA_DIR": "/y", "HOME": "/home/me"}
    assert argv.component_env(environ) == {"PATH": "/bin", "HOME": "/home/me"}
    assert argv.kwok_env(environ, state) == {"PATH": "/bin", "HOME": str(argv.kwok_dir(state))}


# --------------------------------------------------------------------------- one HTTP client

LOCALCLUSTER = REPO / "cw_cli" / "testcluster"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sorted(LOCALCLUSTER.glob("*.py")), ids=lambda p: p.name)
def test_no_second_http_client(path):
    """Requests go through cw_cli.k8s (Kube, Transport); no urllib or ssl client of its own."""
    assert not _imported_modules(path) & {"urllib.request", "urllib.error", "ssl", "http.client"}
    assert "urlopen" not in path.read_text(encoding="utf-8")


def test_api_class_is_gone():
    assert not hasattr(cluster, "_Api")
