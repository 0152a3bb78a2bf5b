"""How long a 100-run sweep takes to reach the cluster (a tracked figure; never asserted in tests).

Usage: python benchmarks/sweep_submit.py [--runs 100] [--kubeconfig FILE --context CTX] [--kubectl PATH]

Without --kubeconfig it starts cw's test cluster in a temporary folder (and stops it by PID
after). It times, in one namespace each:
  * planning the sweep (validation and rendering of every run, no network);
  * submitting it through cw_cli.api on one connection (each run all-or-nothing);
  * with --kubectl: `kubectl apply -f` of the same manifests in one call (the peer's figure).
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIG = {
    "model_name_or_path": "Qwen/Qwen2.5-0.5B",
    "dataset_name": "trl-lib/Capybara",
    "gpu": 1,
    "cpu": "1",
    "memory": "4Gi",
    "checkpoint_volume": "none",
}


def _namespace(session_kube, name: str) -> None:
    session_kube.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for _ in range(100):  # the namespace's default ServiceAccount comes from the controller manager
        if session_kube.get("ServiceAccount", "default") is not None:
            return
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context", default="cw-test")
    parser.add_argument("--kubectl")
    args = parser.parse_args()

    from cw_cli import api
    from cw_cli import testcluster as lc

    temp = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        temp = tempfile.mkdtemp(prefix="cw-bench-")
        kubeconfig = str(Path(temp) / "kubeconfig")
        lc.up(state_dir=Path(temp) / "state", kubeconfig=kubeconfig, gpu_nodes=2, cpu_nodes=1,
              set_current_context=False, owner_pid=os.getpid())  # fmt: skip
    made: list[str] = []  # namespaces to delete at the end (on a cluster that outlives the benchmark)
    session = None
    try:
        namespace = f"bench-{secrets.token_hex(3)}"
        session = api.Session(context=args.context, namespace=namespace, kubeconfig=kubeconfig)
        _namespace(session.kube, namespace)
        made.append(namespace)
        values = ",".join(str(seed) for seed in range(args.runs))

        started = time.perf_counter()
        planned = session.plan_sweep(CONFIG, "trl", "sft", sweep=[f"seed={values}"], name="bench")
        planning = time.perf_counter() - started
        started = time.perf_counter()
        session.submit_sweep(planned)
        submitting = time.perf_counter() - started
        objects = sum(len(run.manifests) for run in planned.runs)
        print(f"{args.runs} runs ({objects} objects): plan {planning:.2f} s, submit {submitting:.2f} s, "
              f"total {planning + submitting:.2f} s")  # fmt: skip

        if args.kubectl:
            other = f"bench-{secrets.token_hex(3)}"
            _namespace(session.kube, other)
            made.append(other)
            manifests = Path(tempfile.mkdtemp()) / "sweep.yaml"
            manifests.write_text(planned.to_yaml())
            started = time.perf_counter()
            subprocess.run([args.kubectl, "--kubeconfig", kubeconfig, "--context", args.context, "-n", other,
                            "apply", "-f", str(manifests)], check=True, capture_output=True)  # fmt: skip
            applied = time.perf_counter() - started
            print(f"kubectl apply -f of the same manifests: {applied:.2f} s; cw / kubectl = "
                  f"{(planning + submitting) / applied:.2f}")  # fmt: skip
    finally:
        if temp is not None:
            lc.down(state_dir=Path(temp) / "state")
        elif session is not None:
            for name in made:
                session.kube.request("DELETE", f"/api/v1/namespaces/{name}")


if __name__ == "__main__":
    main()
