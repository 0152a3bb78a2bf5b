"""A run with its own code against a real API server: the packed folder is stored in the run's
ConfigMap as the API server keeps it (binaryData), unpacks to the same files, and the trainer
pod mounts the emptyDir it is put in; a folder too large to ship creates nothing."""

from __future__ import annotations

import os

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw, write_config
from test_estimate_refusal import everything

from cw_cli.runtime import cw_code


def _project(root):
    (root / "proj" / "src" / "mine").mkdir(parents=True)
    (root / "proj" / "train.py").write_text("import mine\n")
    (root / "proj" / "src" / "mine" / "__init__.py").write_text("VALUE = 'packed'\n")
    return root / "proj"


def test_a_code_folder_reaches_the_cluster_and_unpacks_to_the_same_files(kube_api, namespace, cw_env, tmp_path):
    _project(tmp_path)
    config = write_config(tmp_path, {**SFT_CONFIG, "code": "proj", "script": "train.py"})
    result = run_cw(cw_env, "trl", "sft", str(config), "--name", "own-code", "-n", namespace)
    assert result.returncode == 0, result.stderr
    stored = client.CoreV1Api(kube_api).read_namespaced_config_map("own-code-config", namespace)
    archive = tmp_path / "stored.tar.gz"
    import base64

    archive.write_bytes(base64.b64decode(stored.binary_data["cw_code.tar.gz"]))
    dest = tmp_path / "unpacked"
    assert cw_code.main(["--dest", str(dest), "--archive", str(archive)]) == 0
    assert (dest / "src" / "mine" / "__init__.py").read_text() == "VALUE = 'packed'\n"
    pod = client.BatchV1Api(kube_api).read_namespaced_job("own-code-trainer", namespace).spec.template.spec
    trainer = pod.containers[0]
    assert any(m.mount_path == "/cw-code" for m in trainer.volume_mounts)
    assert any(v.name == "code" and v.empty_dir is not None for v in pod.volumes)
    assert trainer.command[-3:] == ["/cw-code/train.py", "--config", "/etc/cw/config.yaml"]


def test_a_folder_too_large_to_ship_creates_nothing(kube_api, namespace, cw_env, tmp_path):
    (_project(tmp_path) / "blob.bin").write_bytes(os.urandom(3 * 2**20))
    config = write_config(tmp_path, {**SFT_CONFIG, "code": "proj"})
    result = run_cw(cw_env, "trl", "sft", str(config), "--name", "too-much-code", "-n", namespace)
    assert result.returncode == 2, result.stderr
    assert "too large to ship with the run" in result.stderr and "git" in result.stderr
    assert everything(kube_api, namespace) == []
