"""Launches that race, get signalled or die never harm another run and never leave half a run.

Every test drives the real CLI in subprocesses against the real API server. Racing launches are
released together: each child imports cw first, then blocks on its standard input until the
parent writes to all of them at once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import yaml
from kubernetes import client
from test_cw_end_to_end import GRPO_CONFIG, SFT_CONFIG, reject_config_maps_containing, run_cw, run_objects, write_config

#: A child that has already imported everything a launch needs, waiting for "go" on stdin.
_RACER = textwrap.dedent(
    """
    import sys
    import cw_cli.cli.app, cw_cli.config.loader, cw_cli.render.plan, cw_cli.k8s.submit, cw_cli.client.connection
    import kubernetes.client, kubernetes.config
    args = sys.argv[1:]
    print("ready", flush=True)
    sys.stdin.readline()
    sys.argv = ["cw", *args]
    cw_cli.cli.app.main()
    """
)
#: Trainer pods of these tests run this long under KWOK.
SLOW_TRAINER = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "30s"}}


def _race(env: dict[str, str], *launches: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Start one racer per argument list, release them all at the same instant, collect their results."""
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, *args], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for args in launches
    ]
    for racer in racers:
        assert racer.stdout.readline().strip() == "ready", racer.stderr.read()
    for racer in racers:
        racer.stdin.write("go\n")
        racer.stdin.flush()
    results = []
    for racer, args in zip(racers, launches):
        stdout, stderr = racer.communicate(timeout=180)
        results.append(subprocess.CompletedProcess(args, racer.returncode, stdout, stderr))
    return results


#: Pairs of launches per test, all released together (each pair races for its own run name).
PAIRS = 12


def _mounted_learning_rate(api: client.ApiClient, namespace: str, run: str) -> float:
    config_map = client.CoreV1Api(api).read_namespaced_config_map(f"{run}-config", namespace)
    return yaml.safe_load(config_map.data["config.yaml"])["learning_rate"]


def test_racing_launches_of_one_name_leave_exactly_one_whole_run(kube_api, namespace, cw_env, tmp_path):
    configs = [
        write_config(tmp_path, {**SFT_CONFIG, "learning_rate": rate}, f"lr{index}.yaml")
        for index, rate in enumerate((1.0e-5, 3.0e-5))
    ]
    runs = [f"race-{pair}" for pair in range(PAIRS)]
    results = _race(cw_env, *[["trl", "sft", str(c), "--name", run, "-n", namespace] for run in runs for c in configs])
    for index, run in enumerate(runs):
        pair = results[2 * index : 2 * index + 2]
        codes = sorted(r.returncode for r in pair)
        assert codes == [0, 5], [(r.returncode, r.stderr[-400:]) for r in pair]
        winner = next(i for i, r in enumerate(pair) if r.returncode == 0)
        # The winner's own config is the one mounted: the loser changed nothing.
        assert _mounted_learning_rate(kube_api, namespace, run) == (1.0e-5, 3.0e-5)[winner]
        assert f"Job/{run}-trainer" in run_objects(kube_api, namespace, run)


def test_a_rejected_launch_never_removes_a_racing_valid_one(kube_api, namespace, cw_env, tmp_path, wait_for):
    marker = "cw-test-refuse-this-config"
    reject_config_maps_containing(kube_api, namespace, marker, wait_for)
    good = write_config(tmp_path, SFT_CONFIG, "good.yaml")
    bad = write_config(tmp_path, {**SFT_CONFIG, "dataset_text_field": marker}, "bad.yaml")
    runs = [f"mixed-{pair}" for pair in range(PAIRS)]
    orders = [[good, bad] if pair % 2 else [bad, good] for pair in range(PAIRS)]
    results = _race(cw_env, *[["trl", "sft", str(c), "--name", run, "-n", namespace] for run, o in zip(runs, orders) for c in o])
    survivors = 0
    for index, (run, ordered) in enumerate(zip(runs, orders)):
        pair = results[2 * index : 2 * index + 2]
        valid, refused = pair[ordered.index(good)], pair[ordered.index(bad)]
        assert refused.returncode in (5, 6), refused.stderr
        assert valid.returncode in (0, 5), valid.stderr
        left = run_objects(kube_api, namespace, run)
        if valid.returncode == 0:
            # "started" means started: the other launch's rollback must not have removed it.
            survivors += 1
            assert f"Job/{run}-trainer" in left and f"ConfigMap/{run}-config" in left, (left, refused.stderr)
            assert marker not in str(client.CoreV1Api(kube_api).read_namespaced_config_map(f"{run}-config", namespace).data)
        else:
            assert not [o for o in left if not o.startswith("Pod/")], left  # the refused one left nothing
    assert survivors >= 1


def _start_cw(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cw_cli", *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_as_a_terminal_sends_it,
    )


def _ctrl_c_as_a_terminal_sends_it() -> None:
    """In the child before exec: Ctrl-C's default action, even where the test runner was started with
    it ignored (a background job of a non-interactive shell is); Python then installs its handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read_until(process: subprocess.Popen[str], needle: str, timeout: float = 60) -> str:
    """stderr of ``process`` up to the first line containing ``needle``."""
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"never printed {needle!r}:\n{seen}")


def _unready_grpo(tmp_path: Path) -> Path:
    """A GRPO run whose vLLM server can never be scheduled (16 GPUs on 8-GPU nodes)."""
    services = {**GRPO_CONFIG["services"], "server": {"gpu": 16, "cpu": "4", "memory": "16Gi"}}
    return write_config(tmp_path, {**GRPO_CONFIG, "services": services})


def test_sigterm_or_sighup_while_waiting_for_servers_removes_the_run(kube_api, namespace, cw_env, tmp_path):
    config = _unready_grpo(tmp_path)
    for number, run in ((signal.SIGTERM, "term"), (signal.SIGHUP, "hup")):
        process = _start_cw(cw_env, "trl", "grpo", str(config), "--name", run, "-n", namespace)
        _read_until(process, "to be Ready")
        assert run_objects(kube_api, namespace, run)
        process.send_signal(number)
        _, rest = process.communicate(timeout=60)
        assert process.returncode == 130, rest
        assert "interrupted; removed what it had created" in rest
        assert [o for o in run_objects(kube_api, namespace, run) if not o.startswith("Pod/")] == []


def test_a_run_whose_launcher_dies_goes_on_without_it(kube_api, namespace, cw_env, tmp_path, wait_for):
    config = write_config(tmp_path, GRPO_CONFIG)
    process = _start_cw(cw_env, "trl", "grpo", str(config), "--name", "orphan", "-n", namespace)
    _read_until(process, "to be Ready")
    process.kill()  # no handler runs: the launcher is simply gone
    process.communicate(timeout=30)
    batch = client.BatchV1Api(kube_api)
    assert batch.read_namespaced_job("orphan-trainer", namespace).spec.suspend is False
    wait_for(lambda: batch.read_namespaced_job("orphan-trainer", namespace).status.succeeded == 1, 90, 1,
             what="the orphaned run's trainer to finish")  # fmt: skip


def test_ctrl_c_during_wait_leaves_the_run_going_and_says_so(kube_api, namespace, cw_env, tmp_path):
    config = write_config(tmp_path, {**SFT_CONFIG, **SLOW_TRAINER})
    process = _start_cw(cw_env, "trl", "sft", str(config), "--name", "watched", "-n", namespace, "--wait")
    _read_until(process, "next: cw status")
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 130, rest
    assert "goes on in the cluster" in rest
    job = client.BatchV1Api(kube_api).read_namespaced_job("watched-trainer", namespace)
    assert job.spec.suspend is False and not job.status.succeeded


def test_a_half_made_run_is_listed_and_removed_by_one_delete(kube_api, namespace, cw_env, tmp_path):
    # What a launcher killed between creating the Job and releasing it leaves: a suspended Job
    # (`cw list` calls it Half-made after a minute: see tests/unit/test_run_state.py).
    config = write_config(tmp_path, SFT_CONFIG)
    rendered = run_cw(cw_env, "trl", "sft", str(config), "--name", "halfmade", "--dry-run")
    job = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Job")
    job["spec"]["suspend"] = True
    client.BatchV1Api(kube_api).create_namespaced_job(namespace, job)
    listed = run_cw(cw_env, "list", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    assert "halfmade" in listed.stdout and "Starting" in listed.stdout
    deleted = run_cw(cw_env, "delete", "halfmade", "-n", namespace)
    assert deleted.returncode == 0, deleted.stderr
    assert [o for o in run_objects(kube_api, namespace, "halfmade") if not o.startswith("Pod/")] == []


def test_pods_refused_by_pod_security_fail_the_launch_at_once(kube_api, namespace, cw_env, tmp_path):
    client.CoreV1Api(kube_api).patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    config = write_config(tmp_path, GRPO_CONFIG)
    started = time.monotonic()
    result = run_cw(cw_env, "trl", "grpo", str(config), "--name", "refused", "-n", namespace, "--timeout", "600")
    assert result.returncode == 6, result.stderr
    assert "refuses to create the pods" in result.stderr and "PodSecurity" in result.stderr
    assert time.monotonic() - started < 300  # far from the 600 s timeout: it did not wait it out
    assert [o for o in run_objects(kube_api, namespace, "refused") if not o.startswith("Pod/")] == []
