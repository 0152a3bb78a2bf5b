"""verifiers' own vf-train (verifiers 0.1.9.post3) on CPU, with stand-ins only for the network and
for the packages the pod image has and this CPU environment lacks; run with CW_VERIFIERS_PYTHON.

    python validate_verifiers_resume.py --make-model DIR     -> a tiny random Llama and tokenizer
    python validate_verifiers_resume.py @ CONFIG.toml        -> verifiers.scripts.train.main()

Run the second form as the pod does: under ``cw_entrypoint.py --no-resume`` with the ConfigMap's
folder on PYTHONPATH, so cw_fault's shim patches the trainer at import in this process.

Real: vf-train's main (tomllib, ``vf.load_environment``, ``RLConfig``, ``RLTrainer(...).train()``
with no checkpoint), RLTrainer and HF Trainer (training steps, checkpoints, resume). Stand-ins:
``VLLMClient`` (records the weights pushed; the server's state is kept in ``server.json`` of
VF_RESUME_WORK, since the server outlives a trainer pod), the orchestrator's generation (a
subclass of verifiers' Orchestrator whose request queue records each submitted batch id with the
server weights it would be generated from, and whose ``get_batch`` returns a synthetic batch, or
raises TimeoutError at once for a batch never submitted, as the real one does after
``generation_timeout``), ``deepspeed``, ``wandb`` and ``liger_kernel`` (imported by verifiers'
trainer, not installed here; no ZeRO, no W&B, no Liger is used), and the model loader (verifiers'
loads bf16 with flash-attention 2; here float32, eager). Each event is a JSON line in
``events.jsonl`` of VF_RESUME_WORK. ``VF_RESUME_SIGTERM_AT=N`` sends SIGTERM to the entrypoint
(this process's parent, PID 1 in the pod) at the end of step N, as the kubelet would.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import json
import os
import queue
import signal
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("VF_LOG_LEVEL", "WARNING")
WORK = Path(os.environ.get("VF_RESUME_WORK", "."))
RUN = os.environ.get("VF_RESUME_RUN", "run")
STEP_SLEEP_S = float(os.environ.get("VF_RESUME_STEP_SLEEP", "0"))


def event(what: str, **fields: object) -> None:
    with open(WORK / "events.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"run": RUN, "event": what, **fields}) + "\n")


def fingerprint(named: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(named):
        digest.update(name.encode())
        digest.update(named[name].detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def server_weights() -> str:
    try:
        return json.loads((WORK / "server.json").read_text())["fingerprint"]
    except (OSError, ValueError, KeyError):
        return "base"


def make_model(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = "river stone lamp orbit maple cloud ember violet harbor quiet signal answer reverse text".split()
    specials = ["<pad>", "<unk>", "<s>", "<|end|>"]
    vocab = {tok: i for i, tok in enumerate(specials + words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="<|end|>",
                                  unk_token="<unk>", pad_token="<pad>")  # fmt: skip
    tok.chat_template = "{% for m in messages %}{{ m['content'] + ' ' }}{% endfor %}"
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=2, eos_token_id=3, tie_word_embeddings=False)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)


def _stub(name: str, **attrs: object) -> None:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    sys.modules[name] = module


class RecordingClient:
    """Stands in for verifiers.rl.inference.client.VLLMClient (HTTP + NCCL to vf-vllm)."""

    def __init__(self, host: str = "0.0.0.0", port: int = 8000, connection_timeout: float = 0.0) -> None:
        self.pushed: dict = {}

    def init_communicator(self) -> None:
        event("init_communicator", server=server_weights())

    def update_named_param(self, name: str, weights) -> None:
        self.pushed[name] = weights.detach().clone()

    def reset_prefix_cache(self) -> None:  # update_vllm calls it once every parameter is pushed
        served = fingerprint(self.pushed)
        (WORK / "server.json").write_text(json.dumps({"fingerprint": served}))
        event("sync", weights=served, params=len(self.pushed))
        self.pushed = {}

    def get_num_background_tasks(self) -> int:
        return 0

    def close_communicator(self) -> None:
        pass


def _entrypoint_pid() -> int:
    """The nearest ancestor running cw_entrypoint.py (this process's parent, or a launcher's)."""
    pid = os.getppid()
    while pid > 1:
        if b"cw_entrypoint.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("cw_entrypoint.py is not an ancestor of this process")


def install_stand_ins() -> None:
    _stub("deepspeed", zero=types.SimpleNamespace(GatheredParameters=lambda *a, **k: contextlib.nullcontext()))
    _stub("wandb", run=None, log=lambda *a, **k: None)
    _stub("liger_kernel")
    _stub("liger_kernel.transformers", AutoLigerKernelForCausalLM=None)
    _stub("verifiers.rl.inference.client", VLLMClient=RecordingClient)

    import torch
    import verifiers as vf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def get_model_and_tokenizer(name: str, use_liger: bool = False, model_kwargs: dict | None = None):
        return AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32), AutoTokenizer.from_pretrained(name)

    vf.get_model_and_tokenizer = get_model_and_tokenizer

    import verifiers.rl.trainer.trainer as trainer_module  # cw_fault's hook patches it here, as in the pod
    from transformers import TrainerCallback
    from verifiers.rl.trainer.orchestrator import Batch, Microbatch

    if os.environ.get("RANK", "0") == "0":
        event("imported", cw_patched=bool(getattr(trainer_module.RLTrainer, "_cw_resume_patched", False)))

    class RecordingQueue(queue.Queue):
        def put(self, item, block=True, timeout=None) -> None:
            if item is not None:
                event("submit", batch=item, server=server_weights())
            super().put(item, block, timeout)

    class StandInOrchestrator(trainer_module.Orchestrator):
        """verifiers' Orchestrator (its submit_batch, as patched) without generation."""

        def __init__(self, **kwargs) -> None:
            self.processes = int(kwargs.get("num_processes", 1))
            self.request_queue = RecordingQueue()
            self.submitted: set[int] = set()
            self.is_generating = False

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

        def get_batch(self, batch_id: int):
            while not self.request_queue.empty():
                self.submitted.add(self.request_queue.get())
            if batch_id not in self.submitted:
                event("timeout", batch=batch_id)
                raise TimeoutError(f"Batch {batch_id} was never submitted (the real one times out after generation_timeout)")
            event("get", batch=batch_id)
            time.sleep(STEP_SLEEP_S)
            rows = [[4 + (batch_id + i + j) % 14 for j in range(8)] for i in range(2)]
            micro = Microbatch(input_ids=rows, loss_mask=[[0, 0, 0, 1, 1, 1, 1, 1]] * 2,
                               sampling_logprobs=[[-1.0] * 8] * 2, advantages=[[1.0] * 8, [-1.0] * 8], items=2)  # fmt: skip
            return Batch(batch_id=batch_id, microbatches=[[micro]] * self.processes, items_per_process=[2] * self.processes,
                         global_item_count=2 * self.processes)  # fmt: skip

    trainer_module.Orchestrator = StandInOrchestrator

    class Steps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs) -> None:
            if state.is_world_process_zero:
                event("begin", step=state.global_step, processes=args.world_size)

        def on_step_end(self, args, state, control, **kwargs) -> None:
            if not state.is_world_process_zero:
                return
            event("step", step=state.global_step)
            if state.global_step == int(os.environ.get("VF_RESUME_SIGTERM_AT", "0")):
                os.kill(_entrypoint_pid(), signal.SIGTERM)

    patched_init = trainer_module.RLTrainer.__init__

    def __init__(self, *args, **kwargs) -> None:
        patched_init(self, *args, **kwargs)
        self.add_callback(Steps())

    trainer_module.RLTrainer.__init__ = __init__


if __name__ == "__main__":
    if sys.argv[1] == "--make-model":
        make_model(Path(sys.argv[2]))
        raise SystemExit(0)
    install_stand_ins()
    from verifiers.scripts.train import main

    main()
