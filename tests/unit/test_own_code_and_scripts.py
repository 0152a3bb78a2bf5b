"""A user's own code: a folder or a git commit at /cw-code, a script in place of the framework's
command, a reward package next to the config; and a clear error for code cw cannot ship."""

from __future__ import annotations

import base64
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml
from unit_helpers import REPO, container, env_map, mounted_config, obj, plan_for, pod_spec, write_config

from cw_cli.errors import ConfigError
from cw_cli.runtime import cw_code

RUN = "golden-run"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OPEN_R1 = "https://github.com/huggingface/open-r1"
CORPUS = REPO / "tests" / "corpus" / "configs"


def _trainer(plan) -> dict:
    return container(obj(plan, "Job", f"{RUN}-trainer"), "trainer")


def _setups(command: list[str]) -> list[list[str]]:
    return [yaml.safe_load(command[i + 1]) for i, part in enumerate(command) if part == "--setup"]


def _project(root: Path) -> Path:
    (root / "proj" / "src" / "mypkg").mkdir(parents=True)
    (root / "proj" / "train.py").write_text("from mypkg import VALUE\nprint(VALUE)\n")
    (root / "proj" / "src" / "mypkg" / "__init__.py").write_text("VALUE = 1\n")
    # None of these ship: version control, caches, compiled files, a virtual environment.
    for junk in (".git/HEAD", "src/mypkg/__pycache__/x.cpython-311.pyc", ".venv/bin/python", "old.pyc"):
        (root / "proj" / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / "proj" / junk).write_text("junk")
    return root / "proj"


