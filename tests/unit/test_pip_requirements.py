"""The `pip:` field and cw_pip.py, cw's package step that runs before a pod's command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from unit_helpers import container, obj, plan_for, write_config

from cw_cli.errors import ConfigError
from cw_cli.frameworks.runtime_files import PIP_FILE, runtime_file

RUN = "golden-run"
SFT = {"model_name_or_path": "m", "dataset_name": "d"}
PIP_SCRIPT = runtime_file(PIP_FILE)


def test_pip_requirements_wrap_the_trainer_and_ship_the_installer(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "pip": ["math-verify==0.8.0", "sympy>=1.12"]}))
    command = container(plan.manifests[0], "trainer")["command"]
    assert command[:5] == ["python3", "/etc/cw/cw_pip.py", "math-verify==0.8.0", "sympy>=1.12", "--"]
    assert command[5:8] == ["python3", "/etc/cw/cw_entrypoint.py", "--"]
    assert obj(plan, "ConfigMap", f"{RUN}-config")["data"][PIP_FILE] == PIP_SCRIPT


def test_pip_requirements_reach_every_service_of_the_run(tmp_path):
    data = {**SFT, "pip": ["math-verify==0.8.0"], "use_vllm": True, "vllm_mode": "server",
            "reward_funcs": ["cw_reward.remote_reward"], "services": {"server": {"gpu": 1}, "reward": {"model": "rm"}}}
    plan = plan_for("trl", "grpo", write_config(tmp_path, data))
    for role in ("server", "reward"):
        command = container(obj(plan, "Deployment", f"{RUN}-{role}"), role)["command"]
        assert command[:4] == ["python3", "/etc/cw/cw_pip.py", "math-verify==0.8.0", "--"], role


def test_no_requirements_no_package_step(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, SFT))
    assert container(plan.manifests[0], "trainer")["command"][:2] == ["python3", "/etc/cw/cw_entrypoint.py"]
    assert PIP_FILE not in obj(plan, "ConfigMap", f"{RUN}-config")["data"]


@pytest.mark.parametrize("bad", ["-r evil.txt", "--index-url=http://x", " padded", "", "two\nlines"])
def test_requirements_that_pip_would_read_as_options_are_refused(tmp_path, bad):
    path = write_config(tmp_path, {**SFT, "pip": ["ok==1", bad]})
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", path)
    text = "\n".join(info.value.issues)
    assert str(path) in text and "`pip" in text and "PIP_*" in text


def _cw_pip(tmp_path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / PIP_FILE
    script.write_text(PIP_SCRIPT)
    env = {**os.environ, "PIP_NO_INDEX": "1", **(env or {})}  # offline: satisfied requirements need no index
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=300)


def test_dry_run_prints_the_pip_command_and_the_command(tmp_path):
    out = _cw_pip(tmp_path, "--dry-run", "a==1", "b>2", "--", "vf-vllm", "--model", "m")
    result = json.loads(out.stdout)
    assert result["pip"][1:] == ["-m", "pip", "install", "--no-input", "--no-build-isolation",
                                 "--disable-pip-version-check", "a==1", "b>2"]
    assert result["exec"] == ["vf-vllm", "--model", "m"]


@pytest.mark.parametrize("args", [("a==1", "vf-vllm"), ("a==1", "--"), ("-r", "x", "--", "cmd")])
def test_malformed_arguments_stop_with_the_usage(tmp_path, args):
    out = _cw_pip(tmp_path, *args)
    assert out.returncode != 0 and "usage: cw_pip.py" in out.stderr


def test_satisfied_requirements_install_offline_then_the_command_runs(tmp_path):
    out = _cw_pip(tmp_path, "pyyaml>=1", "--", sys.executable, "-c", "import yaml; print('ran', yaml.__name__)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ran yaml") and "already satisfied" in out.stdout.lower()


def test_exact_pins_already_installed_skip_pip_so_an_image_without_pip_starts(tmp_path):
    """An image with the pinned packages baked in and no pip (cw's test-cluster image) runs the
    command: the exact pin is checked against the installed distribution, pip is never called."""
    from importlib import metadata

    pin = f"PyYAML=={metadata.version('pyyaml')}"
    env = {"PIP_INDEX_URL": "http://127.0.0.1:9/never"}  # any pip call that needs an index fails at once
    out = _cw_pip(tmp_path, pin, "--", sys.executable, "-c", "print('ran')", env=env)
    assert out.returncode == 0, out.stderr
    assert "installed already" in out.stderr and "ensuring" not in out.stderr
    wrong = _cw_pip(tmp_path, "PyYAML==0.0.1", "--", sys.executable, "-c", "print('ran')", env=env)
    assert "ensuring PyYAML==0.0.1" in wrong.stderr and "ran" not in wrong.stdout


def test_a_failed_install_stops_before_the_command(tmp_path):
    marker = tmp_path / "ran"
    out = _cw_pip(tmp_path, "cw-no-such-package==0.0.0", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert out.returncode != 0 and "bake them into the image" in out.stderr and not marker.exists()


def test_check_mode_runs_the_command_when_requirements_are_satisfied(tmp_path):
    out = _cw_pip(tmp_path, "pyyaml", "--", sys.executable, "-c", "print('ran')", env={"CW_PIP_CHECK": "1"})
    assert out.returncode == 0 and out.stdout.strip().endswith("ran"), out.stderr


def test_check_mode_installs_nothing_and_names_the_pip_command(tmp_path):
    marker = tmp_path / "ran"
    out = _cw_pip(tmp_path, "pyyaml", "cw-no-such-package==0.0.0", "--", sys.executable, "-c",
                  f"open({str(marker)!r}, 'w')", env={"CW_PIP_CHECK": "1"})
    assert out.returncode == 1 and not marker.exists()
    assert "-m pip install cw-no-such-package==0.0.0" in out.stderr  # only what is missing


def test_local_runs_only_check_requirements(tmp_path):
    from cw_cli.localrun.runner import LocalRunner

    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "pip": ["math-verify==0.8.0"]}))
    with LocalRunner(plan.manifests, tmp_path / "ckpt", workdir=tmp_path / "work") as runner:
        prepared = runner.prepare()
    assert prepared.env["CW_PIP_CHECK"] == "1"
    assert prepared.command[0] == sys.executable and prepared.command[1] == str(prepared.config_dir / PIP_FILE)


def test_hostile_requirements_stay_single_arguments_in_the_printed_manifests(tmp_path):
    from unit_helpers import reparse

    hostile = ["{{ names.config }}", "a: b", "#c", "x'\"y", "x --- kind: Secret", "ü==1"]
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "pip": hostile}))
    job = next(m for m in reparse(plan) if m["kind"] == "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[2 : 2 + len(hostile)] == hostile and command[2 + len(hostile)] == "--"
    assert [m["kind"] for m in reparse(plan)].count("Secret") == 0
