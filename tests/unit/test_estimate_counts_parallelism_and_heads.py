"""The estimate's terms for what published configs use: tensor, context and sequence parallelism,
the FSDP shard group, FSDP's own activation checkpointing, a tiled MLP, a fused loss that never
builds the logits, a reward model's classifier head; and a run with a setting it does not count is
never refused. Each test fails without its term.
"""

from __future__ import annotations

import json

import pytest
from msgspec.structs import replace
from unit_helpers import REPO, write_config

LLAMA_8B = json.loads((REPO / "tests/fixtures/model_configs/meta-llama__Llama-3.1-8B.json").read_text())
BASE = dict(method="full", weight_dtype="bf16", mixed_precision="bf16", fsdp=True, gpus_per_node=8, micro_batch=1,
            seq_len=16384, gradient_checkpointing=True, attention="flash_attention_2", fused_lm_head=True)  # fmt: skip


def _trainer(**changes):
    from cw_cli.estimate.memory import TrainingSetup, estimate_memory

    return estimate_memory(LLAMA_8B, TrainingSetup(**{**BASE, **changes})).trainer


def test_tensor_parallelism_keeps_one_slice_of_the_linears_per_rank():
    alone, tp2 = _trainer(), _trainer(tensor_parallel=2)
    # FSDP shards over the 4 data ranks instead of 8 (x2), and TP halves the linears and the head
    # (most of 8B; the embedding and norms stay whole)
    assert 0.5 < tp2.weights_bytes / (2 * alone.weights_bytes) < 0.6
    assert tp2.activations_no_checkpointing_bytes < alone.activations_no_checkpointing_bytes


def test_context_parallelism_splits_every_sequence_over_its_ranks():
    alone, cp4 = _trainer(), _trainer(context_parallel=4)
    assert cp4.tokens_per_micro_batch * 4 == alone.tokens_per_micro_batch
    assert cp4.activations_bytes == pytest.approx(alone.activations_bytes / 4, rel=0.01)


def test_an_hsdp_shard_group_smaller_than_the_world_holds_more_per_rank():
    world, group = _trainer(gpus_per_node=8, nodes=2), _trainer(gpus_per_node=8, nodes=2, shard_group=8)
    assert group.optimizer_states_bytes == pytest.approx(world.optimizer_states_bytes * 2, rel=0.01)


def test_a_tiled_mlp_keeps_one_tiles_intermediates():
    plain = _trainer(gradient_checkpointing=False)
    tiled = _trainer(gradient_checkpointing=False, tiled_mlp=True)
    assert tiled.activations_bytes < 0.75 * plain.activations_bytes


def test_a_reward_models_classifier_head_has_no_vocabulary_sized_logits():
    from cw_cli.estimate.memory import TrainingSetup, estimate_memory

    lm = estimate_memory(LLAMA_8B, TrainingSetup(**{**BASE, "fused_lm_head": False}))
    reward = estimate_memory(LLAMA_8B, TrainingSetup(**{**BASE, "fused_lm_head": False, "score_labels": 1}))
    assert lm.trainer.logits_bytes > 10 * 1024**3  # 16k tokens x 128k vocabulary x 12 bytes
    assert reward.trainer.logits_bytes < 1024**2
    assert lm.parameters - reward.parameters == LLAMA_8B["vocab_size"] * LLAMA_8B["hidden_size"] - LLAMA_8B["hidden_size"]


def test_fsdp_activation_checkpointing_in_an_accelerate_file_counts_as_checkpointing(tmp_path):
    from cw_cli.config.models import ClusterSpec
    from cw_cli.frameworks.trl.setup import read_setup

    (tmp_path / "fsdp.yaml").write_text(
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_activation_checkpointing: true\n"
        "parallelism_config:\n  parallelism_config_cp_size: 2\n  parallelism_config_dp_shard_size: 4\n"
    )
    native = {"model_name_or_path": "m", "gradient_checkpointing": False, "accelerate_config": "fsdp.yaml"}
    setup = read_setup("sft", native, ClusterSpec(gpu=8), tmp_path, None).setup
    assert setup is not None
    assert setup.gradient_checkpointing and setup.fsdp
    assert (setup.context_parallel, setup.shard_group) == (2, 8)


def test_axolotl_n_d_sizes_and_plugins_reach_the_setup():
    from cw_cli.config.models import ClusterSpec
    from cw_cli.frameworks.axolotl.setup import read_setup

    native = {"base_model": "m", "tensor_parallel_size": 2, "context_parallel_size": 2, "dp_shard_size": 2,
              "tiled_mlp": True, "plugins": ["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"],
              "fsdp_config": {"fsdp_version": 2, "activation_checkpointing": True}, "process_reward_model": True}  # fmt: skip
    setup = read_setup("sft", native, ClusterSpec(gpu=8), None, None).setup
    assert setup is not None
    assert (setup.tensor_parallel, setup.context_parallel, setup.shard_group) == (2, 2, 4)
    assert setup.tiled_mlp and setup.fused_lm_head and setup.gradient_checkpointing and setup.score_labels == 2


def test_a_setting_the_estimate_does_not_count_never_refuses_a_launch():
    from cw_cli.estimate.fit import fits
    from cw_cli.estimate.from_config import RunEstimate
    from cw_cli.estimate.memory import TrainingSetup, estimate_memory

    huge = estimate_memory(LLAMA_8B, TrainingSetup(**{**BASE, "fsdp": False, "gpus_per_node": 1}))
    verdict = fits(huge, 24 * 1024**3)
    counted = RunEstimate("axolotl", "sft", "m", estimate=huge, verdict=verdict, refusal=verdict)
    assert counted.clearly_too_big
    uncounted = replace(counted, unmodelled=("`expert_parallel_size` (experts sharded over ranks)",))
    assert not uncounted.clearly_too_big
    assert "expert_parallel_size" in uncounted.summary() and "never refused" in uncounted.summary()


def test_axolotl_parallel_sizes_size_the_run_or_refuse_a_contradiction(tmp_path):
    from unit_helpers import plan_for

    from cw_cli.errors import ConfigError

    path = write_config(tmp_path, {"base_model": "m", "datasets": [{"path": "p", "type": "alpaca"}],
                                   "dp_replicate_size": 2, "dp_shard_size": 2, "tensor_parallel_size": 4})  # fmt: skip
    from unit_helpers import load

    config = load("axolotl", "sft", path)  # sized without a flag: 2 x 2 x 4 = 16 GPUs
    assert (config.cluster.gpu, config.cluster.nodes) == (8, 2)
    cp = write_config(tmp_path, {"base_model": "m", "datasets": [{"path": "p", "type": "alpaca"}],
                                 "context_parallel_size": 8}, name="cp.yaml")  # fmt: skip
    with pytest.raises((ConfigError, ValueError)) as info:
        plan_for("axolotl", "sft", cp, gpu=4)
    assert "context_parallel_size: 8" in str(info.value) + " ".join(getattr(info.value, "issues", []))
    assert "4" in str(info.value) + " ".join(getattr(info.value, "issues", []))


@pytest.mark.parametrize("kind", ["kto", "reward", "rloo", "distillation"])
def test_every_trl_training_command_launches(tmp_path, kind):
    from unit_helpers import container, plan_for

    data = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/x"}
    if kind == "distillation":
        data["teacher_model_name_or_path"] = "Qwen/Qwen2.5-1.5B"
    plan = plan_for("trl", kind, write_config(tmp_path, data))
    trainer = container(plan.manifests[0], "trainer")
    assert f"trl {kind} --config" in " ".join([*trainer["command"], *trainer.get("args", [])])


def test_an_open_r1_reward_name_is_refused_for_trl_grpo(tmp_path):
    from unit_helpers import plan_for

    from cw_cli.errors import ConfigError

    path = write_config(tmp_path, {"model_name_or_path": "m", "dataset_name": "d", "reward_funcs": ["accuracy", "format"]})
    with pytest.raises(ConfigError) as info:
        plan_for("trl", "grpo", path)
    assert "open-r1" in "\n".join(info.value.issues) and "accuracy_reward" in "\n".join(info.value.issues)


def test_an_estimate_needs_no_checkpoint_volume_nor_secrets(tmp_path):
    from cw_cli import api

    path = write_config(tmp_path, {"model_name_or_path": "m", "dataset_name": "d", "push_to_hub": True,
                                   "checkpoint_volume": None})  # fmt: skip
    result = api.estimate(path, "trl", "sft")
    assert result.skipped is not None  # no config.json for "m": skipped, but not refused for the launch's needs
