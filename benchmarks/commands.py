"""Every cw command timed side by side with its peer, in one run (tracked figures; never asserted in tests).

Usage:
    python benchmarks/commands.py --kubectl PATH [--torchx PATH] [--runs 15] [--background 1000]
        [--kubeconfig FILE --context CTX]
    python benchmarks/commands.py --offline [--runs 41]

Each pair runs alternately (cw, peer, cw, peer, ...) so both see the same machine load; the table
gives medians and the ratio cw / peer. Without --kubeconfig it uses the current kubeconfig's
`cw-test` context (`cw cluster up`). Everything runs in a fresh namespace, deleted at the end.

  cw --help                    vs  torchx --help
  cw trl sft CFG --dry-run     vs  torchx run -s kubernetes -cfg queue=default --dryrun utils.echo
  submit one run               vs  kubectl apply -f of the same manifests
  cw status RUN                vs  kubectl get job,pods -l cw-cli.dev/run=RUN
  cw logs RUN                  vs  kubectl logs job/RUN-trainer
  cw list                      vs  kubectl get jobs -l app.kubernetes.io/managed-by=cw
  (status, logs and list with --background runs in the namespace: flat means it does not matter)
  a 100-run sweep (one cw)     vs  one kubectl apply -f of the same manifests

cw runs as a user installs it, from its own virtual environment (`--cw-venv`, default
~/.cache/cw/venvs/cw-bench, refreshed from this tree on every run), as torchx runs from its own:
a development environment with torch and 130 packages makes pydantic's plugin scan slower.
`--in-place` times the cw of the interpreter running this script instead.

kubectl: build it from the same Kubernetes modules as the test cluster, e.g.
`cd tools/k8s && go build -o ~/.cache/cw/bin/kubectl k8s.io/kubernetes/cmd/kubectl`.
torchx: `python -m venv ~/.cache/cw/venvs/torchx && ~/.cache/cw/venvs/torchx/bin/pip install torchx kubernetes`.

`--offline` times only the rows that need no cluster (help, the dry run and its floor), and should
run with the test cluster stopped: on 2 cores its processes (etcd, the API server, controllers)
slow a short process by about as much as a long one, which pulled the dry run's ratio from
0.30 to 0.31-0.37 in the full table.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweep_submit import CONFIG  # noqa: E402 - the same small SFT run as the sweep benchmark

Command = Callable[[int], list[str]]


def _time(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return elapsed


def paired(
    label: str, cw: Command, peer: Command | None, runs: int, env: dict[str, str], warm_up: bool = True
) -> tuple[str, float, float | None]:
    """Median seconds of ``cw`` and ``peer``, run alternately ``runs`` times (argument: the iteration).

    ``warm_up`` runs each once first, untimed (the page cache); off for commands that create things.
    """
    mine, theirs = [], []
    if warm_up:
        _time(cw(0), env)
        if peer is not None:
            _time(peer(0), env)
    for i in range(runs):
        mine.append(_time(cw(i), env))
        if peer is not None:
            theirs.append(_time(peer(i), env))
    return label, statistics.median(mine), statistics.median(theirs) if theirs else None


def _settle(session, runs: int, limit_s: float = 300) -> None:
    """Wait until the controllers have made (and KWOK finished) the background runs' pods, so the
    timings that follow do not compete with a busy control plane."""
    deadline, last, stable = time.monotonic() + limit_s, -1, 0
    while time.monotonic() < deadline and stable < 3:
        pods = session.kube.list_metadata("Pod", "app.kubernetes.io/managed-by=cw")
        stable = stable + 1 if len(pods) == last and len(pods) >= runs else 0
        last = len(pods)
        time.sleep(2)


def installed_cw(venv: Path) -> str:
    """The python of ``venv`` with cw installed from this tree (not editable), as a user has it."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)], check=True)
    else:  # cw itself, fresh from the tree, and any dependency the tree added since the venv was made
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(ROOT)], check=True)
        if subprocess.run([str(python), "-m", "pip", "check"], capture_output=True).returncode != 0:
            subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)], check=True)
    return str(python)


