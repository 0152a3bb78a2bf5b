"""A hostile probe of the after-training commands (artifacts, download, export, try, serve) on
the test cluster, as a new user would meet them: each case runs the real CLI once and is
classed as `ok` (the documented exit code, one error line, no traceback, nothing left on the
cluster), `traceback`, `hang` (no end within 120 s), `wrong-exit` or `left-objects`. Not a test
(pytest does not collect it): a count for the issue notes, run by hand:

    cw cluster up && python tests/probes/after_training.py

Prints one line per case and the counts per class.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
sys.path.insert(0, str(ROOT))


def main() -> None:
    from kubernetes import client, config
    from test_artifacts_on_the_cluster import KEPT, _route_exec, _volume
    from test_cw_end_to_end import create_bound_volumes, write_config

    api = config.new_client_from_config(context="cw-test")
    namespace = f"probe-{secrets.token_hex(3)}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    work = Path(tempfile.mkdtemp(prefix="cw-probe-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cw = [sys.executable, "-m", "cw_cli"]
    create_bound_volumes(api, namespace, "ckpts")
    subprocess.run([*cw, "trl", "sft", str(write_config(work, KEPT)), "--name", "arts", "-n", namespace, "--wait"],
                   env=env, capture_output=True, timeout=300, check=True)  # fmt: skip
    _volume(work / "volume")
    run_dir = work / "volume" / "arts" / "outputs" / "sft"
    (run_dir / "checkpoint-40").mkdir()
    (run_dir / "checkpoint-40" / "trainer_state.json").write_text("[" * 50_000)  # malformed
    (run_dir / "checkpoint-50").mkdir()
    (run_dir / "checkpoint-50" / "trainer_state.json").write_text(json.dumps({"global_step": "x", "log_history": 7}))
    os.mkfifo(run_dir / "checkpoint-20" / "pipe")
    os.symlink(run_dir, run_dir / "checkpoint-20" / "loop")
    _route_exec(api, namespace, "arts-reader", work / "volume")
    taken = socket.create_server(("127.0.0.1", 0))
    (work / "file").write_text("x")
    cases: list[tuple[str, list[str], int]] = [
        ("artifacts of an unknown run", ["artifacts", "nosuch"], 4),
        ("artifacts with malformed trainer states", ["artifacts", "arts", "-o", "json"], 0),
        ("artifacts, bad name", ["artifacts", "Bad_Name"], 2),
        ("download of an unknown run", ["download", "nosuch", str(work / "d1")], 4),
        ("download into /proc", ["download", "arts", "/proc/cw-model"], 2),
        ("download into /sys", ["download", "arts", "/sys/kernel/x"], 2),
        ("download below a file", ["download", "arts", str(work / "file" / "x")], 2),
        ("download of a checkpoint with a FIFO and a link loop", ["download", "arts", str(work / "d2"), "--checkpoint", "20"], 0),
        ("download of a malformed checkpoint", ["download", "arts", str(work / "d3"), "--checkpoint", "40"], 2),
        ("download, checkpoint ../x", ["download", "arts", str(work / "d4"), "--checkpoint", "../x"], 2),
        ("download, checkpoint 1e3", ["download", "arts", str(work / "d5"), "--checkpoint", "1e3"], 2),
        ("download, checkpoint 99", ["download", "arts", str(work / "d6"), "--checkpoint", "99"], 2),
        ("download, export:../../etc", ["download", "arts", str(work / "d7"), "--checkpoint", "export:../../etc"], 2),
        ("download into a folder of other files", ["download", "arts", str(work / "volume")], 5),
        ("try of an unknown run", ["try", "nosuch", "hi"], 4),
        ("try, empty question", ["try", "arts", "   "], 2),
        ("try, checkpoint 99", ["try", "arts", "hi", "--checkpoint", "99"], 2),
        ("try, max-tokens 0", ["try", "arts", "hi", "--max-tokens", "0"], 2),
        ("try, timeout -1", ["try", "arts", "hi", "--timeout", "-1"], 2),
        ("serve of an unknown run", ["serve", "nosuch"], 4),
        ("serve, ttl 1e14h", ["serve", "arts", "--ttl", "1e14h"], 2),
        ("serve, ttl -5m", ["serve", "arts", "--ttl", "-5m"], 2),
        ("serve, gpu -1", ["serve", "arts", "--gpu", "-1"], 2),
        ("serve, forward on a taken port", ["serve", "arts", "--gpu", "0", "--forward", str(taken.getsockname()[1])], 2),
        ("serve, forward port 70000", ["serve", "arts", "--forward", "70000"], 2),
        ("export of an unknown run", ["export", "nosuch"], 4),
        ("export, hub id org/name--x", ["export", "arts", "--push-to-hub", "org/name--x"], 2),
        ("export, hub id org/model.git", ["export", "arts", "--push-to-hub", "org/model.git"], 2),
        ("export, merge of a full model", ["export", "arts", "--merge", "--checkpoint", "20"], 2),
        ("export, timeout -5", ["export", "arts", "--timeout", "-5", "--wait"], 2),
        ("export, to ftp://x", ["export", "arts", "--to", "ftp://x/y"], 2),
        ("export, to s3:// without bucket", ["export", "arts", "--to", "s3://"], 2),
        ("export, checkpoint 30 being written", ["export", "arts", "--checkpoint", "30"], 2),
    ]
    counts: dict[str, int] = {}
    for label, args, code in cases:
        before = _objects(api, namespace)
        try:
            done = subprocess.run([*cw, *args, "-n", namespace], env=env, capture_output=True, text=True, timeout=120,
                                  stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired:
            verdict = "hang"
        else:
            if "Traceback" in done.stderr:
                verdict = "traceback"
            elif done.returncode != code:
                verdict = f"wrong-exit ({done.returncode}, expected {code}: {done.stderr.strip()[-160:]!r})"
            elif _objects(api, namespace) - before:
                verdict = f"left-objects {sorted(_objects(api, namespace) - before)}"
            else:
                verdict = "ok"
        print(f"{verdict:10} {label}")
        counts[verdict.split()[0]] = counts.get(verdict.split()[0], 0) + 1
    taken.close()
    client.CoreV1Api(api).delete_namespace(namespace)
    print(json.dumps(counts, sort_keys=True))


def _objects(api, namespace: str) -> set[str]:
    """Pods, Services and Jobs that are there and not being deleted."""
    from kubernetes import client

    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    found = {f"Pod/{p.metadata.name}" for p in core.list_namespaced_pod(namespace).items if not p.metadata.deletion_timestamp}
    found |= {f"Service/{s.metadata.name}" for s in core.list_namespaced_service(namespace).items}
    found |= {f"Job/{j.metadata.name}" for j in batch.list_namespaced_job(namespace).items if not j.metadata.deletion_timestamp}
    return found


if __name__ == "__main__":
    main()
