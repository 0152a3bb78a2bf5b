"""`cw artifacts RUN` through the real API server: a reader pod mounts the run's claim read-only,
cw execs the lister in it (kwok routes the exec to a local process whose folder stands in for the
volume) and deletes the pod; the listing has each checkpoint's step, completeness and metrics,
the final model and the exports."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, create_bound_volumes, run_cw, write_config

KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "output_dir": "outputs/sft", "gpu": 1}


def _volume(root: Path) -> None:
    """What `trl sft` leaves in /checkpoints/arts/outputs/sft, with checkpoint-30 still being written."""
    run_dir = root / "arts" / "outputs" / "sft"
    for step, loss in ((10, 2.5), (20, 1.25)):
        checkpoint = run_dir / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.safetensors").write_bytes(b"\0" * 1000)
        (checkpoint / "trainer_state.json").write_text(json.dumps(
            {"global_step": step, "log_history": [{"step": step, "loss": loss, "epoch": 0.5}]}))  # fmt: skip
    (run_dir / "checkpoint-30").mkdir()
    (run_dir / "checkpoint-30" / "model.safetensors").write_bytes(b"\0" * 10)
    (run_dir / "model.safetensors").write_bytes(b"\0" * 2000)
    (run_dir / "exported" / "final-merged").mkdir(parents=True)
    (run_dir / "exported" / "final-merged" / "model.safetensors").write_bytes(b"\0" * 3000)
    (run_dir / "exported" / ".final.partial-7").mkdir()


def _route_exec(api: client.ApiClient, namespace: str, pod: str, folder: Path) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "kwok.x-k8s.io", "v1alpha1", namespace, "execs",
        {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec", "metadata": {"name": pod},
         "spec": {"execs": [{"local": {"workDir": str(folder)}}]}},
    )  # fmt: skip


def test_artifacts_lists_checkpoints_the_final_model_and_exports(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "arts", "-n", namespace,
                      "--wait", timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    _volume(tmp_path / "volume")
    _route_exec(kube_api, namespace, "arts-reader", tmp_path / "volume")
    listed = run_cw(cw_env, "artifacts", "arts", "-o", "json", "-n", namespace, timeout=180)
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert document["run_dir"] == "/checkpoints/arts/outputs/sft"
    rows = [(a["kind"], a["step"], a["complete"], a["size"], a["metrics"].get("loss")) for a in document["artifacts"]]
    assert rows == [
        ("checkpoint", 10, True, 1000 + len(json.dumps({"global_step": 10, "log_history": [
            {"step": 10, "loss": 2.5, "epoch": 0.5}]})), 2.5),
        ("checkpoint", 20, True, 1000 + len(json.dumps({"global_step": 20, "log_history": [
            {"step": 20, "loss": 1.25, "epoch": 0.5}]})), 1.25),
        ("checkpoint", 30, False, 10, None),
        ("final", 20, True, 2000, 1.25),
        ("export", None, True, 3000, None),
    ]  # fmt: skip
    # The reader pod is deleted (gone, or going: deletion is asynchronous).
    readers = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=reader")
    assert all(pod.metadata.deletion_timestamp is not None for pod in readers.items)
    table = run_cw(cw_env, "artifacts", "arts", "-n", namespace, timeout=180)
    assert table.returncode == 0, table.stderr
    assert "checkpoint" in table.stdout and "loss 1.25" in table.stdout and "final" in table.stdout


def test_a_run_without_a_volume_has_no_artifacts(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, SFT_CONFIG)), "--name", "novol", "-n", namespace)
    assert launched.returncode == 0, launched.stderr
    result = run_cw(cw_env, "artifacts", "novol", "-n", namespace)
    assert result.returncode == 2 and "kept its outputs on no volume" in result.stderr
    assert run_cw(cw_env, "artifacts", "nosuch", "-n", namespace).returncode == 4