def floor_code(libraries: str, validates: bool) -> str:
    """What a command's libraries alone cost: a Python that imports them and, for a command that
    validates a config, builds a one-field pydantic model (the least of validating with pydantic),
    without pydantic's plugin lookup and without importing its plugin loader, as cw builds its
    models; it ends the way the cw executable does, without the interpreter's teardown."""
    model = (
        "import os, sys, types, pydantic\nos.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'\n"
        "loader = types.ModuleType('pydantic.plugin._loader')\nloader.get_plugins = lambda: ()\n"
        "sys.modules['pydantic.plugin._loader'] = loader\n"
        "class M(pydantic.BaseModel):\n    x: int = 0\n"
    ) if validates else ""
    return f"import {libraries}\n{model}import os\nos._exit(0)\n"


def _row(label: str, mine: float, theirs: float | None) -> str:
    ratio = f"{mine / theirs:5.2f}" if theirs else "    -"
    peer = f"{theirs * 1000:7.0f}" if theirs else "      -"
    return f"| {label:44} | {mine * 1000:7.0f} | {peer} | {ratio} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubectl", help="required unless --offline")
    parser.add_argument("--offline", action="store_true", help="only the rows that need no cluster")
    parser.add_argument("--torchx", default=str(Path.home() / ".cache/cw/venvs/torchx/bin/torchx"))
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--background", type=int, default=1000, help="runs in the namespace for status/logs/list")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or str(Path.home() / ".kube/config"))
    parser.add_argument("--context", default="cw-test")
    parser.add_argument("--cw-venv", default=str(Path.home() / ".cache/cw/venvs/cw-bench"), help="cw's own venv (made if missing)")
    parser.add_argument("--in-place", action="store_true", help="time the cw of this interpreter instead")
    args = parser.parse_args()
    if not args.offline and not args.kubectl:
        parser.error("--kubectl is required (or --offline)")

    from cw_cli import api

    python = sys.executable if args.in_place else installed_cw(Path(args.cw_venv))
    cw = [str(Path(python).with_name("cw"))]
    torchx = args.torchx if shutil.which(args.torchx) else None
    namespace = f"bench-{secrets.token_hex(3)}"
    # Both sides run as installed: with their bytecode cached. (An editable install has no .pyc until
    # the first run writes one, and PYTHONDONTWRITEBYTECODE would make every run compile cw again.)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["KUBECONFIG"] = args.kubeconfig
    if args.in_place:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "cw_cli")], check=True, capture_output=True)
    folder = Path(tempfile.mkdtemp(prefix="cw-bench-"))
    config = folder / "sft.yaml"
    import yaml

    config.write_text(yaml.safe_dump(CONFIG))
    torchx_dry_run: Command | None = (lambda i: [torchx, "run", "-s", "kubernetes", "-cfg", "queue=default", "--dryrun",
                                                 "--workspace", "", "utils.echo", "--msg", "hi"]) if torchx else None  # fmt: skip
    dry_run_floor: Command = lambda i: [python, "-c", floor_code("click, yaml, jinja2", validates=True)]  # noqa: E731
    rows = [
        paired("cw --help | torchx --help", lambda i: [*cw, "--help"], (lambda i: [torchx, "--help"]) if torchx else None,
               args.runs, env),
        paired("dry run | torchx --dryrun", lambda i: [*cw, "trl", "sft", str(config), "--dry-run", "--name", "d"],
               torchx_dry_run, args.runs, env),
    ]  # fmt: skip
    if args.offline:
        rows.append(paired("floor of a dry run | torchx --dryrun", dry_run_floor, torchx_dry_run, args.runs, env))
        shutil.rmtree(folder, ignore_errors=True)
        _print_table(rows, args.runs)
        return
    kubectl = [args.kubectl, "--context", args.context, "-n", namespace]
    scope = ["--context", args.context, "-n", namespace]
    session = api.Session(context=args.context, namespace=namespace, kubeconfig=args.kubeconfig)
    session.kube.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        for _ in range(100):  # the namespace's default ServiceAccount comes from the controller manager
            if session.kube.get("ServiceAccount", "default") is not None:
                break
            time.sleep(0.1)

        manifests = []
        for i in range(args.runs):
            path = folder / f"k{i}.yaml"
            path.write_text(api.plan(CONFIG, "trl", "sft", name=f"k{i}", namespace=namespace).to_yaml())
            manifests.append(path)
        rows.append(paired("submit one run | kubectl apply -f",
                           lambda i: [*cw, "trl", "sft", str(config), "--name", f"s{i}", *scope],
                           lambda i: [*kubectl, "apply", "-f", str(manifests[i])], args.runs, env, warm_up=False))  # fmt: skip

        def watch_rows(background: int) -> None:
            where = f"{background + 3 * args.runs} runs in ns"
            rows.append(paired(f"cw status | kubectl get job,pods ({where})", lambda i: [*cw, "status", "s0", *scope],
                               lambda i: [*kubectl, "get", "job,pods", "-l", "cw-cli.dev/run=s0"], args.runs, env))  # fmt: skip
            rows.append(paired(f"cw logs | kubectl logs ({where})", lambda i: [*cw, "logs", "s0", *scope],
                               lambda i: [*kubectl, "logs", "job/s0-trainer"], args.runs, env))  # fmt: skip
            rows.append(paired(f"cw list | kubectl get jobs ({where})", lambda i: [*cw, "list", *scope],
                               lambda i: [*kubectl, "get", "jobs", "-l", "app.kubernetes.io/managed-by=cw"], args.runs, env))  # fmt: skip

        # What the libraries alone cost: a Python that only imports what each command needs, timed
        # against the same peer. cw's own code can close the gap down to this ratio, not below it.
        fresh = []
        for i in range(args.runs):
            path = folder / f"f{i}.yaml"
            path.write_text(api.plan(CONFIG, "trl", "sft", name=f"f{i}", namespace=namespace).to_yaml())
            fresh.append(path)
        # (label, what the libraries' Python runs, the peer, whether to warm up: not for a peer that creates)
        floors: list[tuple[str, str, Command | None, bool]] = [
            ("floor of a submit | kubectl apply -f", floor_code("click, yaml, jinja2, http.client, ssl", validates=True),
             lambda i: [*kubectl, "apply", "-f", str(fresh[i])], False),
            ("floor of status | kubectl get job,pods", floor_code("click, yaml, http.client, ssl", validates=False),
             lambda i: [*kubectl, "get", "job,pods", "-l", "cw-cli.dev/run=s0"], True),
        ]  # fmt: skip
        rows.append(paired("floor of a dry run | torchx --dryrun", dry_run_floor, torchx_dry_run, args.runs, env))
        for label, source, peer, warm_up in floors:
            importing: Command = lambda i, code=source: [python, "-c", code]  # noqa: E731
            rows.append(paired(label, importing, peer, args.runs, env, warm_up=warm_up))
        watch_rows(0)
        if args.background:
            values = ",".join(str(seed) for seed in range(args.background))
            session.submit_sweep(session.plan_sweep(CONFIG, "trl", "sft", sweep=[f"seed={values}"], name="bg"))
            _settle(session, args.background)
            watch_rows(args.background)

        sweep_file = folder / "sweep.yaml"
        sweep_file.write_text(yaml.safe_dump({**CONFIG, "sweep": {"grid": {"seed": list(range(100))}}}))
        other = f"{namespace}-k"
        session.kube.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
        planned = api.plan_sweep(sweep_file, "trl", "sft", name="sw", namespace=other)
        (folder / "sweep-manifests.yaml").write_text(planned.to_yaml())
        time.sleep(2)  # the new namespace's ServiceAccount
        rows.append(paired("100-run sweep | one kubectl apply -f", lambda i: [*cw, "trl", "sft", str(sweep_file), "--name", "sw", *scope],
                           lambda i: [args.kubectl, "--context", args.context, "-n", other, "apply", "-f",
                                      str(folder / "sweep-manifests.yaml")], 1, env, warm_up=False))  # fmt: skip
        session.kube.request("DELETE", f"/api/v1/namespaces/{other}")
    finally:
        session.kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
        shutil.rmtree(folder, ignore_errors=True)
    _print_table(rows, args.runs)


def _print_table(rows: list[tuple[str, float, float | None]], runs: int) -> None:
    print(f"medians of {runs} paired runs, ms ({os.cpu_count()} cores)")
    print(f"| {'command | peer':44} | {'cw':>7} | {'peer':>7} | ratio |")
    print(f"|{'-' * 46}|{'-' * 9}|{'-' * 9}|-------|")
    for label, mine, theirs in rows:
        print(_row(label, mine, theirs))


if __name__ == "__main__":
    main()
