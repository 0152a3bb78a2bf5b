"""A flag of the wrong form is the user's mistake (exit 2), whether or not a cluster is there.

With no kubeconfig at all, `cw serve --ttl 5q` and `cw download --checkpoint foo` used to exit 3
(no cluster) because the value was first looked at after connecting; `cw metrics --rank -1` was
4 (no such pod) where `cw logs --rank -1` is 2. Each is now refused while the flags are read.
A well-formed value still goes on to the cluster (exit 3 here, where there is none), so the
check refuses only what can never work. `cw metrics /proc/kmsg` ends at once (it used to block).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from unit_helpers import builtin_registry


@pytest.fixture(scope="module")
def cw(tmp_path_factory):
    """``cw ARGS...`` in-process with no kubeconfig anywhere; returns click's Result."""
    from cw_cli.cli.app import build_app

    app = build_app(builtin_registry())
    home = tmp_path_factory.mktemp("home")
    env = {"KUBECONFIG": str(home / "no-kubeconfig"), "HOME": str(home), "KUBERNETES_SERVICE_HOST": ""}
    return lambda *args: CliRunner().invoke(app, [str(arg) for arg in args], env=env)


@pytest.mark.parametrize("args,message", [
    (["serve", "my-run", "--ttl", "5q"], "'5q': expected a duration such as 90m"),
    (["serve", "my-run", "--ttl", "999999d"], "is longer than a year"),
    (["serve", "my-run", "--checkpoint", "foo"], "'foo': expected final, latest, best, a step number or export:NAME"),
    (["try", "my-run", "hi", "--checkpoint", "-5"], "'-5': expected final, latest"),
    (["download", "my-run", "dest", "--checkpoint", "export:"], "'export:': expected"),
    (["download", "my-run", "dest", "--checkpoint", "export:../x"], "expected final, latest"),
    (["download", "my-run", "dest", "--checkpoint", "export:.."], "expected final, latest"),
    (["download", "my-run", "dest", "--checkpoint", "123456789012"], "expected final, latest"),
    (["metrics", "my-run", "--rank", "-1"], "--rank -1: expected 0 or more"),
    (["logs", "my-run", "--rank", "-1"], "--rank -1: expected 0 or more"),
])  # fmt: skip
def test_a_bad_flag_is_exit_2_without_a_cluster(cw, args, message):
    result = cw(*args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert message in result.output, result.output
    assert "kubeconfig" not in result.output


@pytest.mark.parametrize("args", [
    ["serve", "my-run", "--ttl", "90m", "--checkpoint", "latest"],
    ["serve", "my-run", "--checkpoint", "export:final-merged"],
    ["try", "my-run", "hi", "--checkpoint", "500"],
    ["download", "my-run", "dest", "--checkpoint", "final"],
    ["metrics", "my-run", "--rank", "1"],
])  # fmt: skip
def test_a_well_formed_flag_goes_on_to_the_cluster(cw, args):
    result = cw(*args)
    assert result.exit_code == 3, (result.exit_code, result.output)
    assert "no usable kubeconfig" in result.output


@pytest.mark.parametrize("path", ["/proc/kmsg", "/proc/self/status", "/proc/self/environ"])
def test_cw_metrics_of_a_kernel_pseudo_file_ends_at_once(path):
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    try:  # a child process: reading /proc/kmsg used to block forever
        done = subprocess.run([sys.executable, "-m", "cw_cli", "metrics", path], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"cw metrics {path} still reading after 60 s")
    assert done.returncode == 2, done.stderr
    assert "a file of the operating system" in done.stderr
