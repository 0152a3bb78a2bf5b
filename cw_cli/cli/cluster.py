"""`cw cluster up|down|status`: the test cluster (real control plane, KWOK fake GPU nodes and,
where the machine can run it, a real node whose pods really run).

Cheap to import: cw_cli.testcluster is imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path

import click

from cw_cli.cli.errors import handle_errors
from cw_cli.cli.heartbeat import Heartbeat
from cw_cli.cli.output import out as _out


@click.group("cluster", no_args_is_help=True)
def cluster_group() -> None:
    """The test cluster: a real Kubernetes control plane, fake GPU nodes (KWOK) and a real node."""


_STATE_HELP = "State folder (default: $CW_CLUSTER_DIR or ~/.cache/cw/cluster)."


_PATH = click.Path(path_type=Path)


@cluster_group.command("up")
@click.option("--kubeconfig", type=_PATH,
              help="Kubeconfig to merge context cw-test into (default: first $KUBECONFIG path or ~/.kube/config).")
@click.option("--nodes", type=click.IntRange(0, 50), default=2, show_default=True, help="Number of fake 8-GPU nodes.")
@click.option("--cpu-nodes", type=click.IntRange(0, 50), default=1, show_default=True, help="Number of fake CPU-only nodes.")
@click.option("--state-dir", type=_PATH, help=_STATE_HELP)
@click.option("--build/--no-build", default=True, show_default=True, help="Build missing binaries with Go.")
@click.option("--timeout", type=float, default=180.0, show_default=True, help="Seconds to wait for the cluster.")
@click.option("--kueue", is_flag=True,
              help="Also run Kueue and JobSet (Kueue's JobSet integration on), with ClusterQueue cw-gpus and LocalQueue cw.")
@click.option("--real-node/--no-real-node", default=None,
              help="Run a real node (kubelet, containerd; pods really run). Default: when this machine can (Linux, root, containerd).")
@click.option("--real-nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many real nodes (2: a `--nodes 2` run's pods rendezvous on two kubelets).")
@handle_errors
def up_cmd(
    kubeconfig: Path | None, nodes: int, cpu_nodes: int, state_dir: Path | None, build: bool, timeout: float, kueue: bool,
    real_node: bool | None, real_nodes: int,
) -> None:
    """Build (if needed) and start the test cluster; set kubectl context cw-test."""
    from cw_cli import testcluster as lc

    try:
        with Heartbeat("starting the test cluster") as beat:  # a cold build takes minutes: alive on a pipe too
            info = lc.up(state_dir=state_dir, kubeconfig=kubeconfig, gpu_nodes=nodes,
                         cpu_nodes=cpu_nodes, build=build, timeout=timeout, kueue=kueue,
                         on_progress=beat.stage, real_node=real_node, real_nodes=real_nodes)
    except KeyboardInterrupt:
        raise lc.TestClusterError("interrupted", hint="run `cw cluster down` to clean up") from None
    out = _out()
    if info.already_running:
        out.print(f"[green]already running[/] at {info.server}")
    else:
        built = f", built {', '.join(info.built)} in {info.build_seconds:.0f}s" if info.built else ""
        out.print(f"[green]cluster up[/] at {info.server} in {info.start_seconds:.1f}s{built}")
    out.print(f"nodes: {', '.join(info.nodes)}")
    if info.real_nodes:
        out.print(f"real node: {', '.join(info.real_nodes)} (pods really run; image {info.runtime_image})")
    elif info.real_node_skipped:
        out.print(f"[yellow]no real node[/]: {info.real_node_skipped}; pods only run on simulated nodes", soft_wrap=True)
    out.print(f"kubeconfig: {info.kubeconfig} (context [bold]{info.context}[/])")
    out.print(f"state: {info.state_dir}   stop with: cw cluster down")


@cluster_group.command("build")
@click.option("--force", is_flag=True, help="Rebuild even if cached.")
@handle_errors
def build_cmd(force: bool) -> None:
    """Build the missing cluster binaries into the cache (needs Go; cold: tens of minutes)."""
    from cw_cli import testcluster as lc

    with Heartbeat("checking binaries") as beat:
        bins = lc.ensure_binaries(force=force, on_build_start=lambda c: beat.stage(f"building {c} (cold: minutes)"))
    out = _out()
    if bins.built:
        times = ", ".join(f"{c} {s:.0f}s" for c, s in bins.seconds.items())
        out.print(f"built {times} (total {bins.total_seconds:.0f}s)")
    else:
        out.print("all binaries cached")
    v = bins.versions
    out.print(f"kubernetes {v.kubernetes}, etcd {v.etcd}, kwok {v.kwok} in {bins.etcd.parent.parent}")


@cluster_group.command("down")
@click.option("--state-dir", type=_PATH, help=_STATE_HELP)
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds before SIGKILL.")
@click.option("--keep-state", is_flag=True, help="Keep logs and data.")
@handle_errors
def down_cmd(state_dir: Path | None, timeout: float, keep_state: bool) -> None:
    """Stop the test cluster (by recorded PIDs) and remove its state. Idempotent."""
    from cw_cli import testcluster as lc

    res = lc.down(state_dir=state_dir, timeout=timeout, keep_state=keep_state)
    out = _out()
    if not res.stopped and not res.removed_state:
        out.print(f"no test cluster at {res.state_dir}")
        return
    for name, what in res.stopped.items():
        out.print(f"{name}: {what}")
    if res.kubeconfig_cleaned:
        out.print(f"removed context cw-test from {res.kubeconfig_cleaned}")
    if res.removed_state:
        out.print(f"removed {res.state_dir}")
    for thing in res.leftovers:
        out.print(f"[red]left behind[/]: {thing}", soft_wrap=True)


@cluster_group.command("status")
@click.option("--state-dir", type=_PATH, help=_STATE_HELP)
@handle_errors
def status_cmd(state_dir: Path | None) -> None:
    """Show processes, API readiness and nodes. Exit code 1 when not running."""
    from rich.table import Table

    from cw_cli import testcluster as lc

    st = lc.status(state_dir=state_dir)
    out = _out()
    if not st.exists and not st.processes:
        out.print(f"no test cluster at {st.state_dir} (start one with: cw cluster up)")
        raise click.exceptions.Exit(1)
    t = Table(title=f"test cluster ({st.state_dir})")
    t.add_column("process")
    t.add_column("pid", justify="right")
    t.add_column("state")
    for p in st.processes:
        t.add_row(p.name, str(p.pid), "[green]running[/]" if p.alive else "[red]dead[/]")
    out.print(t)
    api = "[green]ready[/]" if st.api_ready else f"[red]not ready[/] {st.error or ''}"
    out.print(f"API server {st.server}: {api}", soft_wrap=True)
    if st.nodes:
        n = Table(title="nodes")
        for col in ("name", "ready", "gpus", "cpu", "memory", "taints"):
            n.add_column(col)
        for node in st.nodes:
            n.add_row(node.name, "[green]yes[/]" if node.ready else "[red]no[/]", node.gpus,
                      node.cpu, node.memory, ", ".join(node.taints))
        out.print(n)
    if st.kubeconfig:
        out.print(f"kubeconfig: {st.kubeconfig} (context cw-test)")
    if not st.running:
        raise click.exceptions.Exit(1)
