"""Configs as users bring them: tests/corpus/ mirrors real public configs (TRL's docs and
examples/cli_configs, open-r1, alignment-handbook, Axolotl's examples, verifiers' own vf-rl TOML
files), each naming the file it mirrors. Every one goes through the same path as ``--dry-run``
and is checked for meaning, not only acceptance: the pods are sized as the config says, outputs
land on the checkpoint volume, the files it names travel with the run, and its own keys reach
the framework unchanged except where cw documents a change. Where cw refuses, the message names
the key and the fix.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from unit_helpers import REPO, container, mounted_config, obj, plan_for, write_config

CORPUS = REPO / "tests" / "corpus"
INDEX = yaml.safe_load((CORPUS / "index.yaml").read_text())
RUN = "golden-run"
#: What a user adds for a config that pushes to the Hub or reports to wandb.
SECRET_SETS = {"HF_TOKEN": "secrets.HF_TOKEN=hf-token", "WANDB_API_KEY": "secrets.WANDB_API_KEY=wandb"}
#: Native keys cw may change, per framework (documented in docs/config.md); paths it ships are
#: checked separately.
CHANGED_BY_CW = {
    "trl": {"output_dir", "use_vllm", "vllm_mode", "vllm_server_host", "vllm_server_port", "num_processes", "reward_funcs",
            "chat_template"},
    "axolotl": {"output_dir", "rl", "vllm", "trl", "deepspeed", "auto_resume_from_checkpoints"},
    "verifiers": {"env", "environment", "inference", "trainer", "accelerate_config"},
}
#: Entries cw runs with another command than the index's type, and entries it must refuse.
COMMAND_TYPE = {"orpo": "dpo"}  # alignment-handbook's ORPO is its own script; see the refusal test
#: Keys only a recipe repository's own training script reads (alignment-handbook, open-r1): a
#: config with them is not a `trl` config, and cw says so rather than failing in the pod.
RECIPE_KEYS = {"dataset_mixer": "`datasets:`", "dataset_mixture": "`datasets:`",
               "system_prompt": "open-r1's own scripts", "dataset_prompt_column": "the `prompt` column"}  # fmt: skip


#: Flags a user passes for these: Axolotl's GRPO batch holds a whole group per trainer GPU only
#: on this many GPUs (cw refuses the default 8 with that fix; see the test below).
CW_FLAGS = {
    "axolotl-grpo-code-acecode": {"gpu": 4},
    "axolotl-grpo-colocate-no-vllm-mode-block": {"gpu": 2},
    "axolotl-grpo-qwen2.5-vllm-server": {"gpu": 1},
}


def _entries(accepted: bool) -> list[dict[str, Any]]:
    chosen = []
    for entry in INDEX:
        needs_recipe_script = entry["framework"] == "trl" and any(k in _native(entry) for k in RECIPE_KEYS)
        if entry["framework"] == "trl" and entry["type"] == "orpo":
            needs_recipe_script = True
        if needs_recipe_script != accepted:
            chosen.append(entry)
    return chosen


def _native(entry: dict[str, Any]) -> dict[str, Any]:
    """The file as cw reads it (YAML with ``2e-5`` as a number, or TOML)."""
    from cw_cli.config.yaml_source import load_config_file

    return load_config_file(CORPUS / entry["file"]).data


def _secrets(entry: dict[str, Any]) -> list[str]:
    needed = entry["facts"].get("secrets_needed") or []
    return [SECRET_SETS[name] for name in needed if name in SECRET_SETS]


def _plan(entry: dict[str, Any], *extra_sets: str):
    type_name = str(entry.get("rl") if entry["framework"] == "axolotl" and entry.get("rl") else entry["type"])
    sets = ["checkpoint_volume=ckpts", *_secrets(entry), *extra_sets]
    flags = CW_FLAGS.get(Path(entry["file"]).stem, {})
    return plan_for(entry["framework"], COMMAND_TYPE.get(type_name, type_name), CORPUS / entry["file"], sets, **flags)


def _ids(entries: list[dict[str, Any]]) -> list[str]:
    return [Path(e["file"]).stem for e in entries]


ACCEPTED = [e for e in _entries(accepted=True) if "CUDA_VISIBLE_DEVICES" not in (_native(e).get("env") or {})]


def test_the_corpus_is_large_and_covers_every_framework_and_type():
    assert len(INDEX) >= 25
    kinds = {(e["framework"], str(e.get("rl") or e["type"])) for e in INDEX}
    for wanted in [("trl", "sft"), ("trl", "dpo"), ("trl", "grpo"), ("axolotl", "sft"), ("axolotl", "dpo"),
                   ("axolotl", "kto"), ("axolotl", "orpo"), ("axolotl", "grpo"), ("verifiers", "grpo")]:  # fmt: skip
        assert wanted in kinds, wanted
    for entry in INDEX:
        first = (CORPUS / entry["file"]).read_text().splitlines()[0]
        assert first.startswith("# mirrors: ") and entry["mirrors"].split("/")[0] in first, entry["file"]


@pytest.mark.parametrize("entry", ACCEPTED, ids=_ids(ACCEPTED))
def test_public_config_runs_as_written(entry):
    plan = _plan(entry)
    framework = entry["framework"]
    job = plan.manifests[0]
    trainer = container(job, "trainer")
    mounted = mounted_config(plan, RUN)
    native = _native(entry)

    # Outputs: the trainer works in the run's folder on the volume; a relative output_dir stays
    # relative (it lands there), an absolute one is on the volume.
    assert trainer["workingDir"] == f"/checkpoints/{RUN}"
    output = mounted["trainer"]["args"]["output_dir"] if framework == "verifiers" else mounted["output_dir"]
    assert not output.startswith("/") or output.startswith("/checkpoints/"), output
    written = native.get("output_dir")
    if isinstance(written, str) and not written.startswith("/"):
        assert output == written

    # Resources as the config asks.
    gpus = int(trainer["resources"]["limits"].get("nvidia.com/gpu", 0))
    facts = entry["facts"]
    processes = facts.get("num_processes")
    if isinstance(processes, int):
        assert gpus == processes and f"--num_processes {processes}" in " ".join(trainer["command"])
    if framework == "verifiers":
        server = container(obj(plan, "Deployment", f"{RUN}-server"), "server")
        assert gpus == facts["gpus"]["trainer"]
        assert int(server["resources"]["limits"]["nvidia.com/gpu"]) == facts["gpus"]["inference"]
        assert mounted["inference"]["gpus"] == facts["gpus"]["inference"]
    vllm = native.get("vllm") if framework == "axolotl" else None
    trl_block = (native.get("trl") or {}) if framework == "axolotl" else {}
    mode = trl_block.get("vllm_mode")
    if mode is None and trl_block.get("use_vllm") is True:
        mode = "server"  # Axolotl's own default for use_vllm without vllm_mode (check_vllm_mode_set)
    if entry.get("rl") == "grpo" and mode != "server":
        # Without use_vllm, or with vllm_mode: colocate, the trainer generates on its own GPUs:
        # no server, and the user's generation settings reach TRL unchanged.
        assert not [m for m in plan.manifests if m["kind"] == "Deployment"]
        assert mounted["trl"] == native["trl"]
    elif entry.get("rl") == "grpo" and isinstance(vllm, dict) and vllm.get("tensor_parallel_size"):
        server = container(obj(plan, "Deployment", f"{RUN}-server"), "server")
        wanted = vllm["tensor_parallel_size"] * vllm.get("data_parallel_size", 1)
        assert int(server["resources"]["limits"]["nvidia.com/gpu"]) == wanted
        assert mounted["vllm"]["tensor_parallel_size"] == vllm["tensor_parallel_size"]

    # Files it names travel with the run, at the path the mounted config now gives.
    data = obj(plan, "ConfigMap", f"{RUN}-config")
    shipped = {**(data.get("data") or {}), **(data.get("binaryData") or {})}
    for relative in facts.get("referenced_files") or []:
        local = (CORPUS / entry["file"]).parent / relative
        if local.suffix == ".py":
            assert local.name in shipped, f"{relative} not shipped"
        else:
            assert any(Path(key).name.endswith(local.name) for key in shipped), f"{relative} not shipped: {list(shipped)}"
            assert f"/etc/cw/files/{local.name}" in yaml.safe_dump(mounted), f"{relative} not rewritten"

    # The config's own keys arrive unchanged, except the ones cw documents.
    from cw_cli.config.models import CLUSTER_FIELDS
    from cw_cli.frameworks.trl import RENAMED_KEYS

    changed = CHANGED_BY_CW[framework] | {keys[0] for keys in _file_keys(framework)}
    for key, value in native.items():
        if key in changed or (key in CLUSTER_FIELDS and not (framework == "verifiers" and key == "env")):
            continue
        if framework == "trl" and key in RENAMED_KEYS:  # documented: passed under the current name
            assert key not in mounted and (RENAMED_KEYS[key] is None or mounted[RENAMED_KEYS[key]] == value)
            continue
        assert mounted.get(key) == value, f"`{key}` changed: {value!r} -> {mounted.get(key)!r}"


def _file_keys(framework: str) -> tuple[tuple[str, ...], ...]:
    from unit_helpers import builtin_registry

    return next(f for f in builtin_registry().all() if f.name == framework).framework.file_keys


NEEDS_SECRETS = [e for e in ACCEPTED if e["facts"].get("secrets_needed")]


@pytest.mark.parametrize("entry", NEEDS_SECRETS[:6], ids=_ids(NEEDS_SECRETS[:6]))
def test_a_config_that_pushes_or_reports_without_its_secret_is_refused_with_the_fix(entry, tmp_path):
    from cw_cli.errors import ConfigError

    type_name = str(entry.get("rl") or entry["type"])
    with pytest.raises(ConfigError) as info:
        plan_for(entry["framework"], type_name, CORPUS / entry["file"], ["checkpoint_volume=ckpts"])
    text = "\n".join(info.value.issues)
    for variable in entry["facts"]["secrets_needed"]:
        if variable in SECRET_SETS:
            assert f"needs {variable}" in text and f"secrets: {{{variable}: <Secret name>}}" in text


RECIPE_ONLY = _entries(accepted=False)


@pytest.mark.parametrize("entry", [e for e in RECIPE_ONLY if e["type"] != "orpo"], ids=_ids([e for e in RECIPE_ONLY if e["type"] != "orpo"]))
def test_recipe_script_keys_are_refused_naming_the_key_and_what_trl_takes(entry):
    from cw_cli.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        _plan(entry)
    text = "\n".join(info.value.issues)
    for key, fix in RECIPE_KEYS.items():
        if key in _native(entry):
            line = next(line for line in text.splitlines() if f"`{key}`" in line)
            assert fix in line, line


def test_cuda_visible_devices_in_a_trl_env_block_is_refused_with_the_fix():
    from cw_cli.errors import ConfigError

    entry = next(e for e in INDEX if "CUDA_VISIBLE_DEVICES" in (_native(e).get("env") or {}))
    with pytest.raises(ConfigError) as info:
        plan_for("trl", entry["type"], CORPUS / entry["file"], ["checkpoint_volume=ckpts", *_secrets(entry)])
    text = "\n".join(info.value.issues)
    assert "`env.CUDA_VISIBLE_DEVICES`" in text and "set `gpu` (or --gpu)" in text


def test_a_deepspeed_path_into_axolotls_own_repo_points_at_the_image_copy():
    entry = next(e for e in INDEX if "deepspeed-zero1-missing" in e["file"])
    mounted = mounted_config(_plan(entry), RUN)
    assert mounted["deepspeed"] == "/workspace/axolotl/deepspeed_configs/zero1.json"


def test_verifiers_toml_and_its_yaml_form_with_env_render_the_same_run(tmp_path):
    toml_entry = next(e for e in INDEX if e["file"].endswith("verifiers-wiki-search.toml"))
    yaml_entry = next(e for e in INDEX if e["file"].endswith("verifiers-wiki-search-env.yaml"))
    for entry in (toml_entry, yaml_entry):
        mounted = mounted_config(_plan(entry), RUN)
        assert mounted["env"] == _native(entry)["env"]  # vf-rl's [env], whichever file form
        assert set(mounted) >= {"model", "env", "inference", "trainer"} and "environment" not in mounted


def test_trl_grpo_without_server_mode_gets_no_generation_server_as_in_trl():
    for entry in INDEX:
        native = _native(entry)
        if entry["framework"] == "trl" and entry["type"] == "grpo" and native.get("vllm_mode") != "server" and entry in ACCEPTED:
            kinds = {m["kind"] for m in _plan(entry).manifests}
            assert "Deployment" not in kinds, entry["file"]


def test_a_relocated_corpus_copy_still_finds_its_files(tmp_path):
    """Files are found relative to the config file, wherever the user keeps the folder."""
    shutil.copytree(CORPUS, tmp_path / "corpus")
    entry = next(e for e in INDEX if e["facts"].get("referenced_files") and e["framework"] == "axolotl"
                 and Path(e["file"]).stem not in CW_FLAGS)  # fmt: skip
    moved = tmp_path / "corpus" / entry["file"]
    plan = plan_for(entry["framework"], str(entry.get("rl") or entry["type"]), moved,
                    ["checkpoint_volume=ckpts", *_secrets(entry)])  # fmt: skip
    data = obj(plan, "ConfigMap", f"{RUN}-config")
    shipped = {**(data.get("data") or {}), **(data.get("binaryData") or {})}
    for relative in entry["facts"]["referenced_files"]:
        name = Path(relative).name
        assert any(key == name or key.endswith(f"-{name}") for key in shipped), f"{relative} not shipped from {moved.parent}"
        assert any(name in note and "ships" in note for note in plan.notices), plan.notices


@pytest.mark.parametrize("stem", sorted(CW_FLAGS))
def test_an_axolotl_grpo_batch_runs_on_the_default_gpus_under_trls_rule(stem):
    """TRL's rule (GRPOConfig): micro batch x processes x steps per generation must be a multiple
    of num_generations; a group need not fit in one process, so the default 8 GPUs are fine."""
    entry = next(e for e in INDEX if Path(e["file"]).stem == stem)
    plan = plan_for("axolotl", "grpo", CORPUS / entry["file"], ["checkpoint_volume=ckpts", *_secrets(entry)])
    assert int(container(plan.manifests[0], "trainer")["resources"]["limits"]["nvidia.com/gpu"]) == 8


def test_an_axolotl_grpo_batch_trl_would_refuse_is_refused_with_a_count_that_fits(tmp_path):
    from cw_cli.errors import ConfigError

    data = {"base_model": "m", "datasets": [{"path": "p", "type": "t"}], "rl": "grpo", "micro_batch_size": 1,
            "gradient_accumulation_steps": 1, "trl": {"num_generations": 4, "reward_funcs": ["r.f"]}}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        plan_for("axolotl", "grpo", write_config(tmp_path, data), gpu=6)
    text = "\n".join(info.value.issues)
    assert "(1 x 6 x 1) = 6 must be a multiple of `trl.num_generations: 4`" in text and "(--gpu 4)" in text
