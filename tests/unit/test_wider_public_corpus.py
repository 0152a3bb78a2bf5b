"""A wider corpus of public configs nobody here wrote (tests/corpus/wider: Axolotl's examples for
more model families, N-D parallelism, long context, reward and process reward models, GDPO and
EBFT; TRL's reward, KTO, RLOO, context-parallel and multi-node configs; more open-r1 and
alignment-handbook recipes; more verifiers files). Each runs as written through cw's dry run, is
sized as its authors ran it where the config says so, and is never refused by the memory check
on the 80 GB GPUs it trained on; what cw cannot run is refused in one clear line.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from unit_helpers import REPO, container

WIDER = REPO / "tests" / "corpus" / "wider"
INDEX = yaml.safe_load((WIDER / "index.yaml").read_text())
SECRETS = {"HF_TOKEN": "secrets.HF_TOKEN=hf", "WANDB_API_KEY": "secrets.WANDB_API_KEY=wandb",
           "OPENAI_API_KEY": "secrets.OPENAI_API_KEY=openai", "E2B_API_KEY": "secrets.E2B_API_KEY=e2b"}  # fmt: skip
#: Recipes that run open-r1's or alignment-handbook's own training scripts (their keys are not trl's).
RECIPE_SCRIPTS = {"openr1-grpo-qwen2.5-1.5b-code-e2b", "openr1-grpo-qwen2.5-1.5b-code-ioi",
                  "handbook-sft-smollm3-3b-inline-chat-template", "handbook-dpo-smollm3-3b-apo-zero",
                  "handbook-sft-zephyr-7b-gemma-full", "handbook-dpo-starchat2-15b"}  # fmt: skip
#: TOML files of other programs than verifiers' vf-rl, and what cw says they are.
FOREIGN_TOML = {"verifiers-prime-rl-wiki-search-8gpu": "prime-rl config",
                "verifiers-lab-hosted-wiki-search": "hosted-training config",
                "verifiers-hosted-rl-qwen3.5": "hosted-training config"}  # fmt: skip
#: verifiers > 0.1.9's vf-rl schema (top-level trainer keys); cw runs 0.1.9.post3's.
NEWER_SCHEMA = {"verifiers-vf-rl-reasoning-gym-6plus2"}
#: Trainer GPUs per node and nodes the authors ran, where the config itself says so (index facts:
#: parallel sizes, num_processes or the accelerate file it names).
AUTHORS_SIZES = {
    "axolotl-nd-llama3.1-8b-hsdp-tp-2node": (8, 2),  # dp_replicate 2 x dp_shard 2 x tp 4 = 16
    "axolotl-nd-qwen3-8b-fsdp-tp-cp": (8, 1),  # dp_shard 2 x tp 2 x cp 2
    "axolotl-ep-qwen3-30b-a3b-fsdp-fft-4gpu": (4, 1),  # expert_parallel 2 x dp_shard 2
    "axolotl-ep-glm-5.2-nvfp4-lora": (8, 1),  # expert_parallel 8 x dp_shard 1
    "trl-reward-clis-num-processes": (4, 1),  # num_processes: 4
    "trl-sft-alst-ulysses-sp2-4gpu": (4, 1),  # its accelerate file: num_processes 4
    "trl-sft-ring-attention-cp2-2gpu": (2, 1),  # its accelerate file: num_processes 2
    "trl-rloo-qwen2.5-72b-5node-vllm-server": (8, 4),  # num_processes 32, num_machines 4 (+1 vLLM node)
}
#: Models whose config.json is a fixture here (tests/fixtures/model_configs), by hub id.
MODEL_CONFIGS = {"meta-llama/Llama-3.1-8B": "meta-llama__Llama-3.1-8B", "Qwen/Qwen3-8B": "Qwen__Qwen3-8B",
                 "Skywork/Skywork-Reward-V2-Qwen3-8B": "Qwen__Qwen3-8B", "Qwen/Qwen2.5-3B": "Qwen__Qwen2.5-3B",
                 "Qwen/Qwen2.5-3B-Instruct": "Qwen__Qwen2.5-3B",
                 "Qwen/Qwen3-30B-A3B-Instruct-2507": "Qwen__Qwen3-30B-A3B"}  # fmt: skip


def _stem(entry: dict[str, Any]) -> str:
    return Path(entry["file"]).stem


def _type(entry: dict[str, Any]) -> str:
    return str(entry.get("rl") or entry["type"])


def _sets(entry: dict[str, Any]) -> list[str]:
    needed = entry["facts"].get("secrets_needed") or []
    return ["checkpoint_volume=ckpts", *(SECRETS[name] for name in needed if name in SECRETS)]


def _plan(entry: dict[str, Any]):
    from cw_cli import api

    return api.plan(WIDER / entry["file"], entry["framework"], _type(entry), set=_sets(entry))


REFUSED = RECIPE_SCRIPTS | set(FOREIGN_TOML) | NEWER_SCHEMA
ACCEPTED = [e for e in INDEX if _stem(e) not in REFUSED]


def test_the_wider_corpus_is_public_material_covering_every_method():
    assert len(INDEX) >= 45
    assert all((WIDER / e["file"]).read_text().startswith("# mirrors: ") for e in INDEX)
    kinds = {(e["framework"], _type(e)) for e in INDEX}
    for wanted in [("trl", "reward"), ("trl", "kto"), ("trl", "rloo"), ("axolotl", "gdpo"), ("axolotl", "ebft"),
                   ("axolotl", "dpo"), ("verifiers", "grpo")]:  # fmt: skip
        assert wanted in kinds, wanted
    assert set(AUTHORS_SIZES) | REFUSED <= {_stem(e) for e in INDEX}


@pytest.mark.parametrize("entry", ACCEPTED, ids=[_stem(e) for e in ACCEPTED])
def test_a_public_config_dry_runs_as_written(entry):
    planned = _plan(entry)
    job = planned.manifests[0]
    trainer = container(job, "trainer")
    assert trainer["workingDir"].startswith("/checkpoints/")
    cluster = planned.request.config.cluster
    if _stem(entry) in AUTHORS_SIZES:
        assert (cluster.gpu, cluster.nodes) == AUTHORS_SIZES[_stem(entry)]


def test_an_axolotl_grpo_config_that_generates_itself_gets_no_server():
    """`trl.use_vllm: false` / no vllm_mode: the trainer generates (GDPO's example), nothing is served."""
    entry = next(e for e in INDEX if _stem(e) == "axolotl-gdpo-llama3.2-1b-no-vllm")
    planned = _plan(entry)
    assert [m["kind"] for m in planned.manifests if m["kind"] in ("Deployment", "Service")] == []


@pytest.mark.parametrize("stem", sorted(RECIPE_SCRIPTS))
def test_a_recipe_for_its_projects_own_script_is_refused_naming_that_script(stem):
    from cw_cli.errors import ConfigError

    entry = next(e for e in INDEX if _stem(e) == stem)
    with pytest.raises(ConfigError) as info:
        _plan(entry)
    text = "\n".join(info.value.issues)
    assert "own scripts" in text
    if "handbook" in stem:
        assert "alignment-handbook" in text


@pytest.mark.parametrize("stem", sorted(FOREIGN_TOML))
def test_another_programs_toml_is_refused_in_one_line_saying_what_it_is(stem):
    from cw_cli.errors import ConfigError

    entry = next(e for e in INDEX if _stem(e) == stem)
    with pytest.raises(ConfigError) as info:
        _plan(entry)
    assert len(info.value.issues) == 1
    assert FOREIGN_TOML[stem] in info.value.issues[0] and "not a vf-rl config" in info.value.issues[0]


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A Hugging Face cache holding the fixtures' config.json under their hub ids (no network)."""
    fixtures = REPO / "tests" / "fixtures" / "model_configs"
    for hub_id, name in MODEL_CONFIGS.items():
        folder = tmp_path / f"models--{hub_id.replace('/', '--')}" / "snapshots" / "0"
        folder.mkdir(parents=True)
        shutil.copy(fixtures / f"{name}.json", folder / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def _model(entry: dict[str, Any]) -> Any:
    from cw_cli.config.yaml_source import load_config_file

    data = load_config_file(WIDER / entry["file"]).data
    return data.get({"axolotl": "base_model", "trl": "model_name_or_path"}.get(entry["framework"], "model"))


ESTIMATED = [e for e in ACCEPTED if _model(e) in MODEL_CONFIGS]


@pytest.mark.parametrize("entry", ESTIMATED, ids=[_stem(e) for e in ESTIMATED])
def test_the_memory_check_never_refuses_a_public_config_on_the_80gb_gpus_it_trained_on(entry, hub_cache):
    from cw_cli import api

    result = api.estimate(WIDER / entry["file"], entry["framework"], _type(entry), gpu_memory="80GB")
    assert result.estimate is not None, result.skipped
    assert not result.clearly_too_big, result.summary()


def test_long_context_and_n_d_parallel_examples_fit_as_their_authors_ran_them(hub_cache):
    """Axolotl's ALST (CP 8, tiled MLP, cut-cross-entropy), its TP x CP example and TRL's
    context-parallel config were 913, 93 and 199 GiB per GPU before parallelism was counted."""
    from cw_cli import api

    for stem in ("axolotl-alst-llama3-8b-fsdp2-cp8", "axolotl-alst-llama3-8b-deepspeed-cp8",
                 "axolotl-nd-qwen3-8b-fsdp-tp-cp", "trl-sft-ring-attention-cp2-2gpu"):  # fmt: skip
        entry = next(e for e in INDEX if _stem(e) == stem)
        result = api.estimate(WIDER / entry["file"], entry["framework"], _type(entry), gpu_memory="80GB")
        assert result.fits, (stem, result.summary())
