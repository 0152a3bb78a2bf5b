"""`cw download` against `kubectl cp` of the same files, through the test cluster's API server.

Usage:
    python benchmarks/download.py --kubectl PATH [--sizes 512M,2G,20G] [--shard 5G] [--resume-at 0.5]
        [--kubeconfig FILE --context cw-test] [--work DIR]

For each size, a checkpoint of that many bytes (random data, in shards of at most ``--shard``, as
Hugging Face saves large models) is written to a local folder that stands in for the volume: KWOK
routes the reader pod's exec there, so every byte goes from a local process through kwok's
kubelet server and the real kube-apiserver to the client, the path a real cluster takes. Rows:

  cw download RUN DEST --checkpoint latest   (cw, from this interpreter)
  kubectl cp NS/POD:FOLDER DEST              (kubectl execs `tar cf -` in a pod routed to the same folder)
  cw download, killed (SIGKILL) at --resume-at of the bytes, then run again: the second call's
  bytes sent and time (it must send only what was missing)

Each row gives seconds, MB/s (10^6 bytes) and the peak RSS of the client process (its
VmHWM), and every downloaded file is compared with its source by SHA-256. Nothing is
asserted: the figures go in the issue notes. Needs the test cluster (`cw cluster up`) and
kubectl built from the same Kubernetes modules:
`cd tools/k8s && go build -o ~/.cache/cw/bin/kubectl k8s.io/kubernetes/cmd/kubectl`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cw_cli.testcluster.volumes import volume_manifests  # noqa: E402

UNITS = {"K": 10**3, "M": 10**6, "G": 10**9}
RUN = "dl"
SOURCE_POD = "dl-source"
CHECKPOINT = f"{RUN}/outputs/checkpoint-10"


def parse_size(text: str) -> int:
    """``512M`` -> 512e6 bytes."""
    return int(float(text[:-1]) * UNITS[text[-1].upper()]) if text[-1].upper() in UNITS else int(text)


def write_checkpoint(volume: Path, size: int, shard: int) -> dict[str, str]:
    """Shards of random bytes (one random block, varied per block so no two blocks are equal) and
    a trainer_state.json; returns each file's SHA-256."""
    folder = volume / CHECKPOINT
    shutil.rmtree(volume / RUN, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text('{"global_step": 10, "log_history": []}')
    block = bytearray(os.urandom(1 << 24))
    hashes = {}
    left, index = size, 0
    while left > 0:
        name = f"model-{index + 1:05d}.safetensors"
        digest, part = hashlib.sha256(), min(shard, left)
        with open(folder / name, "wb") as handle:
            written = 0
            while written < part:
                block[:16] = secrets.token_bytes(16)
                piece = memoryview(block)[: min(len(block), part - written)]
                handle.write(piece)
                digest.update(piece)
                written += len(piece)
        hashes[name] = digest.hexdigest()
        left, index = left - part, index + 1
    hashes["trainer_state.json"] = hashlib.sha256((folder / "trainer_state.json").read_bytes()).hexdigest()
    return hashes


def check(dest: Path, hashes: dict[str, str]) -> bool:
    """Whether every file arrived byte-identical."""
    for name, expected in hashes.items():
        digest = hashlib.sha256()
        with open(dest / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
        if digest.hexdigest() != expected:
            return False
    return True


def timed(argv: list[str], env: dict[str, str], kill_after_bytes: tuple[Path, int] | None = None) -> tuple[float, float, int]:
    """(seconds, peak RSS in MiB, exit status) of one client process; optionally SIGKILLed once
    ``kill_after_bytes[0]`` holds that many bytes.

    The peak is the process's own VmHWM, read from /proc every 20 ms until it exits: wait4's
    ru_maxrss also counts the memory of this (larger) Python between fork and exec.
    """
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        peak = max(peak, _high_water_kib(process.pid))
        if kill_after_bytes is not None and _bytes_in(kill_after_bytes[0]) >= kill_after_bytes[1]:
            process.send_signal(signal.SIGKILL)
            kill_after_bytes = None
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    if process.returncode not in (0, -signal.SIGKILL) and process.stderr is not None:
        sys.stderr.write(process.stderr.read().decode(errors="replace")[-2000:])
    return elapsed, peak / 1024, process.returncode


def _high_water_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def _bytes_in(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def setup(api: object, namespace: str, volume: Path, env: dict[str, str], context: str) -> None:
    """A finished run on a bound claim, and the exec of its reader (and of a plain pod for
    kubectl cp) routed to ``volume``."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    pv, pvc = volume_manifests(namespace, "ckpts")
    core.create_persistent_volume(pv)
    core.create_namespaced_persistent_volume_claim(namespace, pvc)
    config = volume / "run.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: trl-lib/Capybara\nmax_steps: 10\n"
                      "cpu: '1'\nmemory: 1Gi\ngpu: 1\ncheckpoint_volume: ckpts\noutput_dir: outputs\n")  # fmt: skip
    launched = subprocess.run([sys.executable, "-m", "cw_cli", "trl", "sft", str(config), "--name", RUN, "-n", namespace,
                               "--context", context, "--wait"],
                              env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    if launched.returncode != 0:
        raise SystemExit(f"launch failed: {launched.stderr}")
    custom = client.CustomObjectsApi(api)
    for pod in (f"{RUN}-reader", SOURCE_POD):
        custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "execs", {
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec", "metadata": {"name": pod},
            "spec": {"execs": [{"local": {"workDir": str(volume)}}]}})  # fmt: skip
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": SOURCE_POD},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1d"]}],
                 "nodeSelector": {"type": "kwok"},
                 "tolerations": [{"operator": "Exists"}]}})  # fmt: skip
    deadline = time.monotonic() + 120
    while core.read_namespaced_pod(SOURCE_POD, namespace).status.phase != "Running":
        if time.monotonic() > deadline:
            raise SystemExit(f"pod {SOURCE_POD} is not Running")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubectl", required=True)
    parser.add_argument("--sizes", default="512M,2G")
    parser.add_argument("--shard", default="5G", help="largest file of a checkpoint")
    parser.add_argument("--resume-at", type=float, default=0.5, help="fraction of the bytes at which cw is killed")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or str(Path.home() / ".kube/config"))
    parser.add_argument("--context", default="cw-test")
    parser.add_argument("--work", default=None, help="folder for the volume and the copies (default: a temp folder)")
    args = parser.parse_args()

    from kubernetes import client, config

    api = config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
    namespace = f"bench-dl-{secrets.token_hex(3)}"
    work = Path(args.work or tempfile.mkdtemp(prefix="cw-dl-bench-"))
    volume = work / "volume"
    volume.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KUBECONFIG": args.kubeconfig, "PYTHONPATH": str(ROOT)}
    cw = [sys.executable, "-m", "cw_cli"]
    rows = []
    try:
        setup(api, namespace, volume, env, args.context)
        for text in args.sizes.split(","):
            size = parse_size(text)
            hashes = write_checkpoint(volume, size, parse_size(args.shard))
            dest = work / "cw"
            shutil.rmtree(dest, ignore_errors=True)
            seconds, rss, code = timed([*cw, "download", RUN, str(dest), "--checkpoint", "latest", "-n", namespace,
                                        "--context", args.context], env)  # fmt: skip
            rows.append(("cw download", size, seconds, rss, code == 0 and check(dest, hashes)))
            shutil.rmtree(dest, ignore_errors=True)
            seconds, rss, code = timed([args.kubectl, "--kubeconfig", args.kubeconfig, "--context", args.context, "cp",
                                        f"{namespace}/{SOURCE_POD}:{CHECKPOINT}", str(dest)], env)  # fmt: skip
            rows.append(("kubectl cp", size, seconds, rss, code == 0 and check(dest, hashes)))
            shutil.rmtree(dest, ignore_errors=True)
            argv = [*cw, "download", RUN, str(dest), "--checkpoint", "latest", "-n", namespace, "--context", args.context]
            first, _, _ = timed(argv, env, kill_after_bytes=(dest, int(size * args.resume_at)))
            there = _bytes_in(dest)
            seconds, rss, code = timed(argv, env)
            rows.append((f"cw, killed at {there / 1e6:.0f} MB ({first:.1f} s), then again", size - there, seconds, rss,
                         code == 0 and check(dest, hashes)))  # fmt: skip
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(volume / RUN, ignore_errors=True)
    finally:
        client.CoreV1Api(api).delete_namespace(namespace)
        for volume_name in [v.metadata.name for v in client.CoreV1Api(api).list_persistent_volume().items]:
            if namespace in volume_name:
                client.CoreV1Api(api).delete_persistent_volume(volume_name)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print("| client | bytes | seconds | MB/s | peak RSS (MiB) | byte-identical |")
    print("|---|---|---|---|---|---|")
    for label, size, seconds, rss, same in rows:
        print(f"| {label} | {size / 1e6:.0f} MB | {seconds:.1f} | {size / 1e6 / seconds:.0f} | {rss:.0f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
