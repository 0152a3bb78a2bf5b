"""The test cluster is called cw-test everywhere it names itself: its kubeconfig context, its
certificates, its etcd member, the volumes `cw cluster up` makes and its state folder's marker.

"local" is this machine without a cluster (`--local` runs, ./cw-local): a test cluster object
called cw-local read as one of those. A folder an earlier cw marked with the old name is still
the cluster's own (`up` reuses it, `down` removes it).
"""

from __future__ import annotations

import ast

import pytest
from unit_helpers import REPO

from cw_cli.testcluster import argv, cluster, names, records
from cw_cli.testcluster.kubeconfig import CONTEXT
from cw_cli.testcluster.volumes import volume_manifests

TESTCLUSTER = REPO / "cw_cli" / "testcluster"


def test_no_module_of_the_test_cluster_spells_a_name_but_names_py():
    spelled = []
    for path in sorted(TESTCLUSTER.glob("*.py")):
        if path.name == "names.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "cw-local" in node.value:
                spelled.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert spelled == []


def test_context_certificates_etcd_and_volumes_say_cw_test(tmp_path):
    assert CONTEXT == names.NAME == "cw-test"
    ports = argv.assign_ports(list(range(20000, 20000 + len(argv.PORT_NAMES))))
    assert "--name=cw-test" in argv.etcd_args(tmp_path, ports)
    volume, _ = volume_manifests("default", "checkpoints")
    assert volume["metadata"]["name"] == "cw-test-default-checkpoints"
    assert volume["spec"]["hostPath"]["path"] == "/var/lib/cw-test/default/checkpoints"
    assert records.MARKER == ".cw-test-cluster"


def test_generated_certificates_name_the_cw_test_ca_and_admin(tmp_path):
    pytest.importorskip("cryptography")
    from cryptography import x509

    from cw_cli.testcluster.pki import generate_pki

    pki = generate_pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.admin.cert.read_bytes())
    assert ca.subject.rfc4514_string() == "CN=cw-test-ca"
    assert admin.subject.rfc4514_string() == "CN=cw-test-admin,O=system:masters"
    assert admin.issuer == ca.subject


def test_a_state_folder_marked_with_the_old_name_is_still_the_clusters(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / records.LEGACY_MARKER).write_text("")
    (state / "etcd").mkdir()
    records.check_state_dir(state)  # no refusal: an earlier cw's folder
    assert cluster.down(state).removed_state
    assert not state.exists()


def test_a_folder_of_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(records.TestClusterError, match="not made by cw"):
        records.check_state_dir(tmp_path)
