"""`cw estimate` against peaks measured on a GPU, training through cw's own rendered config.

The measurements (tests/fixtures/gpu_measurements/) come from `benchmarks/estimate_through_cw.py`
on an H200: random-initialised Llama-3.2-3B and Qwen2.5-3B models trained by `trl sft --config
<the ConfigMap's config.yaml>`, the peak read with `torch.cuda.max_memory_allocated()`. The estimate is
recomputed here from the same configs, so a change to the formulas that moves cw away from
what the GPU measured fails here, on a machine without one. Goal (issue 13): within 15%.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from cw_cli import api

FIXTURES = Path(__file__).parent.parent / "fixtures"
MEASURED = [json.loads(path.read_text()) for path in sorted((FIXTURES / "gpu_measurements").glob("*.json"))]
RUNS = {(measured["model_config"], run["setting"]): run for measured in MEASURED for run in measured["runs"]}
LLAMA = "meta-llama__Llama-3.2-3B.json"


def _estimate(tmp_path: Path, config: dict, model_config: str = LLAMA) -> dict:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    shutil.copy(FIXTURES / "model_configs" / model_config, model / "config.json")
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "train.jsonl").write_text('{"text": "a b c"}\n')
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({**config, "model_name_or_path": str(model)}))
    planned = api.plan(api.read_config(path), "trl", "sft", local=True)
    result = api.estimate_run(planned, gpu_memory="141GB", suggest=False).to_dict()
    assert result["trainer"], result
    return result["trainer"]


@pytest.mark.parametrize("model_config,setting", list(RUNS), ids=[f"{m.split('__')[1][:-5]}-{s}" for m, s in RUNS])
def test_the_estimate_is_within_15_percent_of_the_measured_peak(tmp_path, model_config, setting):
    run = RUNS[model_config, setting]
    trainer = _estimate(tmp_path, run["config"], model_config)
    ratio = trainer["allocated_bytes"] / run["measured_allocated_bytes"]
    assert 0.85 <= ratio <= 1.15, f"{setting}: estimate / measured = {ratio:.3f}"


def test_trl_sft_counts_its_fused_lm_head_not_full_logits(tmp_path):
    """TRL 1.16 scores tokens in tiles: at 8,192 tokens the full fp32 logits path would be ~11.7 GiB."""
    config = RUNS[LLAMA, "lora bf16 ckpt 4k"]["config"]
    fused = _estimate(tmp_path, config)["logits_bytes"]
    smoothed = _estimate(tmp_path, {**config, "label_smoothing_factor": 0.1})["logits_bytes"]
    tokens, vocab = 2 * 4096, 128256
    assert smoothed >= 12 * vocab * tokens  # label smoothing needs transformers' loss on the full logits
    assert fused < 0.05 * smoothed
    # what the head holds: the scored hidden states (bf16 copy, fp32 gradient, its bf16 cast) and one tile
    assert fused == tokens * 3072 * (2 + 4 + 2) + 4096 * 32768 * 2


def test_sdpa_with_packed_rows_keeps_one_attention_bias_per_layer(tmp_path):
    """Packed (padding-free) rows reach SDPA with a block-diagonal mask, which torch turns into a bias each
    layer saves: S² bf16 elements for one row of S = 4 x 2048 tokens. Flash attention takes no mask. Without
    this term the 2k x 4 LoRA run was 11-12% under its measured peak on both models."""
    config = RUNS[LLAMA, "lora bf16 bs4"]["config"]
    sdpa = _estimate(tmp_path, config)
    flash = _estimate(tmp_path, {**config, "attn_implementation": "flash_attention_2"})
    bias = (4 * 2048) ** 2 * 2
    assert sdpa["activations_no_checkpointing_bytes"] - flash["activations_no_checkpointing_bytes"] == 28 * bias
    assert sdpa["activations_checkpointing_bytes"] - flash["activations_checkpointing_bytes"] == bias  # the recomputed layer


def test_packed_rows_that_are_not_flattened_keep_a_bias_per_row(tmp_path):
    """TRL's `wrapped` packing keeps its micro batch as 4 rows of 2,048 (no padding-free flattening): 4 x 2048²."""
    config = {**RUNS[LLAMA, "lora bf16 bs4"]["config"], "packing_strategy": "wrapped"}
    sdpa = _estimate(tmp_path, config)
    flash = _estimate(tmp_path, {**config, "attn_implementation": "flash_attention_2"})
    assert sdpa["activations_no_checkpointing_bytes"] - flash["activations_no_checkpointing_bytes"] == 28 * 4 * 2048**2 * 2
