"""Fast checks of cw's pod-side files and the local runner (no torch, no training).

Not marked ``training``: they run in the default suite in a couple of seconds."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

import pytest
from training_helpers import RUNTIME_DIR

from cw_cli.localrun.runner import (
    LocalRunError,
    LocalRunner,
    container_env,
    expand_vars,
    map_paths,
)


def _load(name: str):
    """Import a runtime file standalone, the way the pod does (not through the cw package)."""
    spec = importlib.util.spec_from_file_location(f"standalone_{name}", RUNTIME_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["cw_entrypoint", "cw_reward", "reward_server"])
def test_runtime_files_are_standalone(name):
    text = (RUNTIME_DIR / f"{name}.py").read_text()
    assert "cw_cli" not in text.replace("cw_cli/runtime", "")
    _load(name)  # imports with nothing but the stdlib at module level


# --------------------------------------------------------------------------- cw_entrypoint


def _checkpoint(root: Path, step: int, complete: bool = True) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def test_cw_entrypoint_resumes_from_newest_complete_checkpoint(tmp_path):
    launch = _load("cw_entrypoint")
    out = tmp_path / "out"
    config = tmp_path / "config.yaml"
    config.write_text(f"model_name_or_path: m\noutput_dir: {out}\n")
    argv = ["trl", "sft", "--config", str(config), "--num_processes", "8"]

    command, reason = launch.build_command(argv, environ={})
    assert command == argv and "starting fresh" in reason

    _checkpoint(out, 2)
    newest = _checkpoint(out, 10)
    _checkpoint(out, 12, complete=False)  # pod killed while saving
    (out / "checkpoint-x").mkdir()
    command, reason = launch.build_command(argv, environ={})
    assert command == argv + ["--resume_from_checkpoint", str(newest)]
    assert "resuming" in reason

    assert launch.build_command(argv, environ={"CW_AUTO_RESUME": "0"})[0] == argv
    explicit = argv + ["--resume_from_checkpoint", "x"]
    assert launch.build_command(explicit, environ={})[0] == explicit
    config.write_text(f"output_dir: {out}\nresume_from_checkpoint: {out}/checkpoint-2\n")
    assert launch.build_command(argv, environ={})[0] == argv
    # --output_dir on the command line wins over the config.
    other = tmp_path / "other"
    cp = _checkpoint(other, 5)
    config.write_text(f"output_dir: {out}\n")
    assert launch.build_command(argv + ["--output_dir", str(other)], environ={})[0][-1] == str(cp)


def test_cw_entrypoint_dry_run_and_exec(tmp_path, capfd):
    launch = _load("cw_entrypoint")
    assert launch.main(["--dry-run", "--", "echo", "hi"]) == 0
    assert json.loads(capfd.readouterr().out.strip()) == ["echo", "hi"]


def test_cw_entrypoint_claims_the_run_folder_and_refuses_another_runs(tmp_path, capfd):
    launch = _load("cw_entrypoint")
    mine = json.dumps({"framework": "trl", "type": "sft", "model": "org/a"})
    assert "claimed" in launch.claim_folder(tmp_path / "run", mine)
    assert json.loads((tmp_path / "run" / ".cw-run.json").read_text())["model"] == "org/a"
    assert "belongs to this run" in launch.claim_folder(tmp_path / "run", mine)  # a relaunch resumes
    other = json.dumps({"framework": "trl", "type": "sft", "model": "org/b"})
    with pytest.raises(SystemExit) as stop:
        launch.claim_folder(tmp_path / "run", other)
    assert stop.value.code == launch.FOREIGN_FOLDER_EXIT == 3
    err = capfd.readouterr().err
    assert "model: 'org/a' there, 'org/b' now" in err and "another --name" in err
    assert json.loads((tmp_path / "run" / ".cw-run.json").read_text())["model"] == "org/a"


def test_cw_entrypoint_resumes_under_a_changed_config_only_when_asked(tmp_path, capfd):
    launch = _load("cw_entrypoint")
    first = json.dumps({"framework": "trl", "type": "sft", "model": "org/a", "config": "aaaa"})
    changed = json.dumps({"framework": "trl", "type": "sft", "model": "org/a", "config": "bbbb"})
    launch.claim_folder(tmp_path / "run", first)
    with pytest.raises(SystemExit) as stop:
        launch.claim_folder(tmp_path / "run", changed)
    assert stop.value.code == 3
    err = capfd.readouterr().err
    assert "another config (aaaa there, bbbb now)" in err and "Relaunch with --resume" in err
    assert "continuing with a changed config" in launch.claim_folder(tmp_path / "run", changed, resume_changed=True)
    assert "belongs to this run" in launch.claim_folder(tmp_path / "run", changed)  # the folder now follows it
    # A marker from before config hashes existed is no evidence of another run.
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / ".cw-run.json").write_text(json.dumps({"framework": "trl", "type": "sft", "model": "org/a"}))
    assert "belongs to this run" in launch.claim_folder(tmp_path / "old", first)


def test_the_rendered_trainer_carries_its_config_hash_and_resume_choice(tmp_path):
    import subprocess
    import sys

    import yaml
    from training_helpers import REPO

    config = REPO / "configs" / "test-cluster-sft.yaml"

    def trainer_env(*extra: str, lr: str = "2e-5") -> dict[str, str]:
        argv = ["trl", "sft", str(config), "--name", "r", "--dry-run", "--set", f"learning_rate={lr}", *extra]
        result = subprocess.run([sys.executable, "-m", "cw_cli", *argv], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        job = next(d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Job")
        return {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}

    same, changed = json.loads(trainer_env()[launch_identity()]), json.loads(trainer_env(lr="3e-5")[launch_identity()])
    assert same["config"] == json.loads(trainer_env()[launch_identity()])["config"] != changed["config"]
    assert "CW_RESUME_CHANGED_CONFIG" not in trainer_env()
    assert trainer_env("--resume")["CW_RESUME_CHANGED_CONFIG"] == "1"


def launch_identity() -> str:
    return _load("cw_entrypoint").IDENTITY_ENV


def test_cw_entrypoint_runs_setup_steps_first_and_stops_on_their_failure(tmp_path, monkeypatch):
    launch = _load("cw_entrypoint")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CW_RUN_IDENTITY", raising=False)
    monkeypatch.setenv("CW_FAULT_TOLERANCE", "0")  # the exec path, so the command is seen, not run (cw_fault's own tests run it)
    marker = tmp_path / "setup-ran"
    touch = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    executed = []
    monkeypatch.setattr(launch.os, "execvp", lambda prog, argv: executed.append(argv))
    launch.main(["--no-resume", "--setup", json.dumps(touch), "--", "echo", "trained"])
    assert marker.exists() and executed == [["echo", "trained"]]
    failing = [sys.executable, "-c", "raise SystemExit(7)"]
    assert launch.main(["--no-resume", "--setup", json.dumps(failing), "--", "echo", "never"]) == 7
    assert executed == [["echo", "trained"]]


def test_local_runner_lays_out_configmap_items_and_binary_files(tmp_path):
    import base64

    from cw_cli.localrun.runner import configmap_files

    config_map = {"data": {"config.yaml": "a: 1\n", "ref0-t.jsonl": "{}\n"},
                  "binaryData": {"ref1-b.bin": base64.b64encode(b"\x00\xff").decode()}}  # fmt: skip
    items = [{"key": "config.yaml", "path": "config.yaml"}, {"key": "ref0-t.jsonl", "path": "files/d/t.jsonl"},
             {"key": "ref1-b.bin", "path": "files/d/b.bin"}]  # fmt: skip
    assert configmap_files(config_map, items) == {"config.yaml": "a: 1\n", "files/d/t.jsonl": "{}\n", "files/d/b.bin": b"\x00\xff"}
    assert set(configmap_files(config_map)) == {"config.yaml", "ref0-t.jsonl", "ref1-b.bin"}


# --------------------------------------------------------------------------- runner helpers


def test_map_paths_only_whole_prefixes(tmp_path):
    mounts = {"/checkpoints": tmp_path / "ck", "/etc/cw": tmp_path / "cfg"}
    text = "output_dir: /checkpoints/run\nx: '/checkpoints'\ny: /data/checkpoints/z\nz: /checkpointsX\nc: /etc/cw/config.yaml"
    mapped = map_paths(text, mounts)
    assert f"output_dir: {tmp_path}/ck/run" in mapped
    assert f"x: '{tmp_path}/ck'" in mapped
    assert "/data/checkpoints/z" in mapped and "/checkpointsX" in mapped
    assert f"{tmp_path}/cfg/config.yaml" in mapped


def test_expand_vars_like_the_kubelet():
    env = {"CW_NODE_RANK": "0", "A": "x"}
    assert expand_vars("--machine_rank=$(CW_NODE_RANK)", env) == "--machine_rank=0"
    assert expand_vars("$(MISSING) $$(A) $(A)", env) == "$(MISSING) $(A) x"


def test_container_env_literals_secrets_and_rank():
    container = {"env": [
        {"name": "PYTHONPATH", "value": "/etc/cw"},
        {"name": "B", "value": "$(PYTHONPATH)/b"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}},
        {"name": "OTHER", "valueFrom": {"secretKeyRef": {"name": "o", "key": "k"}}},
        {"name": "CW_NODE_RANK", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
    ]}
    env, missing = container_env(container, host_env={"HF_TOKEN": "t"})
    assert env == {"PYTHONPATH": "/etc/cw", "B": "/etc/cw/b", "HF_TOKEN": "t", "CW_NODE_RANK": "0"}
    assert missing == ["OTHER"]


def _manifests(command, *, completions=None, data=None):
    job = {
        "kind": "Job", "metadata": {"name": "r-trainer"},
        "spec": {"template": {"spec": {
            "containers": [{
                "name": "trainer", "command": command,
                "env": [{"name": "PYTHONPATH", "value": "/etc/cw"}, {"name": "OUT", "value": "/checkpoints/r"}],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/cw"},
                                 {"name": "checkpoints", "mountPath": "/checkpoints"},
                                 {"name": "dshm", "mountPath": "/dev/shm"}],
            }],
            "volumes": [{"name": "config", "configMap": {"name": "r-config"}},
                        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "pvc"}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        }}},
    }
    if completions:
        job["spec"]["completions"] = completions
    cm = {"kind": "ConfigMap", "metadata": {"name": "r-config"},
          "data": data or {"config.yaml": "output_dir: /checkpoints/r\nmax_steps: 10\n", "helper.py": "X = 41\n"}}
    return [job, cm]


def test_local_runner_runs_the_container_command(tmp_path):
    script = "import os, helper, pathlib; print(helper.X + 1); print(os.environ['OUT']); print(pathlib.Path('/etc/cw/config.yaml').name)"
    manifests = _manifests(["python", "-c", script + "; print(open(os.environ['CFG']).read())"])
    manifests[0]["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "CFG", "value": "/etc/cw/config.yaml"})
    runner = LocalRunner(manifests, tmp_path / "ck", workdir=tmp_path / "w", config_overrides={"max_steps": 2})
    prepared = runner.prepare()
    assert prepared.command[0] == sys.executable
    assert prepared.env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "w" / "etc-cw")
    lines: list[str] = []
    assert runner.run(lines.append) == 0
    assert lines[0] == "42"
    assert lines[1] == str(tmp_path / "ck" / "r")
    assert f"output_dir: {tmp_path / 'ck'}/r" in "\n".join(lines)
    assert "max_steps: 2" in "\n".join(lines)


def test_local_runner_finds_programs_of_the_interpreters_environment_unactivated(tmp_path):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    tool = bin_dir / "cw-test-tool"
    tool.write_text("#!/bin/sh\necho tool-ran\n")
    tool.chmod(0o755)
    manifests = _manifests(["python", "-c", "import os; os.execvp('cw-test-tool', ['cw-test-tool'])"])
    runner = LocalRunner(manifests, tmp_path / "ck", workdir=tmp_path / "w", python=str(bin_dir / "python"),
                         extra_env={"PATH": "/usr/bin:/bin"})
    assert runner.prepare().env["PATH"].split(os.pathsep)[0] == str(bin_dir)
    lines: list[str] = []
    assert runner.run(lines.append) == 0 and lines == ["tool-ran"]


def test_local_runner_reports_exit_code_and_refuses_multinode(tmp_path):
    assert LocalRunner(_manifests(["python", "-c", "raise SystemExit(3)"]), tmp_path).run() == 3
    with pytest.raises(LocalRunError, match="single-node"):
        LocalRunner(_manifests(["true"], completions=2), tmp_path).prepare()
    with pytest.raises(LocalRunError, match="trainer"):
        LocalRunner([m for m in _manifests(["true"]) if m["kind"] != "Job"], tmp_path).prepare()


def test_local_runner_stop_kills_the_process_group(tmp_path):
    runner = LocalRunner(_manifests(["python", "-c", "import time; print('up', flush=True); time.sleep(60)"]), tmp_path)
    lines = runner.lines()
    assert next(lines) == "up"
    assert runner.stop(timeout=5) is not None
    assert runner.process.poll() is not None


# --------------------------------------------------------------------------- reward protocol


class FakeScorer:
    name = "fake"
    device = "cpu"
    batch_size = 2

    def score(self, texts):
        return [float(len(t)) for t in texts]

    def format_messages(self, convs):
        return ["|".join(m["content"] for m in conv) for conv in convs]


@pytest.fixture
def fake_server():
    server_mod = _load("reward_server")
    server = server_mod.make_server(FakeScorer(), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_reward_client_standard_and_conversational(fake_server, monkeypatch):
    server, url = fake_server
    client = _load("cw_reward")
    monkeypatch.setenv("CW_REWARD_URL", url)
    monkeypatch.setenv("CW_REWARD_BATCH", "2")
    assert client.remote_reward(["ab", "c"], ["d", "efg"]) == [3.0, 4.0]
    prompts = [[{"role": "user", "content": "hi"}]] * 3
    completions = [[{"role": "assistant", "content": "x" * n}] for n in (1, 2, 3)]
    assert client.remote_reward(prompts, completions) == [4.0, 5.0, 6.0]  # "hi|x.."
    stats = server.stats.snapshot()
    assert stats["requests"] == 3 and stats["texts"] == 5 and stats["errors"] == 0


def test_reward_client_errors(fake_server, monkeypatch):
    _, url = fake_server
    client = _load("cw_reward")
    monkeypatch.delenv("CW_REWARD_URL", raising=False)
    with pytest.raises(client.RewardServerError, match="CW_REWARD_URL"):
        client.remote_reward(["a"], ["b"])
    with pytest.raises(client.RewardServerError, match="400"):
        client._post(url + "/score", {"nope": 1}, timeout=5, retries=3)
    monkeypatch.setenv("CW_REWARD_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("CW_REWARD_RETRIES", "2")
    monkeypatch.setattr(client.time, "sleep", lambda s: None)
    with pytest.raises(client.RewardServerError, match="after 2 attempts"):
        client.remote_reward(["a"], ["b"])


def test_a_callers_pythonpath_goes_in_front_of_the_containers(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/host/site")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "extra_module.py").write_text("Y = 1\n")
    script = "import extra_module, helper; print(extra_module.Y + helper.X)"
    runner = LocalRunner(_manifests(["python", "-c", script]), tmp_path / "ck", workdir=tmp_path / "w",
                         extra_env={"PYTHONPATH": str(hook)})
    run = runner.prepare()
    assert run.env["PYTHONPATH"].split(os.pathsep) == [str(hook), str(run.config_dir), "/host/site"]
    lines: list[str] = []
    assert runner.run(lines.append) == 0 and lines == ["42"]  # both the caller's and cw's modules import
