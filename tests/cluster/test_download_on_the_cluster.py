"""`cw download RUN DEST` through the real API server (kwok routes the reader pod's exec to a local
process whose folder stands in for the volume): files arrive whole and verified, an interrupted
download goes on where it stopped, a corrupt local file is fetched again, a checkpoint still
being written and a destination holding other files are refused, a deleted volume is named."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from kubernetes import client
from test_artifacts_on_the_cluster import KEPT, _route_exec, _volume
from test_cw_end_to_end import create_bound_volumes, run_cw, write_config


def _launch(api: client.ApiClient, namespace: str, env: dict[str, str], tmp_path: Path) -> Path:
    create_bound_volumes(api, namespace, "ckpts")
    launched = run_cw(env, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "arts", "-n", namespace, "--wait",
                      timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    _volume(tmp_path / "volume")
    big = tmp_path / "volume" / "arts" / "outputs" / "sft" / "checkpoint-20" / "big.bin"
    big.write_bytes(os.urandom(3 * 2**20 + 17))  # several exec chunks
    _route_exec(api, namespace, "arts-reader", tmp_path / "volume")
    return big


def test_a_checkpoint_arrives_verified_and_an_interrupted_download_goes_on(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    big = _launch(kube_api, namespace, launcher, tmp_path)
    dest = tmp_path / "here"
    done = run_cw(cw_env, "download", "arts", str(dest), "--checkpoint", "latest", "-n", namespace, timeout=180)
    assert done.returncode == 0, done.stderr
    assert (dest / "big.bin").read_bytes() == big.read_bytes()
    assert {p.name for p in dest.iterdir()} == {"big.bin", "model.safetensors", "trainer_state.json", ".cw-download.json"}
    assert "verified (SHA-256)" in done.stderr

    # Interrupted: half of big.bin arrived, model.safetensors is corrupt. The same call mends both.
    (dest / "big.bin").unlink()
    (dest / "big.bin.partial").write_bytes(big.read_bytes()[: 2**20])
    (dest / "model.safetensors").write_bytes(b"\1" * 1000)
    again = run_cw(cw_env, "download", "arts", str(dest), "--checkpoint", "latest", "-n", namespace, timeout=180)
    assert again.returncode == 0, again.stderr
    assert "already there" in again.stderr
    for name in ("big.bin", "model.safetensors"):
        local, remote = dest / name, tmp_path / "volume" / "arts" / "outputs" / "sft" / "checkpoint-20" / name
        assert hashlib.sha256(local.read_bytes()).digest() == hashlib.sha256(remote.read_bytes()).digest()
    assert not list(dest.glob("*.partial"))


def test_what_cannot_be_downloaded_is_refused_and_writes_nothing(kube_api, namespace, as_documented_roles, tmp_path):
    # As a user bound to the shipped Roles only (docs/rbac-*.yaml): one launches, one uses the model.
    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    _launch(kube_api, namespace, launcher, tmp_path)
    other = tmp_path / "taken"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    cases = [
        (["arts", str(tmp_path / "a"), "--checkpoint", "30"], 2, "is being written"),
        (["arts", str(tmp_path / "b"), "--checkpoint", "99"], 2, "has no 99 to download; there: checkpoint 10, checkpoint 20, final, export:final-merged"),
        (["arts", str(other)], 5, "holds other files"),
        (["nosuch", str(tmp_path / "c")], 4, "run 'nosuch' not found in namespace"),
    ]  # fmt: skip
    for args, code, message in cases:
        result = run_cw(cw_env, "download", *args, "-n", namespace, timeout=180)
        assert result.returncode == code and message in result.stderr, (args, result.stderr)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and (other / "mine.txt").read_text() == "keep"
    export = run_cw(cw_env, "download", "arts", str(tmp_path / "d"), "--checkpoint", "export:final-merged", "-n", namespace,
                    timeout=180)  # fmt: skip
    assert export.returncode == 0 and (tmp_path / "d" / "model.safetensors").stat().st_size == 3000

    client.CoreV1Api(kube_api).delete_namespaced_persistent_volume_claim("ckpts", namespace)
    gone = run_cw(cw_env, "download", "arts", str(tmp_path / "e"), "-n", namespace, timeout=180)
    assert gone.returncode == 4 and "checkpoint volume ckpts is being deleted" in gone.stderr, gone.stderr


def _bytes_in(folder: Path) -> int:
    """Bytes of the files in ``folder`` now (a .partial may be renamed between listing and stat)."""
    total = 0
    for path in folder.glob("*") if folder.exists() else []:
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


def _peak_rss_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def test_hundreds_of_mb_arrive_whole_at_flat_memory_and_sigterm_removes_the_reader(kube_api, namespace, as_documented_roles,
                                                                                    tmp_path):  # fmt: skip
    """A 320 MB checkpoint in two shards, as the documented Roles: SIGTERM in the middle exits 130
    and removes the reader pod; the same call again sends only what was missing, and every byte
    arrives; the client's memory stays far below the file's size all along."""
    import signal
    import subprocess
    import sys
    import time

    launcher, cw_env = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    _launch(kube_api, namespace, launcher, tmp_path)
    checkpoint = tmp_path / "volume" / "arts" / "outputs" / "sft" / "checkpoint-20"
    block = bytearray(os.urandom(1 << 22))
    digests = {}
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        digest = hashlib.sha256()
        with open(checkpoint / shard, "wb") as handle:
            for index in range(40):  # 160 MiB each, no two blocks alike
                block[:8] = index.to_bytes(8, "big")
                handle.write(block)
                digest.update(block)
        digests[shard] = digest.hexdigest()
    dest = tmp_path / "model"
    argv = [sys.executable, "-m", "cw_cli", "download", "arts", str(dest), "--checkpoint", "latest", "-n", namespace]
    first = subprocess.Popen(argv, env=cw_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, peak = time.monotonic() + 180, 0
    while _bytes_in(dest) < 60 * 2**20 and first.poll() is None:
        assert time.monotonic() < deadline, "the download did not start"
        peak = max(peak, _peak_rss_kib(first.pid))
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 130, stderr
    assert "Traceback" not in stderr
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=reader")
    assert all(p.metadata.deletion_timestamp is not None for p in pods.items), "the reader pod was left behind"
    there = sum(p.stat().st_size for p in dest.iterdir() if p.name != ".cw-download.json")
    assert there >= 60 * 2**20

    second = subprocess.Popen(argv, env=cw_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while second.poll() is None:
        peak = max(peak, _peak_rss_kib(second.pid))
        time.sleep(0.02)
    stderr = second.stderr.read() if second.stderr else ""
    assert second.returncode == 0, stderr
    resumed = re.search(r"([0-9.]+) MiB of them already there", stderr)
    assert resumed and float(resumed.group(1)) * 2**20 >= there - 2**20, stderr  # nothing that was there was sent again
    for shard, expected in digests.items():
        got = hashlib.sha256()
        with open(dest / shard, "rb") as handle:
            for piece in iter(lambda: handle.read(1 << 22), b""):
                got.update(piece)
        assert got.hexdigest() == expected, shard
    assert 0 < peak < 150 * 1024, f"peak RSS {peak} KiB for a 320 MiB download"  # the bound; a whole shard is 160 MiB
