"""After a restart the generation server serves the resumed weights, not the base model (issue 34).

cw's vLLM server is a Deployment of its own: a trainer pod that restarts (exit 143 after a warned
stop, 75 after a stall) finds the server still running, holding the weights of the last sync of
the previous pod (or, if the server restarted too, the base model). What makes it serve the
resumed weights is TRL's trainer: a new process starts with ``_last_loaded_step = -1``
(trl/trainer/grpo_trainer.py, ``self._last_loaded_step = -1``; rloo_trainer.py alike) and
``_generate_single_turn`` calls ``vllm_generation.sync_weights()`` whenever
``state.global_step != _last_loaded_step``, i.e. before its first generation, after
``train(resume_from_checkpoint=...)`` loaded the checkpoint's weights into the model.

Proven here with TRL's real GRPOTrainer and RLOOTrainer in server mode (``use_vllm: true``,
``vllm_mode: server``, as cw renders it) on CPU, where only the network client (TRL's
``VLLMClient``) is a recording stand-in that keeps the weights it was sent and answers
generation requests. vLLM itself is not run (not installable here): that the real server applies
``update_named_params`` over NCCL, and accepts a second trainer's ``init_weight_transfer_engine``
after the first died without closing its group, is not proven here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.training


class RecordingServer:
    """Stands in for trl.generation.vllm_client.VLLMClient: keeps what a vLLM server would hold."""

    instances: list[RecordingServer] = []
    weights: dict = {}  # the one server's, shared by every client: it outlives a trainer pod

    def __init__(self, base_url: str | None = None, host: str = "0.0.0.0", server_port: int = 8000,
                 group_port: int = 51216, connection_timeout: float = 0.0) -> None:  # fmt: skip
        self.base_url = base_url or f"http://{host}:{server_port}"
        self.events: list[tuple[str, str]] = []  # (what, fingerprint of the weights served then)
        RecordingServer.instances.append(self)

    def get_server_info(self) -> dict:
        return {"model_config": {"logprobs_mode": "processed_logprobs"}, "weight_transfer_config": {"backend": "nccl"}}

    def init_communicator(self, device=0) -> None:
        self.events.append(("init_communicator", fingerprint(self.weights)))

    def update_named_params(self, metadata, named_params) -> None:
        RecordingServer.weights = {name: tensor.detach().clone() for name, tensor in named_params}
        self.events.append(("sync", fingerprint(self.weights)))

    def reset_prefix_cache(self) -> None:
        pass

    def generate(self, prompts, features=None, n=1, max_tokens=16, **sampling) -> dict:
        self.events.append(("generate", fingerprint(self.weights)))
        # Words (ids past the 8 special tokens) of different lengths: different rewards, a gradient.
        completions = [[20 + i] * (1 + i % min(max_tokens, 3)) for i in range(len(prompts) * n)]
        return {
            "prompt_ids": [list(p) for p in prompts],
            "completion_ids": completions,
            "logprobs": [[[-1.0]] * len(c) for c in completions],
            "logprob_token_ids": [[[c[0]]] * len(c) for c in completions],
        }


def fingerprint(weights: dict) -> str:
    """A digest of named tensors (empty: the server still holds what it loaded at start)."""
    if not weights:
        return "as started"
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(weights[name].float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _saved_weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    weights: dict = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(file)))
    return weights


def _length_penalty(completions, **kwargs):
    return [-abs(len(c if isinstance(c, str) else c[-1]["content"]) - 20) / 20 for c in completions]


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_a_resumed_trainer_sends_the_checkpoints_weights_before_its_first_generation(
    tiny_model, grpo_dataset, tmp_path, monkeypatch, kind
):
    import trl.generation.vllm_generation as vllm_generation
    from datasets import load_dataset

    if kind == "grpo":
        from trl import GRPOConfig as Config
        from trl import GRPOTrainer as TrainerClass
    else:
        from trl import RLOOConfig as Config
        from trl import RLOOTrainer as TrainerClass

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)
    monkeypatch.setattr(vllm_generation, "VLLMClient", RecordingServer)
    RecordingServer.instances.clear()
    RecordingServer.weights = {}
    dataset = load_dataset("json", data_files=str(grpo_dataset / "train.jsonl"), split="train")
    output_dir = tmp_path / "run"

    def trainer(max_steps: int):
        args = Config(
            output_dir=str(output_dir), use_vllm=True, vllm_mode="server", vllm_server_host="t-server",
            vllm_server_port=8000, max_steps=max_steps, save_steps=2, per_device_train_batch_size=2,
            num_generations=2, max_completion_length=3, learning_rate=0.05, use_cpu=True, bf16=False,
            report_to="none", logging_steps=1, seed=0, dataloader_num_workers=0,
        )  # fmt: skip
        return TrainerClass(model=str(tiny_model), reward_funcs=_length_penalty, args=args, train_dataset=dataset)

    trainer(2).train()
    base = fingerprint(_saved_weights(tiny_model))
    resumed = fingerprint(_saved_weights(output_dir / "checkpoint-2"))
    assert resumed != base, "training did not change the weights: nothing to tell apart"

    trainer(3).train(resume_from_checkpoint=str(output_dir / "checkpoint-2"))
    first, second = RecordingServer.instances
    assert first.events[:3] == [("init_communicator", "as started"), ("sync", base), ("generate", base)], first.events
    # The restarted trainer finds the server holding what the first one sent last (the weights after
    # step 1, synced before step 2's generation): it sends the checkpoint's before it generates.
    stale = first.events[-2][1]
    assert first.events[-2][0] == "sync" and stale not in (base, resumed), first.events
    assert second.events[:3] == [("init_communicator", stale), ("sync", resumed), ("generate", resumed)], (
        second.events, base, stale, resumed)  # fmt: skip
    assert set(RecordingServer.weights) >= set(_saved_weights(output_dir / "checkpoint-2")), "a tensor was not sent"
    print(f"\n{kind}: resumed trainer's first calls: {second.events[:3]} (base {base}, checkpoint-2 {resumed})")
