"""A run's outputs stay on its checkpoint volume, it states where they go, and its data volumes,
shared Hugging Face cache and the local files its config names reach the pods as documented."""

from __future__ import annotations

import base64

import pytest
from unit_helpers import container, env_map, mounted_config, obj, plan_for, pod_spec, write_config

from cw_cli.errors import ConfigError

RUN = "golden-run"
SFT = {"model_name_or_path": "m", "dataset_name": "d"}
GRPO_SERVER = {**SFT, "use_vllm": True, "vllm_mode": "server"}


def _decisions(plan) -> list[str]:
    """The plan's notices less the one saying a hub dataset's columns were not checked (not cached here)."""
    return [n for n in plan.notices if "its columns were not checked" not in n]


def _issues(error: pytest.ExceptionInfo[ConfigError]) -> str:
    return "\n".join(error.value.issues) + "\n" + (error.value.hint or "")


def test_the_trainer_works_in_the_runs_folder_so_relative_outputs_land_on_the_volume(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "output_dir": "data/Qwen-SFT"}))
    assert container(plan.manifests[0], "trainer")["workingDir"] == f"/checkpoints/{RUN}"
    assert mounted_config(plan)["output_dir"] == "data/Qwen-SFT"
    assert not _decisions(plan)


@pytest.mark.parametrize(
    "framework,type_name,data,path",
    [
        ("trl", "sft", {**SFT, "output_dir": "/home/me/runs/qwen"}, ("output_dir",)),
        ("axolotl", "sft", {"base_model": "m", "datasets": [{"path": "p", "type": "alpaca"}], "output_dir": "/tmp/out"},
         ("output_dir",)),
    ],
)  # fmt: skip
def test_an_absolute_output_path_off_the_volume_is_moved_into_the_runs_folder_with_a_note(
    tmp_path, framework, type_name, data, path
):
    plan = plan_for(framework, type_name, write_config(tmp_path, data))
    written = data[path[0]]
    moved = f"/checkpoints/{RUN}/{written.rsplit('/', 1)[-1]}"
    assert mounted_config(plan)[path[0]] == moved
    assert any(f"`output_dir: {written}` is outside the checkpoint volume" in n and moved in n for n in plan.notices)


def test_an_output_path_already_on_the_volume_is_kept(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "output_dir": "/checkpoints/shared/sft"}))
    assert mounted_config(plan)["output_dir"] == "/checkpoints/shared/sft" and not _decisions(plan)


def test_a_run_without_a_checkpoint_volume_is_refused_with_both_choices(tmp_path):
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, "checkpoint_volume": None}))
    text = _issues(info)
    assert "`checkpoint_volume` is not set" in text and "lost when its pod ends" in text
    assert "checkpoint_volume: <PersistentVolumeClaim>" in text and "checkpoint_volume: none" in text


def test_checkpoint_volume_none_is_a_stated_choice_with_a_loud_warning_and_a_scratch_folder(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "checkpoint_volume": "none"}))
    volumes = {v["name"]: v for v in pod_spec(plan.manifests[0])["volumes"]}
    assert volumes["checkpoints"] == {"name": "checkpoints", "emptyDir": {}}
    assert any("LOST when the pod ends" in n for n in plan.notices)


def test_a_config_that_pushes_to_the_hub_may_run_without_a_volume_with_a_warning(tmp_path):
    data = {**SFT, "checkpoint_volume": None, "push_to_hub": True, "secrets": {"HF_TOKEN": "hf"}}
    plan = plan_for("trl", "sft", write_config(tmp_path, data))
    assert any("only what the trainer pushes to the Hugging Face Hub is kept" in n for n in plan.notices)


def test_a_local_run_needs_no_volume(tmp_path):
    from unit_helpers import builtin_registry, load

    from cw_cli.render.plan import RunRequest, build_plan

    path = write_config(tmp_path, {**SFT, "checkpoint_volume": None})
    loaded, training_type = builtin_registry().resolve_type("trl", "sft")
    plan = build_plan(RunRequest(loaded, training_type, load("trl", "sft", path), RUN, local=True))
    assert plan.owner_name and not _decisions(plan)


def test_the_trainer_carries_its_run_identity_for_the_launcher(tmp_path):
    import json

    plan = plan_for("axolotl", "sft", write_config(tmp_path, {"base_model": "org/m", "datasets": [{"path": "p"}]}))
    trainer = container(plan.manifests[0], "trainer")
    identity = json.loads(env_map(trainer)["CW_RUN_IDENTITY"])
    config_hash = identity.pop("config")
    assert identity == {"framework": "axolotl", "type": "sft", "model": "org/m"}
    assert len(config_hash) == 16 and int(config_hash, 16) >= 0  # a hash of the mounted config
    assert trainer["command"][:4] == ["python3", "/etc/cw/cw_entrypoint.py", "--no-resume", "--"]


