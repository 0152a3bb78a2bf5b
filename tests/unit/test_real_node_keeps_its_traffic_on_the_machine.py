"""The real node's network, settings and volume, as cw_cli.testcluster.realnode writes them: nothing
may route a packet off the machine, and pods find the API server through the `kubernetes` Service."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import yaml

from cw_cli.testcluster import argv
from cw_cli.testcluster.realnode import image, network, settings
from cw_cli.testcluster.volumes import REAL_NODE_KEY, real_node_namespace, volume_manifests

ROOT = Path(__file__).resolve().parents[2]


def _routes(commands: list[list[str]]) -> list[list[str]]:
    return [c for c in commands if "route" in c]


def test_no_default_route_anywhere_the_real_node_sets_up():
    for index in (0, 1, 3):
        commands = network.setup_commands(network.NodeNet(index))
        assert _routes(commands), commands
        for command in commands:
            assert "default" not in command, command
            assert "0.0.0.0/0" not in command, command


def test_pods_of_real_nodes_never_share_a_range_with_fake_pods_services_or_each_other():
    fake, services = ipaddress.ip_network(argv.POD_CIDR), ipaddress.ip_network(argv.SERVICE_CIDR)
    ranges = [ipaddress.ip_network(network.NodeNet(i).pod_cidr) for i in range(4)]
    links = [ipaddress.ip_network(f"{network.NodeNet(i).node_ip}/30", strict=False) for i in range(4)]
    for net in ranges + links:
        assert not net.overlaps(fake) and not net.overlaps(services), net
    for i, net in enumerate(ranges + links):
        for other in (ranges + links)[i + 1:]:
            assert not net.overlaps(other), (net, other)


def test_the_fake_pod_and_service_ranges_are_blackholed_on_the_host_and_removed_again():
    added = network.blackhole_commands(add=True)
    assert {c[-1] for c in added} == {argv.POD_CIDR, argv.SERVICE_CIDR}
    assert all(c[:4] == ["ip", "route", "replace", "blackhole"] for c in added)
    assert all(c[:4] == ["ip", "route", "del", "blackhole"] for c in network.blackhole_commands(add=False))


def test_a_second_node_reaches_the_api_server_through_its_own_link():
    second = network.NodeNet(1)
    routes = _routes(network.setup_commands(second))
    assert ["ip", "netns", "exec", second.netns, "ip", "route", "replace", f"{network.api_address()}/32", "via",
            second.host_ip] in routes  # fmt: skip
    assert network.api_address() == network.NodeNet(0).host_ip


def test_nodes_reach_each_others_pods_through_the_fabric_and_never_through_the_host():
    nodes = 3
    commands = network.fabric_commands() + [c for i in range(nodes) for c in network.join_fabric_commands(network.NodeNet(i), nodes)]
    for command in commands:
        # Every command runs in the fabric's or a node's namespace, or makes the fabric's: none in the host's.
        assert command[:3] == ["ip", "netns", "add"] or command[1] == "-n", command
        assert "default" not in command and "0.0.0.0/0" not in command, command
    fabric = ipaddress.ip_network(network.FABRIC_NET)
    assert not fabric.overlaps(network.LINK_NET) and not fabric.overlaps(network.REAL_POD_NET)
    first = network.NodeNet(0)
    routes = _routes(network.join_fabric_commands(first, nodes))
    assert {(r[5], r[7]) for r in routes} == {(network.NodeNet(i).pod_cidr, network.NodeNet(i).fabric_ip) for i in (1, 2)}
    assert all(r[:3] == ["ip", "-n", first.netns] for r in routes), routes
    assert network.fabric_teardown_commands() == [["ip", "netns", "del", network.FABRIC_NETNS]]


def test_pods_are_bridged_without_masquerade_or_default_gateway():
    conf = json.loads(settings.cni_config(network.NodeNet(0)))
    bridge = conf["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False and bridge["isDefaultGateway"] is False
    routes = [r["dst"] for r in bridge["ipam"]["routes"]]
    assert "0.0.0.0/0" not in routes and argv.SERVICE_CIDR in routes
    assert bridge["ipam"]["ranges"][0][0]["subnet"] == network.NodeNet(0).pod_cidr


def test_the_api_server_listens_where_pods_reach_it_only_with_a_real_node(tmp_path):
    from cw_cli.testcluster.pki import load_pki

    pki, ports = load_pki(tmp_path), {name: 1000 + i for i, name in enumerate(argv.PORT_NAMES)}
    alone = argv.apiserver_args(pki, ports)
    assert "--bind-address=127.0.0.1" in alone and "--endpoint-reconciler-type=none" in alone
    real = argv.apiserver_args(pki, ports, network.api_address())
    assert f"--bind-address={network.api_address()}" in real
    assert f"--advertise-address={network.api_address()}" in real
    assert "--endpoint-reconciler-type=lease" in real  # the kubernetes Service points at it
    assert not any("0.0.0.0" in a for a in real)


def test_the_kubelet_settings_say_what_this_machine_needs(tmp_path):
    node = network.NodeNet(0)
    config = settings.kubelet_config(node, ca=tmp_path / "ca", serving=(tmp_path / "c", tmp_path / "k"),
                                     runtime_socket=tmp_path / "s", resolv_conf=tmp_path / "r")  # fmt: skip
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["imageGCHighThresholdPercent"] == 100  # imported images are never collected
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert config["address"] == node.node_ip and config["readOnlyPort"] == 0
    assert settings.REAL_NODE_TAINT in config["registerWithTaints"]
    proxy = settings.kube_proxy_config(node, tmp_path / "kc")
    assert proxy["mode"] == "iptables" and proxy["iptables"]["masqueradeAll"] is False
    assert "nameserver" not in settings.resolv_conf()


def test_containerd_may_only_raise_oom_score_adj_and_uses_the_imported_pause_image(tmp_path):
    text = settings.containerd_config(tmp_path / "root", tmp_path / "state", tmp_path / "sock", tmp_path / "cni",
                                      "cw.local/pause:v1")  # fmt: skip
    assert "restrict_oom_score_adj = true" in text
    assert 'sandbox_image = "cw.local/pause:v1"' in text
    assert f'conf_dir = "{tmp_path / "cni"}"' in text


def test_the_default_checkpoint_volume_and_namespace_put_their_pods_on_the_real_node(tmp_path):
    volume, claim = volume_manifests("default", "checkpoints", real_node_dir=tmp_path / "volumes")
    term = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term == {"key": REAL_NODE_KEY, "operator": "In", "values": ["true"]}
    assert volume["spec"]["hostPath"] == {"path": f"{tmp_path}/volumes/default/checkpoints", "type": "DirectoryOrCreate"}
    fake_only, _ = volume_manifests("default", "checkpoints")
    assert "nodeAffinity" not in fake_only["spec"]
    annotations = real_node_namespace()["metadata"]["annotations"]
    tolerations = json.loads(annotations["scheduler.alpha.kubernetes.io/defaultTolerations"])
    assert tolerations == [{"key": settings.REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}]
    assert annotations["scheduler.alpha.kubernetes.io/node-selector"] == f"{settings.REAL_NODE_LABEL}=true"
    assert REAL_NODE_KEY == settings.REAL_NODE_LABEL


def test_the_quick_start_config_names_the_image_built_from_the_current_pins():
    config = yaml.safe_load((ROOT / "configs" / "test-cluster-sft.yaml").read_text())
    assert config["image"] == image.runtime_image(), (
        "a pin in kubeconfigs/cluster/runtime-image/requirements.txt (or the build steps) changed: "
        f"set `image: {image.runtime_image()}` in configs/test-cluster-sft.yaml")
    assert config["model_name_or_path"] == image.TINY_MODEL


def test_every_real_nodes_containerd_starts_before_and_stops_after_the_control_plane():
    from cw_cli.testcluster.records import CONTROL_PLANE, start_rank

    for index in (0, 1, 3):
        assert start_rank(f"containerd-{index}") < start_rank("etcd")
        assert start_rank(f"kubelet-{index}") > start_rank(CONTROL_PLANE[-1])
        assert start_rank(f"kube-proxy-{index}") > start_rank(f"kubelet-{index}")
    assert start_rank("watchdog") > start_rank("kube-proxy-1")
    assert start_rank("containerd-x") == start_rank("watchdog")  # not a node's process


def test_a_second_nodes_containerd_shares_the_first_ones_blobs_by_hard_link(tmp_path):
    source, target = tmp_path / "containerd", tmp_path / "containerd-1"
    for root in (source, target):
        (root / image.BLOBS).mkdir(parents=True)
    same, other, only_here = "a" * 64, "b" * 64, "c" * 64
    (source / image.BLOBS / same).write_bytes(b"layer")
    (target / image.BLOBS / same).write_bytes(b"layer")  # the import's own copy
    (source / image.BLOBS / other).write_bytes(b"one")
    (target / image.BLOBS / other).write_bytes(b"three")  # a size that differs: never replaced
    (target / image.BLOBS / only_here).write_bytes(b"own")
    assert image.share_blobs(source, target) == 1
    assert (target / image.BLOBS / same).stat().st_ino == (source / image.BLOBS / same).stat().st_ino
    assert (target / image.BLOBS / other).read_bytes() == b"three"
    assert (target / image.BLOBS / only_here).read_bytes() == b"own"
    assert sorted(p.name for p in (target / image.BLOBS).iterdir()) == [same, other, only_here]  # no staged file left
    assert image.share_blobs(source, target) == 0  # shared already
    assert image.share_blobs(tmp_path / "none", target) == 0


def test_more_real_nodes_than_pod_ranges_are_refused_before_anything_starts(tmp_path):
    from click.testing import CliRunner
    from unit_helpers import builtin_registry

    from cw_cli.cli.app import build_app

    state = tmp_path / "state"
    env = {"KUBECONFIG": str(tmp_path / "no-kubeconfig"), "HOME": str(tmp_path)}
    result = CliRunner().invoke(build_app(builtin_registry()), ["cluster", "up", "--real-nodes", "5", "--state-dir", str(state)],
                                env=env)  # fmt: skip
    assert result.exit_code != 0
    assert "5 real nodes asked for: 1 to 4 can run" in result.output, result.output
    assert not state.exists()  # refused before the cluster's folder was made
