"""`cw metrics` through the API server: runs launched with cw on the test cluster, whose fake
trainer pods serve the recorded output of real TRL runs (tests/fixtures/metrics) through kwok's
`Logs` resource. Expected series come from the same runs' trainer_state.json, not from the
parser under test."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes import client
from test_cw_end_to_end import SFT_CONFIG, run_cw, write_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
SFT_LOG = FIXTURES / "trl-1.16.0-transformers-5.23.0-sft.log"
GRPO_LOG = FIXTURES / "trl-1.16.0-transformers-5.23.0-grpo.log"
C0, C1 = (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)  # matplotlib's first two line colours


def cri_log(recorded: Path, target: Path) -> Path:
    """The recorded output as a CRI container log file (what the kubelet, and kwok, serve)."""
    start = time.time()
    lines = recorded.read_bytes().decode().split("\n")
    with open(target, "w", encoding="utf-8") as fh:
        for i, line in enumerate(lines):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start)) + f".{i:09d}Z"
            stream = "stderr" if "\r" in line and "{'" not in line else "stdout"
            fh.write(f"{stamp} {stream} F {line}\n")
    return target


def expected_series(recorded: Path, metric: str) -> list[tuple[int, float]]:
    """The metric of the recorded run's trainer_state.json, as its log prints it (4 digits)."""
    history = json.loads(recorded.with_suffix(".trainer_state.json").read_text())["log_history"]
    return [(e["step"], float(f"{e[metric]:.4g}")) for e in history if metric in e and "train_runtime" not in e]


def launch_with_log(kube_api, namespace: str, cw_env: dict, tmp_path: Path, name: str, recorded: Path, wait_for) -> str:
    """Launch an SFT run with cw, then point its trainer container's log at ``recorded``."""
    config = write_config(tmp_path, SFT_CONFIG, f"{name}.yaml")
    done = run_cw(cw_env, "trl", "sft", str(config), "--gpu", "1", "--name", name, "-n", namespace)
    assert done.returncode == 0, done.stderr
    core = client.CoreV1Api(kube_api)
    selector = f"cw-cli.dev/run={name},app.kubernetes.io/component=trainer"
    pod = wait_for(lambda: next(iter(core.list_namespaced_pod(namespace, label_selector=selector).items), None),
                   60, what=f"trainer pod of {name}")
    log = cri_log(recorded, tmp_path / f"{name}.log")
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
        "metadata": {"name": pod.metadata.name, "namespace": namespace},
        "spec": {"logs": [{"containers": ["trainer"], "logsFile": str(log), "follow": False}]},
    })
    wait_for(lambda: "{'loss'" in core.read_namespaced_pod_log(pod.metadata.name, namespace, container="trainer"),
             60, what=f"the recorded log served for {name}")
    return pod.metadata.name


def colour_pixels(png: Path, colour: tuple[int, int, int]) -> int:
    from matplotlib.image import imread

    image = (imread(png)[:, :, :3] * 255).round()
    return int(((abs(image - colour) <= 8).all(axis=2)).sum())


def test_metrics_of_runs_read_from_their_trainer_logs(kube_cluster, kube_api, namespace, cw_env, tmp_path, wait_for):
    if not kube_cluster.local:
        pytest.skip("needs kwok on this machine to serve the recorded log file")
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    launch_with_log(kube_api, namespace, cw_env, tmp_path, "m-sft", SFT_LOG, wait_for)
    launch_with_log(kube_api, namespace, cw_env, tmp_path, "m-grpo", GRPO_LOG, wait_for)

    # The raw series, through the API server.
    done = run_cw(cw_env, "metrics", "m-sft", "-o", "json", "-n", namespace)
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    assert run["run"] == "m-sft" and run["steps"] == "counted" and "rank 0" in run["source"]
    for metric in ("loss", "grad_norm", "learning_rate", "mean_token_accuracy"):
        assert [(p["step"], p["value"]) for p in run["series"][metric]] == expected_series(SFT_LOG, metric), metric
    assert len(run["series"]["loss"]) == 6

    # The table and chart: GRPO charts the reward by default, and its latest value is in the table.
    shown = run_cw({**cw_env, "COLUMNS": "120", "NO_COLOR": "1"}, "metrics", "m-grpo", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    last_reward = expected_series(GRPO_LOG, "reward")[-1][1]
    assert f"{last_reward:.4g}" in shown.stdout and "\nreward\n" in shown.stdout and "┤" in shown.stdout

    # Two runs side by side: one PNG, a panel per metric, a line (colour) per run.
    png = tmp_path / "two.png"
    both = run_cw(cw_env, "metrics", "m-sft", "m-grpo", "--metric", "loss", "--metric", "grad_norm",
                  "--png", str(png), "-n", namespace)
    assert both.returncode == 0, both.stderr
    assert png.stat().st_size > 10_000
    image = imread(png)
    assert image.shape[:2] == (580, 800), image.shape  # 8 x (2 panels x 2.6 + 0.6) inches at 100 dpi
    assert image[:, :, :3].std() > 0.05, "blank image"
    assert colour_pixels(png, C0) > 200 and colour_pixels(png, C1) > 200, "expected one line per run"

    one = tmp_path / "one.png"
    assert run_cw(cw_env, "metrics", "m-sft", "--png", str(one), "-n", namespace).returncode == 0
    assert colour_pixels(one, C0) > 200 and colour_pixels(one, C1) == 0, "one run, one line"

    # --follow reads the same records until the pod has ended.
    followed = run_cw(cw_env, "metrics", "m-sft", "-f", "-o", "json", "-n", namespace, timeout=120)
    assert followed.returncode == 0, followed.stderr
    assert json.loads(followed.stdout)["runs"][0]["series"]["loss"] == run["series"]["loss"]

    missing = run_cw(cw_env, "metrics", "m-sft", "--rank", "1", "-n", namespace)
    assert missing.returncode == 4 and "rank 1" in missing.stderr