def _sft(tmp_path: Path, **extra) -> Path:
    return write_config(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara", **extra})


def test_a_code_folder_ships_packed_and_unpacks_to_the_same_files(tmp_path):
    _project(tmp_path)
    plan = plan_for("trl", "sft", _sft(tmp_path, code="./proj", script="train.py"))
    archive = base64.b64decode(obj(plan, "ConfigMap", f"{RUN}-config")["binaryData"]["cw_code.tar.gz"])
    (tmp_path / "a.tar.gz").write_bytes(archive)
    unpacked = tmp_path / "unpacked"
    assert cw_code.main(["--dest", str(unpacked), "--archive", str(tmp_path / "a.tar.gz")]) == 0
    found = sorted(p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*") if p.is_file())
    assert found == ["src/mypkg/__init__.py", "train.py"]
    assert (unpacked / "train.py").read_text() == (tmp_path / "proj" / "train.py").read_text()
    # The same files give the same bytes, so the config hash (and the resume check) holds.
    again = plan_for("trl", "sft", _sft(tmp_path, code="./proj", script="train.py"))
    assert obj(again, "ConfigMap", f"{RUN}-config")["binaryData"] == obj(plan, "ConfigMap", f"{RUN}-config")["binaryData"]


def test_the_trainer_unpacks_the_code_first_and_imports_from_it(tmp_path):
    _project(tmp_path)
    plan = plan_for("trl", "sft", _sft(tmp_path, code={"path": "proj", "install": True}, script="train.py"))
    trainer = _trainer(plan)
    command = trainer["command"]
    assert _setups(command) == [
        ["python3", "/etc/cw/cw_code.py", "--dest", "/cw-code", "--archive", "/etc/cw/cw_code.tar.gz", "--install"]
    ]
    assert command[command.index("--") + 1 :][:2] == ["accelerate", "launch"]
    assert command[-3:] == ["/cw-code/train.py", "--config", "/etc/cw/config.yaml"]
    assert env_map(trainer)["PYTHONPATH"] == "/etc/cw:/cw-code:/cw-code/src"
    assert {"name": "code", "mountPath": "/cw-code"} in trainer["volumeMounts"]
    assert {"name": "code", "emptyDir": {}} in pod_spec(obj(plan, "Job", f"{RUN}-trainer"))["volumes"]
    assert "cw_code.py" in obj(plan, "ConfigMap", f"{RUN}-config")["data"]


def test_an_open_r1_recipe_runs_open_r1s_own_script_at_a_commit(tmp_path):
    recipe = yaml.safe_load((CORPUS / "openr1-grpo-qwen2.5-1.5b.yaml").read_text())
    recipe.update(
        code={"git": OPEN_R1, "commit": COMMIT.upper(), "install": True},
        script="src/open_r1/grpo.py",
        accelerate_config="recipes/accelerate_configs/zero2.yaml",
        num_processes=7,
        vllm_mode="server",
        secrets={"HF_TOKEN": "hf", "WANDB_API_KEY": "wandb"},
    )
    plan = plan_for("trl", "grpo", write_config(tmp_path, recipe))
    command = _trainer(plan)["command"]
    assert _setups(command)[0] == [
        "python3", "/etc/cw/cw_code.py", "--dest", "/cw-code", "--git", OPEN_R1, "--commit", COMMIT, "--install",
    ]  # fmt: skip
    launch = command[command.index("--") + 1 :]
    assert launch[:4] == ["accelerate", "launch", "--num_processes", "7"]
    assert launch[launch.index("--config_file") + 1] == "/cw-code/recipes/accelerate_configs/zero2.yaml"
    assert launch[-3:] == ["/cw-code/src/open_r1/grpo.py", "--config", "/etc/cw/config.yaml"]
    mounted = mounted_config(plan)
    # open-r1's own keys reach its own parser; the launcher's keys became flags.
    assert mounted["reward_funcs"] == ["accuracy", "format", "tag_count"] and "system_prompt" in mounted
    assert not {"accelerate_config", "num_processes"} & set(mounted)
    assert mounted["vllm_server_host"] == f"{RUN}-server"  # cw's generation server, as for `trl grpo`
    assert any(m["kind"] == "Deployment" for m in plan.manifests)


def test_without_a_script_open_r1s_keys_are_still_refused_for_trl(tmp_path):
    recipe = yaml.safe_load((CORPUS / "openr1-grpo-qwen2.5-1.5b.yaml").read_text())
    recipe.update(code={"git": OPEN_R1, "commit": COMMIT}, secrets={"HF_TOKEN": "hf", "WANDB_API_KEY": "wandb"})
    with pytest.raises(ConfigError) as caught:
        plan_for("trl", "grpo", write_config(tmp_path, recipe))
    issues = "\n".join(caught.value.issues)
    assert "open-r1" in issues and "`reward_funcs`" in issues and "`system_prompt`" in issues
    assert "run the recipe's own training script" in issues and "src/open_r1/grpo.py" in issues  # the way round


def test_launcher_keys_become_accelerate_flags_and_leave_the_scripts_file(tmp_path):
    (tmp_path / "train.py").write_text("print('mine')\n")
    path = _sft(tmp_path, script="train.py", mixed_precision="bf16", dynamo_backend="no", gradient_accumulation_steps=4)
    plan = plan_for("trl", "sft", path, gpu=2)
    launch = _trainer(plan)["command"]
    launch = launch[launch.index("--") + 1 :]
    assert launch[launch.index("--mixed_precision") + 1] == "bf16" and "--dynamo_backend" in launch
    assert launch[-3:] == ["/etc/cw/train.py", "--config", "/etc/cw/config.yaml"]
    mounted = mounted_config(plan)
    assert "mixed_precision" not in mounted and mounted["gradient_accumulation_steps"] == 4  # a training key too
    assert obj(plan, "ConfigMap", f"{RUN}-config")["data"]["train.py"] == "print('mine')\n"
    assert "PYTHONPATH" in env_map(_trainer(plan)) and "code" not in str(_trainer(plan)["volumeMounts"])


def test_a_reward_package_folder_next_to_the_config_ships_importable(tmp_path):
    (tmp_path / "grpo_code" / "sub").mkdir(parents=True)
    (tmp_path / "grpo_code" / "__init__.py").write_text("from .rewards import soft_format_reward_func\n")
    (tmp_path / "grpo_code" / "rewards.py").write_text("def soft_format_reward_func(completions, **kw):\n    return [0.0]\n")
    (tmp_path / "grpo_code" / "sub" / "rewards.py").write_text("X = 2\n")
    (tmp_path / "grpo_code" / "__pycache__").mkdir()
    (tmp_path / "grpo_code" / "__pycache__" / "rewards.cpython-311.pyc").write_bytes(b"\0")
    config = {
        "base_model": "Qwen/Qwen2.5-0.5B",
        "rl": "grpo",
        "datasets": [{"path": "openai/gsm8k", "type": "grpo_code.axolotl_transform"}],
        "trl": {"reward_funcs": ["grpo_code.soft_format_reward_func"], "use_vllm": False},
        "micro_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "num_epochs": 1,
        "learning_rate": 1e-6,
    }
    plan = plan_for("axolotl", "grpo", write_config(tmp_path, config))
    configmap = obj(plan, "ConfigMap", f"{RUN}-config")
    items = {i["path"]: i["key"] for i in pod_spec(obj(plan, "Job", f"{RUN}-trainer"))["volumes"][0]["configMap"]["items"]}
    assert {p for p in items if p.startswith("grpo_code/")} == {
        "grpo_code/__init__.py", "grpo_code/rewards.py", "grpo_code/sub/rewards.py"
    }  # fmt: skip
    assert configmap["data"][items["grpo_code/sub/rewards.py"]] == "X = 2\n"
    assert any("ships the package grpo_code/" in notice for notice in plan.notices)


def test_axolotl_takes_code_but_not_a_script(tmp_path):
    _project(tmp_path)
    config = {"base_model": "Qwen/Qwen2.5-0.5B", "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}],
              "micro_batch_size": 1, "gradient_accumulation_steps": 1, "num_epochs": 1, "learning_rate": 1e-5}  # fmt: skip
    plan = plan_for("axolotl", "sft", write_config(tmp_path, {**config, "code": "proj"}))
    assert env_map(_trainer(plan))["PYTHONPATH"] == "/etc/cw:/cw-code:/cw-code/src"
    with pytest.raises(ConfigError, match=r"`axolotl` runs its own command and has no way to run yours"):
        plan_for("axolotl", "sft", write_config(tmp_path, {**config, "code": "proj", "script": "train.py"}))


@pytest.mark.parametrize(
    "code,script,expected",
    [
        ({"git": OPEN_R1, "commit": "main"}, None, "not a full commit id (40 hex digits): a branch or tag moves"),
        ({"git": OPEN_R1}, None, "`git` needs `commit`"),
        ({"git": "-oProxyCommand=touch /tmp/x", "commit": COMMIT}, None, "is not a git URL cw can clone"),
        ({"git": "https://example.com/a b", "commit": COMMIT}, None, "is not a git URL cw can clone"),
        ({"path": "proj", "commit": COMMIT}, None, "`commit` goes with `git`"),
        ({"path": "proj", "git": OPEN_R1, "commit": COMMIT}, None, "give either `path`"),
        ("proj", "../train.py", "is not a relative path to a .py file"),
        ("proj", "/abs/train.py", "is not a relative path to a .py file"),
        ("proj", "run.sh", "is not a relative path to a .py file"),
        ("proj", "missing.py", "`script`: missing.py is not a file in"),
        ("nowhere", None, "is not a folder (paths are relative to the config file)"),
        (None, "missing.py", "does not exist (relative to the config file, or to `code` when set)"),
    ],
)
def test_bad_code_and_script_settings_are_named_with_a_fix(tmp_path, code, script, expected):
    _project(tmp_path)
    extra = {key: value for key, value in (("code", code), ("script", script)) if value is not None}
    with pytest.raises(ConfigError) as caught:
        plan_for("trl", "sft", _sft(tmp_path, **extra))
    assert expected in "\n".join(caught.value.issues)


def test_a_folder_too_large_to_ship_names_git_and_the_image(tmp_path):
    _project(tmp_path)
    (tmp_path / "proj" / "weights.bin").write_bytes(os.urandom(2 * 2**20))  # does not compress
    with pytest.raises(ConfigError) as caught:
        plan_for("trl", "sft", _sft(tmp_path, code="proj"))
    message = "\n".join(caught.value.issues)
    assert "too large to ship with the run" in message and "code: {git: <url>" in message and "image" in message


def _git(*args: str, cwd: Path) -> str:
    import subprocess

    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_cw_code_checks_out_exactly_the_commit_asked_for(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    (repo / "train.py").write_text("print(1)\n")
    _git("add", ".", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one", cwd=repo)
    first = _git("rev-parse", "HEAD", cwd=repo)
    (repo / "train.py").write_text("print(2)\n")
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two", cwd=repo)
    dest = tmp_path / "code"
    dest.mkdir()
    (dest / "stale.txt").write_text("from a failed attempt")
    assert cw_code.main(["--dest", str(dest), "--git", f"file://{repo}", "--commit", first]) == 0
    assert (dest / "train.py").read_text() == "print(1)\n" and not (dest / "stale.txt").exists()
    assert _git("rev-parse", "HEAD", cwd=dest) == first
    # A restarted container finds the commit in place and keeps it.
    assert cw_code.main(["--dest", str(dest), "--git", f"file://{repo}", "--commit", first]) == 0
    assert cw_code.main(["--dest", str(tmp_path / "other"), "--git", f"file://{repo}", "--commit", "f" * 40]) != 0


def test_cw_code_refuses_an_archive_that_climbs_out_or_links(tmp_path):
    for name, kind in (("../outside.py", tarfile.REGTYPE), ("link.py", tarfile.SYMTYPE)):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w:gz") as tar:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, "/etc/passwd"
            tar.addfile(info, io.BytesIO(b""))
        archive = tmp_path / f"{kind!r}.tar.gz"
        archive.write_bytes(raw.getvalue())
        assert cw_code.main(["--dest", str(tmp_path / "dest"), "--archive", str(archive)]) == 2
    assert not (tmp_path / "outside.py").exists() and not (tmp_path / "dest" / "link.py").exists()


def test_a_code_folder_of_the_operating_system_is_refused(tmp_path):
    with pytest.raises(ConfigError) as caught:
        plan_for("trl", "sft", _sft(tmp_path, code="/proc/self"))
    assert "is a folder of the operating system" in "\n".join(caught.value.issues)
