"""A restarted verifiers trainer resumes from the newest complete checkpoint, pushes the resumed
weights to the server first, and generates the batch of the resumed step (no TimeoutError).

verifiers 0.1.9.post3's vf-train calls ``trainer.train()`` without a checkpoint, and its
RLTrainer submits batch 0 at start and waits for batch ``global_step`` at each step (see
cw_cli/runtime/cw_vf_resume.py). cw ships ``cw_vf_resume.py`` beside ``cw_fault.py``; the
entrypoint names the newest complete checkpoint in ``CW_RESUME_CHECKPOINT``.

Proven with the rendered run's ConfigMap files (configs/verifiers-grpo.yaml) and the trainer's
own entrypoint options, on CPU in the verifiers environment (CW_VERIFIERS_PYTHON): verifiers' own
vf-train main, RLTrainer and HF Trainer run for real; only the server (VLLMClient), the
generation, and deepspeed/wandb/liger_kernel (not installed here) are stand-ins
(validate_verifiers_resume.py). The first pod gets SIGTERM after step 2 (cw_fault stops it at a
step end with a checkpoint, exit 143); the second resumes from that checkpoint. LoRA in one
process, and full weights on two gloo ranks under ``accelerate launch`` (as the pod launches
vf-train). vLLM, GPUs and ZeRO-3 are not run here.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_framework_configs import _python_with
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

pytestmark = pytest.mark.training
HERE = Path(__file__).parent
MAX_STEPS = 6


def _config_toml(model: Path, output_dir: Path, use_lora: bool) -> str:
    return f"""model = "{model}"

[env]
id = "cw-reverse-text"
args = {{ num_examples = 16 }}

[trainer.args]
use_cpu = true
bf16 = false
use_liger = false
use_lora = {str(use_lora).lower()}
max_steps = {MAX_STEPS}
batch_size = 8
micro_batch_size = 2
rollouts_per_example = 2
max_seq_len = 64
learning_rate = 0.001
save_steps = 100
logging_steps = 1
report_to = "none"
output_dir = "{output_dir}"
run_name = "vf-resume"
vllm_server_host = "127.0.0.1"
vllm_server_port = 8000
"""


def _checkpoint_weights(python: str, checkpoint: Path, base: Path) -> str:
    """The fingerprint of what the server should get from ``checkpoint``: its weights, merged with
    the base model where it holds a LoRA adapter (as RLTrainer.update_vllm pushes them)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[3]); import validate_verifiers_resume as v\n"
        "from pathlib import Path\n"
        "ckpt, base = Path(sys.argv[1]), sys.argv[2]\n"
        "if (ckpt / 'adapter_model.safetensors').is_file():\n"
        "    import torch; from peft import PeftModel; from transformers import AutoModelForCausalLM\n"
        "    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), ckpt)\n"
        "    weights = dict(model.merge_and_unload().named_parameters())\n"
        "else:\n"
        "    from safetensors.torch import load_file; weights = load_file(ckpt / 'model.safetensors')\n"
        "print(v.fingerprint(weights))\n"
    )
    out = subprocess.run([python, "-c", code, str(checkpoint), str(base), str(HERE)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, **OFFLINE_ENV}, check=True)  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("use_lora,processes", [(True, 1), (False, 2)], ids=["lora-1-process", "full-2-ranks"])
def test_a_restarted_verifiers_trainer_resumes_syncs_the_server_then_generates_the_resumed_batch(
    render_plan, tmp_path, use_lora, processes
):
    python = _python_with("verifiers", "CW_VERIFIERS_PYTHON")
    manifests = render_plan("verifiers", "grpo", CONFIGS_DIR / "verifiers-grpo.yaml", run_name="t-vf", gpu=4)
    etc = tmp_path / "etc-cw"  # stands in for /etc/cw: the ConfigMap's files
    etc.mkdir()
    for key, text in next(m for m in manifests if m["kind"] == "ConfigMap")["data"].items():
        (etc / key).write_text(text, encoding="utf-8")
    assert (etc / "cw_vf_resume.py").is_file()
    job = next(m for m in manifests if m["kind"] == "Job")
    trainer = next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer")
    command = trainer["command"]
    start = command.index("/etc/cw/cw_entrypoint.py")
    options = command[start + 1 : command.index("--", start)]
    assert options == ["--no-resume"]

    subprocess.run([python, str(HERE / "validate_verifiers_resume.py"), "--make-model", str(tmp_path / "model")],
                   check=True, timeout=300, env={**os.environ, **OFFLINE_ENV})  # fmt: skip
    run = tmp_path / "run"  # the run's folder on the volume: the pod's working directory and output_dir
    run.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(_config_toml(tmp_path / "model", run, use_lora), encoding="utf-8")

    program = [python, str(HERE / "validate_verifiers_resume.py"), "@", str(config)]
    if processes > 1:  # as the pod runs vf-train: under accelerate launch (no GPU here: gloo ranks on CPU)
        program = [str(Path(python).parent / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(processes),
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", *program[1:]]  # fmt: skip
    venv_bin = str(Path(python).parent)

    def pod(name: str, **env: str) -> subprocess.CompletedProcess:
        environ = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(etc), "VF_RESUME_WORK": str(tmp_path),
                   "VF_RESUME_RUN": name, "CW_STALL_TIMEOUT": "600",
                   "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}", **env}  # fmt: skip
        return subprocess.run([python, str(etc / "cw_entrypoint.py"), *options, "--", *program], cwd=run,
                              capture_output=True, text=True, timeout=600, env=environ)  # fmt: skip

    first = pod("first", VF_RESUME_SIGTERM_AT="2", VF_RESUME_STEP_SLEEP="1")
    assert first.returncode == 143, first.stderr[-4000:]
    [checkpoint] = [p for p in run.iterdir() if p.name.startswith("checkpoint-")]
    resumed_at = int(checkpoint.name.split("-")[1])
    assert 2 <= resumed_at < MAX_STEPS and (checkpoint / ".cw-complete").is_file()

    second = pod("second", VF_RESUME_STEP_SLEEP="0.2")
    assert second.returncode == 0, second.stderr[-4000:]
    assert f"newest complete checkpoint {checkpoint} (CW_RESUME_CHECKPOINT)" in second.stderr
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    after = [e for e in events if e["run"] == "second"]
    assert after[0] == {"run": "second", "event": "imported", "cw_patched": True}
    assert [(e["step"], e["processes"]) for e in after if e["event"] == "begin"] == [(resumed_at, processes)]
    assert [e["step"] for e in after if e["event"] == "step"] == list(range(resumed_at + 1, MAX_STEPS + 1))
    assert not [e for e in after if e["event"] == "timeout"]
    # The first thing sent to the server is the checkpoint's weights; every batch is submitted
    # after that, from those weights on: batch 0 is never generated again.
    expected = _checkpoint_weights(python, checkpoint, tmp_path / "model")
    talk = [e for e in after if e["event"] in ("sync", "submit")]
    assert talk[0] == {"run": "second", "event": "sync", "weights": expected, "params": talk[0]["params"]}
    assert [e["batch"] for e in talk if e["event"] == "submit"] == list(range(resumed_at, MAX_STEPS + 1))
    assert next(e for e in talk if e["event"] == "submit")["server"] == expected
    assert [e["batch"] for e in after if e["event"] == "get"] == list(range(resumed_at, MAX_STEPS))
    # The server held the first pod's last sync (older weights) until then.
    last_before = [e["weights"] for e in events if e["run"] == "first" and e["event"] == "sync"][-1]
    assert last_before != expected
