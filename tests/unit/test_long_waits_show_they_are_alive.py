"""A long wait is not a hang: on a pipe or in a CI log, `cw cluster up`, `cw cluster build` and
`cw export --wait` print a line per stage and, while a stage lasts, a line every EVERY_S seconds
with the elapsed time; no more than that (a spinner alone printed nothing there for 11 minutes).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from cw_cli.cli import heartbeat
from cw_cli.cli.heartbeat import Heartbeat, elapsed_text


def test_a_stage_is_a_line_and_a_long_stage_a_line_every_interval():
    lines: list[str] = []
    started = time.monotonic()
    with Heartbeat("starting", every_s=0.1, terminal=False, write=lines.append) as beat:
        time.sleep(0.6)
        beat.stage("building k8s")
        took = time.monotonic() - started
    assert lines[0] == "starting ..."
    still = [line for line in lines if line.startswith("  still starting (")]
    assert 1 <= len(still) <= took / 0.1 + 1, lines  # about one a tenth of a second here; a slow machine only has fewer
    assert "building k8s ... (0s)" in lines


def test_lines_stay_few_however_often_the_wait_reports():
    lines: list[str] = []
    with Heartbeat("waiting", every_s=2.0, terminal=False, write=lines.append) as beat:
        for _ in range(20):
            beat.note("  job: running")  # every note counts as a sign of life: no "still" line is due
            time.sleep(0.01)
    assert not [line for line in lines if "still" in line], lines


def test_on_a_terminal_nothing_is_printed_but_the_spinner():
    lines: list[str] = []
    with Heartbeat("starting", every_s=0.05, terminal=True, write=lines.append) as beat:
        beat.stage("creating nodes")
        time.sleep(0.15)
    assert lines == []


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (59.9, "59s"), (65, "1m05s"), (3600 * 2 + 61, "2h01m")])
def test_elapsed_time_is_short(seconds, text):
    assert elapsed_text(seconds) == text


def test_cw_cluster_up_on_a_pipe_shows_each_stage_and_that_a_cold_build_is_alive(monkeypatch):
    from cw_cli import testcluster
    from cw_cli.cli.cluster import cluster_group

    monkeypatch.setattr(heartbeat, "EVERY_S", 0.1)

    def up(on_progress, **_):
        on_progress("building k8s (cold build, minutes)")
        time.sleep(1.0)  # the build: minutes in life; ten intervals here
        on_progress("starting etcd")
        return SimpleNamespace(already_running=False, server="https://127.0.0.1:1", built=["k8s"], build_seconds=1.0,
                               start_seconds=1.0, nodes=["cw-gpu-0"], kubeconfig="k", context="cw-test", state_dir="s",
                               real_nodes=[], runtime_image="", real_node_skipped="not root")  # fmt: skip

    monkeypatch.setattr(testcluster, "up", up)
    result = CliRunner().invoke(cluster_group, ["up"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "starting the test cluster ..."
    assert "building k8s (cold build, minutes) ... (0s)" in lines
    assert sum(line.startswith("  still building k8s (cold build, minutes) (") for line in lines) >= 2, lines
    assert any(line.startswith("starting etcd ... (") for line in lines)


def test_cw_export_wait_on_a_pipe_says_it_is_alive(monkeypatch):
    from cw_cli import api
    from cw_cli.cli.export import export_command

    monkeypatch.setattr(heartbeat, "EVERY_S", 0.1)

    def wait(timeout, progress):
        progress("cw-export-x: running")
        time.sleep(1.0)
        return "succeeded"

    started = SimpleNamespace(name="cw-export-x", run_dir="/checkpoints/my-run", wait=wait)
    session = SimpleNamespace(run=lambda name: SimpleNamespace(export=lambda **_: started))
    monkeypatch.setattr(api, "Session", lambda **_: session)
    result = CliRunner().invoke(export_command, ["my-run", "--wait"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert "waiting for export cw-export-x ..." in lines and "  cw-export-x: running" in lines
    assert sum(line.startswith("  still waiting for export cw-export-x (") for line in lines) >= 2, lines
