"""The run commands are a thin layer over `cw_cli.api` (docs/api.md): they never go around it.

`cw list`, `cw status`, `cw logs`, `cw delete` and the after-training commands call `api.Session`
and `api.Run`; none of their modules imports `cw_cli.k8s`, at any level (inside functions and
under ``if TYPE_CHECKING:`` too), so what the CLI can do with a run, the library can do too.
"""

from __future__ import annotations

import ast
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner
from unit_helpers import REPO

#: The modules of the commands that act on an existing run (cli/run.py launches; cli/metrics.py
#: reads logs through cw_cli.metrics).
RUN_COMMAND_MODULES = ("runs.py", "artifacts.py", "download.py", "export.py", "serve.py", "metrics.py", "estimate.py")


#: The packages that talk to a cluster: its client, the reads and writes of runs, the after-training features.
CLUSTER_PACKAGES = ("k8s", "client", "after_training")


def _is_cluster_module(name: str) -> bool:
    return any(name == f"cw_cli.{package}" or name.startswith(f"cw_cli.{package}.") for package in CLUSTER_PACKAGES)


def k8s_imports(source: str) -> list[str]:
    """Every import of a cluster package (or of a module under one) in ``source``, as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_cluster_module(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _is_cluster_module(node.module):
                found.append(node.module)
            elif node.module == "cw_cli":
                found += [f"cw_cli.{alias.name}" for alias in node.names if alias.name in CLUSTER_PACKAGES]
    return found


def test_the_check_sees_every_way_to_import_the_cluster_layer():
    source = (
        "import cw_cli.client.connection\n"
        "from cw_cli import k8s, api, after_training\n"
        "def command():\n"
        "    from cw_cli.k8s.status import run_status\n"
        "if TYPE_CHECKING:\n"
        "    from cw_cli.k8s import run_view\n"
        "from cw_cli import api\n"
        "from cw_cli.cli.options import namespace_option\n"
    )
    assert k8s_imports(source) == [
        "cw_cli.client.connection", "cw_cli.k8s", "cw_cli.after_training", "cw_cli.k8s.status", "cw_cli.k8s"
    ]


@pytest.mark.parametrize("module", RUN_COMMAND_MODULES)
def test_run_commands_import_nothing_from_the_cluster_layer(module):
    path = REPO / "cw_cli" / "cli" / module
    assert k8s_imports(path.read_text()) == [], f"cli/{module} goes around cw_cli.api: add what it needs to the api"


def test_cw_status_is_run_status_of_the_api_and_finding_the_run_reads_nothing(monkeypatch):
    """`cw status RUN` prints what `Run.status()` returns; `Session.run(name)` asks the cluster
    nothing (no kubeconfig here: any read would fail), so the CLI costs no extra request."""
    from cw_cli import api
    from cw_cli.cli.runs import status_command
    from cw_cli.k8s.run_view import RunView

    monkeypatch.setenv("KUBECONFIG", str(REPO / "no-such-kubeconfig"))
    asked = []

    def status(run: api.Run) -> RunView:
        asked.append((run.name, run.owner_kind))
        return RunView(name=run.name, framework="trl", training_type="sft", state="Running", gpus=8,
                       created=datetime.now(timezone.utc), objects=["Job/r1-trainer"])  # fmt: skip

    monkeypatch.setattr(api.Run, "status", status)
    result = CliRunner().invoke(status_command, ["r1", "-n", "team-a"])
    assert result.exit_code == 0, result.output
    assert asked == [("r1", None)]
    assert "state: Running" in result.output and "GPUs: 8" in result.output


def test_the_api_is_cheap_to_import_for_the_commands_that_go_through_it():
    """`cw status`, `list` and `logs` import cw_cli.api: it loads the cluster layer and every heavy
    library only inside the calls that need them (json too: `cw status` decodes with msgspec).

    Of the config layer it loads only the launch options' structures (cw_cli.config.options:
    msgspec alone), never the loader, the models or the YAML reader."""
    import subprocess
    import sys

    heavy = ("json", "yaml", "rich", "kubernetes", "pydantic", "jinja2", "ssl", "cw_cli.k8s", "cw_cli.render")
    code = ("import sys, cw_cli.api; print(sorted(m for m in sys.modules if m in "
            f"{heavy!r} or m.startswith(('cw_cli.config.', 'cw_cli.k8s.', 'cw_cli.render.')) and m != 'cw_cli.config.options'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr
