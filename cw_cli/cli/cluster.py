"""`cw cluster up|down|status`: the local test cluster (real control plane + KWOK fake GPU nodes).

Cheap to import: cw_cli.localcluster is imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cw_cli.cli.errors import handle_errors
from cw_cli.cli.output import err
from cw_cli.cli.output import out as _out

cluster_app = typer.Typer(
    help="Local Kubernetes test cluster: real control plane on 127.0.0.1 with fake GPU nodes (KWOK).",
    no_args_is_help=True,
)

_STATE_HELP = "State folder (default: $CW_CLUSTER_DIR or ~/.cache/cw/cluster)."


@cluster_app.command("up")
@handle_errors
def up_cmd(
    kubeconfig: Optional[Path] = typer.Option(
        None, "--kubeconfig", help="Kubeconfig to merge context cw-local into "
        "(default: first $KUBECONFIG path or ~/.kube/config)."),
    nodes: int = typer.Option(2, "--nodes", min=0, max=50, help="Number of fake 8-GPU nodes."),
    cpu_nodes: int = typer.Option(1, "--cpu-nodes", min=0, max=50, help="Number of fake CPU-only nodes."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help=_STATE_HELP),
    build: bool = typer.Option(True, "--build/--no-build", help="Build missing binaries with Go."),
    timeout: float = typer.Option(180.0, "--timeout", help="Seconds to wait for the cluster."),
    kueue: bool = typer.Option(False, "--kueue", help="Also run Kueue and JobSet (Kueue's JobSet integration on), "
                               "with ClusterQueue cw-gpus and LocalQueue cw."),
) -> None:
    """Build (if needed) and start the local cluster; set kubectl context cw-local."""
    from cw_cli import localcluster as lc

    try:
        with err().status("starting local cluster ...") as spinner:
            info = lc.up(state_dir=state_dir, kubeconfig=kubeconfig, gpu_nodes=nodes,
                         cpu_nodes=cpu_nodes, build=build, timeout=timeout, kueue=kueue,
                         on_progress=lambda m: spinner.update(m + " ..."))
    except KeyboardInterrupt:
        raise lc.LocalClusterError("interrupted", hint="run `cw cluster down` to clean up") from None
    out = _out()
    if info.already_running:
        out.print(f"[green]already running[/] at {info.server}")
    else:
        built = f", built {', '.join(info.built)} in {info.build_seconds:.0f}s" if info.built else ""
        out.print(f"[green]cluster up[/] at {info.server} in {info.start_seconds:.1f}s{built}")
    out.print(f"nodes: {', '.join(info.nodes)}")
    out.print(f"kubeconfig: {info.kubeconfig} (context [bold]{info.context}[/])")
    out.print(f"state: {info.state_dir}   stop with: cw cluster down")


@cluster_app.command("build")
@handle_errors
def build_cmd(
    force: bool = typer.Option(False, "--force", help="Rebuild even if cached."),
) -> None:
    """Build the missing cluster binaries into the cache (needs Go; cold: tens of minutes)."""
    from cw_cli import localcluster as lc

    with err().status("checking binaries ...") as spinner:
        bins = lc.ensure_binaries(force=force, on_build_start=lambda c: spinner.update(f"building {c} ..."))
    out = _out()
    if bins.built:
        times = ", ".join(f"{c} {s:.0f}s" for c, s in bins.seconds.items())
        out.print(f"built {times} (total {bins.total_seconds:.0f}s)")
    else:
        out.print("all binaries cached")
    v = bins.versions
    out.print(f"kubernetes {v.kubernetes}, etcd {v.etcd}, kwok {v.kwok} in {bins.etcd.parent.parent}")


@cluster_app.command("down")
@handle_errors
def down_cmd(
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help=_STATE_HELP),
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds before SIGKILL."),
    keep_state: bool = typer.Option(False, "--keep-state", help="Keep logs and data."),
) -> None:
    """Stop the local cluster (by recorded PIDs) and remove its state. Idempotent."""
    from cw_cli import localcluster as lc

    res = lc.down(state_dir=state_dir, timeout=timeout, keep_state=keep_state)
    out = _out()
    if not res.stopped and not res.removed_state:
        out.print(f"no local cluster at {res.state_dir}")
        return
    for name, what in res.stopped.items():
        out.print(f"{name}: {what}")
    if res.kubeconfig_cleaned:
        out.print(f"removed context cw-local from {res.kubeconfig_cleaned}")
    if res.removed_state:
        out.print(f"removed {res.state_dir}")


@cluster_app.command("status")
@handle_errors
def status_cmd(
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help=_STATE_HELP),
) -> None:
    """Show processes, API readiness and nodes. Exit code 1 when not running."""
    from rich.table import Table

    from cw_cli import localcluster as lc

    st = lc.status(state_dir=state_dir)
    out = _out()
    if not st.exists and not st.processes:
        out.print(f"no local cluster at {st.state_dir} (start one with: cw cluster up)")
        raise typer.Exit(1)
    t = Table(title=f"local cluster ({st.state_dir})")
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
        out.print(f"kubeconfig: {st.kubeconfig} (context cw-local)")
    if not st.running:
        raise typer.Exit(1)