def test_data_volumes_are_read_only_by_default_on_every_pod_and_the_hf_cache_is_shared(tmp_path):
    data = {
        **GRPO_SERVER,
        "volumes": {"datasets": "/data", "scratch": {"path": "/scratch", "read_only": False}},
        "hf_cache_volume": "hf-cache",
    }
    plan = plan_for("trl", "grpo", write_config(tmp_path, data))
    for manifest, role in ((plan.manifests[0], "trainer"), (obj(plan, "Deployment", f"{RUN}-server"), "server")):
        mounts = {m["mountPath"]: m for m in container(manifest, role)["volumeMounts"]}
        claims = {
            v["name"]: v["persistentVolumeClaim"] for v in pod_spec(manifest)["volumes"] if "persistentVolumeClaim" in v
        }
        assert mounts["/data"]["readOnly"] is True and mounts["/scratch"]["readOnly"] is False
        assert claims[mounts["/data"]["name"]] == {"claimName": "datasets", "readOnly": True}
        assert claims[mounts["/hf-cache"]["name"]] == {"claimName": "hf-cache"}
        assert env_map(container(manifest, role))["HF_HOME"] == "/hf-cache"


@pytest.mark.parametrize(
    "volumes,message",
    [
        ({"d": "data"}, "must be a normalised absolute path"),
        ({"d": "/checkpoints/data"}, "overlaps /checkpoints"),
        ({"d": "/etc"}, "overlaps /etc/cw"),
        ({"d": "/data", "e": "/data/sub"}, "give each its own folder"),
        ({"d": "/data\nkind: Secret"}, "must be a normalised absolute path"),
        ({"Not_A_Claim": "/data"}, "not a valid Kubernetes object name"),
    ],
)
def test_bad_volumes_are_refused_naming_the_field(tmp_path, volumes, message):
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, "volumes": volumes}))
    text = _issues(info)
    assert "`volumes" in text and message in text


def test_hf_home_and_the_shared_cache_together_are_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, "hf_cache_volume": "c", "env": {"HF_HOME": "/x"}}))
    assert "`env.HF_HOME` and `hf_cache_volume`" in _issues(info)


def test_a_referenced_folder_ships_with_its_layout_and_binary_files_as_binary_data(tmp_path):
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "train" / "part.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "data" / "blob.parquet").write_bytes(b"PAR1\x00\xff\xfe")
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "dataset_name": "data"}))
    assert mounted_config(plan)["dataset_name"] == "/etc/cw/files/data"
    config_map = obj(plan, "ConfigMap", f"{RUN}-config")
    volume = next(v for v in pod_spec(plan.manifests[0])["volumes"] if v["name"] == "config")
    paths = {item["path"]: item["key"] for item in volume["configMap"]["items"]}
    assert {"config.yaml", "cw_entrypoint.py", "cw_fault.py", "cw_progress.py", "files/data/train/part.jsonl", "files/data/blob.parquet"} == set(paths)
    assert config_map["data"][paths["files/data/train/part.jsonl"]] == '{"text": "a"}\n'
    assert base64.b64decode(config_map["binaryData"][paths["files/data/blob.parquet"]]) == b"PAR1\x00\xff\xfe"
    assert any("`dataset_name`: ships data" in n for n in plan.notices)


def test_a_path_that_is_not_here_is_left_to_the_framework(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "dataset_name": "trl-lib/Capybara"}))
    assert mounted_config(plan)["dataset_name"] == "trl-lib/Capybara"
    assert plan.notices == [
        "`dataset_name`: trl-lib/Capybara is not in the local Hugging Face cache: its columns were not checked"
    ]


def test_a_referenced_file_over_the_configmap_limit_is_refused_with_the_volume_hint(tmp_path):
    with open(tmp_path / "big.jsonl", "wb") as fh:
        fh.truncate(3 * 2**20)  # sparse: the check reads sizes, not contents
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, "dataset_name": "big.jsonl"}))
    text = _issues(info)
    assert "`dataset_name: big.jsonl` is 3.00 MiB" in text and "volumes: {my-data: /data}" in text


def test_files_of_any_type_ship_and_the_total_is_checked(tmp_path):
    (tmp_path / "template.jinja").write_text("{{ messages }}")
    (tmp_path / "a.txt").write_text("x" * (700 * 1024))
    (tmp_path / "b.txt").write_text("y" * (400 * 1024))
    plan = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "files": ["template.jinja"]}))
    assert obj(plan, "ConfigMap", f"{RUN}-config")["data"]["template.jinja"] == "{{ messages }}"
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, "files": ["a.txt", "b.txt"]}))
    assert "over the 1 MiB a ConfigMap holds" in _issues(info) and "a.txt" in _issues(info)


def test_a_reward_module_named_by_a_dotted_path_ships_importable(tmp_path):
    (tmp_path / "my_rewards.py").write_text("def short(**kw):\n    return [0.0]\n")
    plan = plan_for("trl", "grpo", write_config(tmp_path, {**SFT, "reward_funcs": ["my_rewards.short", "accuracy_reward"]}))
    assert "def short" in obj(plan, "ConfigMap", f"{RUN}-config")["data"]["my_rewards.py"]
    assert mounted_config(plan)["reward_funcs"] == ["my_rewards.short", "accuracy_reward"]
