"""Every command's bad input ends with the exit code README.md's table gives it, and one line:
2 for an invalid config, flag or name (checked before any cluster is asked), 3 when no cluster
can be reached, 4 for what is not found. Here no kubeconfig exists, so a command that reached for
the cluster before checking its arguments would exit 3."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from unit_helpers import CONFIGS, REPO, builtin_registry

SFT = str(CONFIGS / "trl-sft.yaml")
GRPO = str(CONFIGS / "trl-grpo.yaml")

CASES = [
    # (arguments, exit code)
    (["trl", "sft", "/nonexistent.yaml", "--dry-run"], 2),
    (["trl", "sft", SFT, "--gpu", "-1", "--dry-run"], 2),
    (["trl", "sft", SFT, "--name", "BAD_NAME", "--dry-run"], 2),
    (["trl", "sft", SFT, "--nodes", "0", "--dry-run"], 2),
    (["trl", "sft", SFT, "--set", "noequals", "--dry-run"], 2),
    (["trl", "sft", SFT, "--set", "gpu=", "--dry-run"], 2),
    (["trl", "sft", SFT, "--gpu-memory", "0", "--dry-run"], 2),
    (["trl", "sft", SFT, "--timeout", "1e300", "--dry-run"], 2),
    (["trl", "grpo", GRPO, "--services", "--ttl", "99999999999999h", "--dry-run"], 2),
    (["trl", "sft", SFT, "--ttl", "6h", "--dry-run"], 2),
    (["trl", "sft", SFT, "--sweep", "lr=", "--dry-run"], 2),
    (["trl", "nosuch", SFT], 2),
    (["nosuch", "sft", SFT], 2),
    (["trl", "sft", SFT], 3),
    (["status", "BAD_NAME"], 2),
    (["status", "ok-run", "-n", "BAD_NS"], 2),
    (["status", "ok-run"], 3),
    (["logs", "BAD_NAME"], 2),
    (["logs", "ok-run", "--rank", "-1"], 2),
    (["logs", "ok-run", "--tail", "-5"], 2),
    (["logs", "ok-run", "--role", "nosuch"], 2),
    (["delete", "BAD_NAME"], 2),
    (["delete"], 2),
    (["list", "-n", "BAD_NS"], 2),
    (["list", "-o", "nosuch"], 2),
    (["list"], 3),
    (["metrics", "/nonexistent/trainer_state.json"], 4),
    (["estimate", "trl", "sft", "/nonexistent.yaml"], 2),
    (["estimate", "trl", "sft", SFT, "--gpu-memory", "0"], 2),
    (["artifacts", "BAD_NAME"], 2),
    (["artifacts", "ok-run"], 3),
    (["download", "BAD_NAME", "dest"], 2),
    (["download", "ok-run", "/proc/model"], 2),
    (["download", "ok-run", "/sys/x/y"], 2),
    (["download", "ok-run", "dest"], 3),
    (["try", "ok-run", " "], 2),
    (["try", "BAD_NAME", "hi"], 2),
    (["serve", "BAD_NAME"], 2),
    (["export", "BAD_NAME"], 2),
    (["export", "ok-run", "--push-to-hub", "org/name--x"], 2),
    (["export", "ok-run", "--push-to-hub", "org/model.git"], 2),
    (["export", "ok-run", "--wait", "--timeout", "-5"], 2),
    (["export", "ok-run", "--timeout", "60"], 2),
    (["export", "ok-run", "--to", "ftp://bucket/x"], 2),
    (["export", "ok-run", "--to", "s3://bucket/x", "--secret", "AWS_SECRET_ACCESS_KEY"], 2),
    (["export", "ok-run", "--secret", "X=creds"], 2),
    (["export", "ok-run", "--checkpoint", "../x"], 2),
    (["export", "ok-run"], 3),
    (["schema", "nosuch"], 2),
    (["completion", "nosuch"], 2),
]


@pytest.fixture
def cw(monkeypatch, tmp_path):
    from cw_cli.cli.app import build_app

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(builtin_registry())
    return lambda args: CliRunner().invoke(app, args)


@pytest.mark.parametrize(("args", "code"), CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_ends_with_the_documented_exit_code_and_no_traceback(cw, args, code):
    result = cw(args)
    assert result.exit_code == code, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert result.stdout == ""


def test_the_readme_documents_every_code_used_here():
    table = re.findall(r"^\| (\d+) \|", (REPO / "README.md").read_text(), re.MULTILINE)
    assert {str(code) for _, code in CASES} <= set(table)


def test_a_sweep_refuses_yaml_1_1_numbers_as_a_single_run_does(cw, tmp_path):
    config = tmp_path / "hex.yaml"
    config.write_text("model_name_or_path: m\ndataset_name: d\ncheckpoint_volume: c\ngpu: 0x10\n")
    result = cw(["trl", "sft", str(config), "--sweep", "learning_rate=1e-5,2e-5", "--dry-run"])
    assert result.exit_code == 2 and "0x10 is a hexadecimal number (16) only in YAML 1.1" in result.stderr
