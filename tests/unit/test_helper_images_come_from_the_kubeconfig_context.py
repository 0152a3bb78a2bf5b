"""A cluster without a registry names the images of cw's helper pods in its kubeconfig context
(the `cw-cli.dev/helper-images` extension `cw cluster up` writes for the real node); cw's reader
pod uses it there, and the pinned public image everywhere else."""

from __future__ import annotations

import pytest
import yaml

from cw_cli.client import kubeconfig as kc
from cw_cli.client.connection import Kube
from cw_cli.client.credentials import HELPER_IMAGES_EXTENSION, SIMULATED_GPUS_EXTENSION
from cw_cli.client.transport import Transport
from cw_cli.render.helper_pods import READER_IMAGE, reader_manifest
from cw_cli.testcluster.kubeconfig import merge_user_kubeconfig


def _kubeconfig(tmp_path, extensions):
    path = tmp_path / "config"
    context = {"cluster": "c", "user": "u"}
    if extensions is not None:
        context["extensions"] = extensions
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": context}], "current-context": "x",
    }))  # fmt: skip
    return str(path)


def _reader_image(credentials) -> str:
    kube = Kube(Transport(credentials), "default")
    manifest = reader_manifest("run", {}, "claim", image=kube.helper_image("reader", READER_IMAGE))
    return manifest["spec"]["containers"][0]["image"]


def test_the_context_names_the_reader_image(tmp_path):
    ext = [{"name": "other", "extension": {"x": 1}},
           {"name": HELPER_IMAGES_EXTENSION, "extension": {"reader": "cw.local/cw-runtime:py311-abc"}}]  # fmt: skip
    credentials = kc.load(_kubeconfig(tmp_path, ext))
    assert dict(credentials.helper_images) == {"reader": "cw.local/cw-runtime:py311-abc"}
    assert _reader_image(credentials) == "cw.local/cw-runtime:py311-abc"


def test_without_the_extension_the_pinned_image_is_used(tmp_path):
    assert _reader_image(kc.load(_kubeconfig(tmp_path, None))) == READER_IMAGE


@pytest.mark.parametrize("extension, says", [
    ({"server": "img"}, "unknown role 'server'"),
    ({"reader": "a b"}, "not an image reference"),
    ({"reader": "x\ny"}, "not an image reference"),
    ({"reader": 3}, "not an image reference"),
    (["reader"], "not a mapping"),
])  # fmt: skip
def test_a_bad_extension_is_refused_naming_the_context(tmp_path, extension, says):
    with pytest.raises(kc.KubeconfigError, match=says) as raised:
        kc.load(_kubeconfig(tmp_path, [{"name": HELPER_IMAGES_EXTENSION, "extension": extension}]))
    assert "context 'x'" in str(raised.value)


def test_cw_cluster_up_writes_the_images_only_with_a_real_node_and_always_says_the_gpus_are_simulated(tmp_path):
    for name in ("ca", "cert", "key"):
        (tmp_path / name).write_bytes(b"pem")
    path = tmp_path / "kubeconfig"
    merge_user_kubeconfig(path, "https://172.30.250.1:1", tmp_path / "ca", tmp_path / "cert", tmp_path / "key",
                          helper_image="cw.local/cw-runtime:py311-abc")  # fmt: skip
    context = yaml.safe_load(path.read_text())["contexts"][0]["context"]
    simulated = {"name": SIMULATED_GPUS_EXTENSION, "extension": True}
    assert context["extensions"] == [simulated, {"name": HELPER_IMAGES_EXTENSION, "extension": {"reader": "cw.local/cw-runtime:py311-abc"}}]
    assert kc.load(path).simulated_gpus and dict(kc.load(path).helper_images) == {"reader": "cw.local/cw-runtime:py311-abc"}
    merge_user_kubeconfig(path, "https://127.0.0.1:1", tmp_path / "ca", tmp_path / "cert", tmp_path / "key")
    assert yaml.safe_load(path.read_text())["contexts"][0]["context"]["extensions"] == [simulated]


@pytest.mark.parametrize("value", ["true", 1, None, {"a": 1}])
def test_a_simulated_gpus_extension_that_is_not_a_boolean_is_refused(tmp_path, value):
    with pytest.raises(kc.KubeconfigError, match="not true or false"):
        kc.load(_kubeconfig(tmp_path, [{"name": SIMULATED_GPUS_EXTENSION, "extension": value}]))


def test_a_context_without_the_extension_has_real_gpus(tmp_path):
    assert kc.load(_kubeconfig(tmp_path, [])).simulated_gpus is False
