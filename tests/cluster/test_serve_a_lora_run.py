"""`cw serve` of a LoRA run against the real API server: the run's final model is an adapter folder
saved by peft itself (on the stand-in volume kwok's exec reads), and the server pod cw creates runs
vLLM on the adapter's base with the adapter as a LoRA module under the run's name, tensor
parallelism over the GPUs, CPU and memory requests, as the shipped after-training Role allows.
`--dry-run` prints exactly that pod and its Service and creates neither."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from kubernetes import client
from test_artifacts_on_the_cluster import _route_exec
from test_cw_end_to_end import SFT_CONFIG, create_bound_volumes, run_cw, write_config

KEPT = {**SFT_CONFIG, "checkpoint_volume": "ckpts", "output_dir": "outputs/lora", "gpu": 1}
BASE = "my-org/tiny-llama"
LORA_ARGS = ["vllm", "serve", BASE, "--enable-lora", "--lora-modules", "lora=/checkpoints/lora/outputs/lora",
             "--max-lora-rank", "16", "--host", "0.0.0.0", "--port", "8000", "--tensor-parallel-size", "2"]  # fmt: skip


def _lora_volume(root: Path) -> None:
    """What a LoRA `trl sft` run leaves: a checkpoint and, beside it, the final adapter (peft's own files)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    run_dir = root / "lora" / "outputs" / "lora"
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                         num_key_value_heads=2, vocab_size=64))  # fmt: skip
    model.name_or_path = BASE  # as when the trainer loaded the base from the Hub
    adapter = get_peft_model(model, LoraConfig(r=12, target_modules=["q_proj", "v_proj"]))
    adapter.save_pretrained(run_dir, save_embedding_layers=False)
    adapter.save_pretrained(run_dir / "checkpoint-5", save_embedding_layers=False)
    (run_dir / "checkpoint-5" / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": []}))


def test_serve_runs_vllm_on_the_base_with_the_runs_adapter(kube_api, namespace, as_documented_roles, tmp_path):
    launcher, user = as_documented_roles("read-only", "launch"), as_documented_roles("read-only", "after-training")
    create_bound_volumes(kube_api, namespace, "ckpts")
    launched = run_cw(launcher, "trl", "sft", str(write_config(tmp_path, KEPT)), "--name", "lora", "-n", namespace,
                      "--wait", timeout=180)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    _lora_volume(tmp_path / "volume")
    _route_exec(kube_api, namespace, "lora-reader", tmp_path / "volume")
    listed = run_cw(user, "artifacts", "lora", "-o", "json", "-n", namespace, timeout=180)
    assert listed.returncode == 0, listed.stderr
    final = next(a for a in json.loads(listed.stdout)["artifacts"] if a["kind"] == "final")
    assert final["adapter"] is True and final["model"]["base"] == BASE and final["model"]["lora_rank"] == 12

    dry = run_cw(user, "serve", "lora", "--gpu", "2", "--engine", "vllm", "--dry-run", "-n", namespace, timeout=180)
    assert dry.returncode == 0, dry.stderr
    pod, service = [doc for doc in yaml.safe_load_all(dry.stdout) if doc]
    assert pod["kind"] == "Pod" and service["kind"] == "Service"
    assert pod["spec"]["containers"][0]["command"] == LORA_ARGS
    core = client.CoreV1Api(kube_api)
    assert core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=serve").items == []

    started = run_cw(user, "serve", "lora", "--gpu", "2", "--engine", "vllm", "-n", namespace, timeout=180)
    assert started.returncode == 0, started.stderr
    created = core.read_namespaced_pod("lora-serve", namespace)
    container = created.spec.containers[0]
    assert container.command == LORA_ARGS == pod["spec"]["containers"][0]["command"]
    # 4 CPUs and 16Gi per GPU, at most what the run's trainer asked for (SFT_CONFIG: 4 and 16Gi).
    assert container.resources.requests == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert created.spec.security_context.run_as_non_root is True and created.spec.security_context.run_as_user == 2000
