"""verifiers runs: the vf-rl TOML cw mounts, the commands of both pods, and the checks made before a run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml
from unit_helpers import CONFIGS, container, kinds_and_names, obj, plan_for, write_config

from cw_cli.errors import ConfigError
from cw_cli.frameworks.verifiers import VERIFIERS_STACK, WEIGHT_SYNC_PORT, server_flags

RUN = "golden-run"
EXAMPLE = CONFIGS / "verifiers-grpo.yaml"


def _example(tmp_path: Path, change: dict[str, Any] | None = None, drop: tuple[str, ...] = ()) -> Path:
    """configs/verifiers-grpo.yaml with top-level keys changed or dropped, beside its environment file."""
    data = yaml.safe_load(EXAMPLE.read_text())
    for key in drop:
        data.pop(key)
    data.update(change or {})
    shutil.copy(CONFIGS / "cw_reverse_text.py", tmp_path)
    return write_config(tmp_path, data)


def _trainer_args(**args: Any) -> dict[str, Any]:
    return {"trainer": {"args": {**yaml.safe_load(EXAMPLE.read_text())["trainer"]["args"], **args}}}


def _toml(plan) -> dict[str, Any]:
    return tomllib.loads(obj(plan, "ConfigMap", f"{RUN}-config")["data"]["config.toml"])


def _problems(path: Path, **flags: Any) -> str:
    with pytest.raises(ConfigError) as info:
        plan_for("verifiers", "grpo", path, **flags)
    return "\n".join(info.value.issues)


def test_mounted_toml_has_vf_rl_sections_and_the_runs_server():
    config = _toml(plan_for("verifiers", "grpo", EXAMPLE))
    assert config["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert config["env"] == {"id": "cw-reverse-text", "args": {"num_examples": 512}}
    assert "environment" not in config and "gpu" not in config and "files" not in config
    assert config["inference"] == {"gpus": 2, "args": {"enforce_eager": True, "max_model_len": 2048}}
    args = config["trainer"]["args"]
    assert config["trainer"]["gpus"] == 4
    assert args["vllm_server_host"] == f"{RUN}-server" and args["vllm_server_port"] == 8000
    assert args["output_dir"] == f"/checkpoints/{RUN}" and args["run_name"] == RUN
    assert args["report_to"] == "none" and isinstance(args["learning_rate"], float)


def test_trainer_runs_verifiers_own_vf_train_under_deepspeed_after_installing_its_stack():
    plan = plan_for("verifiers", "grpo", EXAMPLE)
    command = container(plan.manifests[0], "trainer")["command"]
    cut = command.index("--")
    assert command[:2] == ["python3", "/etc/cw/cw_pip.py"] and command[2:cut] == list(VERIFIERS_STACK)
    assert command[cut + 1 : cut + 5] == ["python3", "/etc/cw/cw_entrypoint.py", "--no-resume", "--"]
    assert command[cut + 5 :] == [
        "accelerate", "launch", "--use_deepspeed", "--zero_stage", "3", "--num_processes", "4",
        "-m", "verifiers.scripts.train", "@", "/etc/cw/config.toml",
    ]  # fmt: skip
    data = obj(plan, "ConfigMap", f"{RUN}-config")["data"]
    assert set(data) == {"config.toml", "cw_reverse_text.py", "cw_pip.py", "cw_entrypoint.py", "cw_fault.py", "cw_progress.py", "cw_keeper.py",
                         "cw_pod_api.py",
                         "cw_vf_resume.py"}  # fmt: skip


def test_server_runs_vf_vllm_with_inference_args_and_exposes_the_weight_sync_port():
    plan = plan_for("verifiers", "grpo", EXAMPLE)
    deployment = obj(plan, "Deployment", f"{RUN}-server")
    command = container(deployment, "server")["command"]
    vf = command[command.index("--") + 1 :]
    assert vf[:3] == ["vf-vllm", "--model", "Qwen/Qwen2.5-0.5B-Instruct"]
    assert vf[3:6] == ["--enforce-eager", "--max-model-len", "2048"]
    assert vf[vf.index("--data-parallel-size") + 1] == "2" and vf[vf.index("--port") + 1] == "8000"
    service = obj(plan, "Service", f"{RUN}-server")["spec"]
    service_ports = {p["name"]: p["port"] for p in service["ports"]}
    assert service_ports["weight-sync"] == WEIGHT_SYNC_PORT == 51216
    # vf-vllm binds its rendezvous to vllm_server_host: the name must resolve to the pod itself.
    assert service["clusterIP"] == "None" and service["publishNotReadyAddresses"] is True
    pod_ports = {p["containerPort"] for p in container(deployment, "server")["ports"]}
    assert {8000, WEIGHT_SYNC_PORT} <= pod_ports


def test_other_frameworks_keep_cluster_ip_services():
    plan = plan_for("trl", "grpo", CONFIGS / "trl-grpo.yaml")
    for service in (m for m in plan.manifests if m["kind"] == "Service" and not m["metadata"]["name"].endswith("-nodes")):
        assert "clusterIP" not in service["spec"], service["metadata"]["name"]


def test_an_image_of_ones_own_is_trusted_to_hold_verifiers(tmp_path):
    plan = plan_for("verifiers", "grpo", _example(tmp_path, {"image": "registry.example/vf:1"}))
    assert container(plan.manifests[0], "trainer")["command"][4:6] == ["accelerate", "launch"]
    assert container(obj(plan, "Deployment", f"{RUN}-server"), "server")["command"][0] == "vf-vllm"
    assert "cw_pip.py" not in obj(plan, "ConfigMap", f"{RUN}-config")["data"]


def test_a_user_script_replaces_vf_train_with_the_same_arguments(tmp_path):
    (tmp_path / "my_train.py").write_text("print('train')\n")
    plan = plan_for("verifiers", "grpo", _example(tmp_path, {"script": "my_train.py", "accelerate_config": "multi_gpu"}))
    command = container(plan.manifests[0], "trainer")["command"]
    assert command[-3:] == ["/etc/cw/my_train.py", "@", "/etc/cw/config.toml"] and "--use_deepspeed" not in command
    assert "script" not in _toml(plan)  # a cw field: vf-train's arguments are the TOML's own


@pytest.mark.parametrize(
    "change,field,fix",
    [
        ({"trainer": {"gpus": 8}}, "`trainer.gpus: 8`", "remove `gpu`"),
        ({"inference": {"gpus": 1}}, "`inference.gpus: 1`", "remove `services.server.gpu`"),
    ],
)
def test_vf_rl_gpu_counts_that_disagree_with_the_pods_are_refused(tmp_path, change, field, fix):
    text = _problems(_example(tmp_path, change))
    assert field in text and fix in text and "verifiers-grpo" not in text and "config.yaml" in text


def test_vf_rl_gpu_counts_that_agree_are_kept(tmp_path):
    config = _toml(plan_for("verifiers", "grpo", _example(tmp_path, {"trainer": {"gpus": 4}})))
    assert config["trainer"]["gpus"] == 4


def test_batch_that_trainer_processes_cannot_split_is_refused_with_a_size_that_works(tmp_path):
    text = _problems(_example(tmp_path, _trainer_args(batch_size=100)), gpu=3)
    assert "`trainer.args.batch_size: 100`" in text and "micro_batch_size (8)" in text
    suggested = int(text.rsplit("try batch_size: ", 1)[1].split()[0])
    plan = plan_for("verifiers", "grpo", _example(tmp_path, _trainer_args(batch_size=suggested)), gpu=3)
    assert _toml(plan)["trainer"]["args"]["batch_size"] == suggested


def test_nodes_count_in_the_batch_check(tmp_path):
    path = _example(tmp_path, _trainer_args(batch_size=64))
    assert plan_for("verifiers", "grpo", path, gpu=4, nodes=2)  # 64 = 8 x 8 processes
    assert "trainer processes (12)" in _problems(path, gpu=4, nodes=3)


def test_single_rollout_per_example_is_refused(tmp_path):
    assert "rollouts_per_example" in _problems(_example(tmp_path, _trainer_args(rollouts_per_example=1)))


@pytest.mark.parametrize(
    "change,expected",
    [
        ({"inference": {"args": {"model": "x"}}}, "`inference.args.model: x` is set by cw from `model`"),
        ({"inference": {"args": {"host": "127.0.0.1"}}}, "`inference.args.host: 127.0.0.1` is set by cw"),
        ({"inference": {"args": {"api_key": ["a", "b"]}}}, "`inference.args.api_key`: a list"),
        ({"trainer": {"args": {"vllm_server_host": "elsewhere"}}}, "`trainer.args.vllm_server_host: elsewhere` is set by cw"),
        ({"environment": {"id": "e", "args": {"difficulty": None}}}, "`environment.args.difficulty` is null"),
        ({"environment": {"args": {}}}, "`env.id` must name"),
        ({"environment": "cw-reverse-text"}, "`env.id` must name"),
        ({"accelerate_config": "zero4"}, "`accelerate_config: zero4`"),
        ({"script": "train.sh"}, "is not a relative path to a .py file"),
        ({"max_steps": 10}, "`max_steps` is not read by verifiers' vf-train; trainer settings go under `trainer.args`"),
        ({"trainer": {"max_steps": 10}}, "`trainer.max_steps` is not read"),
        ({"inference": {"enforce_eager": True}}, "`inference.enforce_eager` is not read"),
    ],
)
def test_bad_verifiers_fields_are_named_with_a_fix(tmp_path, change, expected):
    assert expected in _problems(_example(tmp_path, change))


def test_missing_environment_is_named(tmp_path):
    assert "missing `env` or `environment`" in _problems(_example(tmp_path, drop=("environment",)))


HOSTILE = ['"]\n[trainer.args]\nvllm_server_host = "evil"\n#', "line\nbreak", "{{ names.config }}", "--- \nkind: Secret", "ü 日本 😀"]


@pytest.mark.parametrize("value", HOSTILE, ids=[f"h{i}" for i in range(len(HOSTILE))])
def test_hostile_strings_stay_values_in_toml_and_manifests(tmp_path, value):
    change = {"environment": {"id": "cw-reverse-text", "args": {value: value, "note": value}}, **_trainer_args(run_name=value)}
    plan = plan_for("verifiers", "grpo", _example(tmp_path, change))
    config = _toml(plan)
    assert config["env"]["args"] == {value: value, "note": value}
    assert config["trainer"]["args"]["run_name"] == value
    assert config["trainer"]["args"]["vllm_server_host"] == f"{RUN}-server"
    assert [kind for kind, _ in kinds_and_names(plan)].count("Secret") == 0


def test_server_flags_follow_vf_rl_conventions():
    flags = server_flags({"enforce_eager": True, "trust_remote_code": False, "hf_overrides": {"a": 1}, "max_num_seqs": 64})
    assert flags == ["--enforce-eager", "--hf-overrides", '{"a": 1}', "--max-num-seqs", "64"]


def test_vf_rl_server_settings_size_the_server_and_cw_settings_written_alike_are_accepted(tmp_path):
    """vf-rl's own `inference.args.tensor_parallel_size` / `port` set cw's server; the same values
    written for cw's managed flags are not errors, and the server command carries each flag once."""
    change = {
        "services": {"server": {"gpu": None}},
        "inference": {"gpus": 4, "args": {"tensor_parallel_size": 2, "port": 9000, "host": "0.0.0.0"}},
        "trainer": {"args": {"vllm_server_port": 9000}},
    }
    plan = plan_for("verifiers", "grpo", _example(tmp_path, change))
    vf = container(obj(plan, "Deployment", f"{RUN}-server"), "server")["command"]
    vf = vf[vf.index("vf-vllm") :]
    assert vf[vf.index("--tensor-parallel-size") + 1] == "2" and vf[vf.index("--data-parallel-size") + 1] == "2"
    assert vf.count("--port") == 1 and vf[vf.index("--port") + 1] == "9000" and vf.count("--host") == 1
    deployment = obj(plan, "Deployment", f"{RUN}-server")
    assert container(deployment, "server")["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert _toml(plan)["trainer"]["args"]["vllm_server_port"] == 9000
