"""What cw knows of a framework comes from the framework itself: its training setup for the memory
estimate, its words for the estimate's suggestions and for `cw status`'s advice, its failure hints.

The built-ins are looked up from a run's `app.kubernetes.io/name` label (Axolotl's CUDA-OOM advice
names `micro_batch_size`, not TRL's `per_device_train_batch_size`); a plugin from $CW_PLUGINS_DIR,
loaded by the same registry as in test_plugins.py, gets an estimate and advice in its own keys by
describing them, and no estimate when it does not.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from datetime import datetime, timezone

import pytest
import yaml
from click.testing import CliRunner
from unit_helpers import REPO

from cw_cli import api
from cw_cli.diagnosis.diagnose import diagnose, explain_owner, explain_pod
from cw_cli.frameworks.registry import FrameworkRegistry

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
MODELS = REPO / "tests" / "fixtures" / "model_configs"
CUDA_OOM_LOG = [
    "  File \"/usr/local/lib/python3.11/site-packages/torch/nn/modules/linear.py\", line 125, in forward",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.81 GiB. GPU 0 has a total capacity of 79.19 GiB",
]


def _failed_pod(framework: str | None, name: str = "r-trainer-0-abcde") -> dict:
    labels = {"app.kubernetes.io/component": "trainer", "cw-cli.dev/run": "r"}
    if framework is not None:
        labels["app.kubernetes.io/name"] = framework
    status = {"name": "trainer", "ready": False, "restartCount": 0,
              "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}  # fmt: skip
    return {"metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-03-01T11:00:00Z"},
            "spec": {"containers": [{"name": "trainer", "image": "x"}]},
            "status": {"phase": "Failed", "containerStatuses": [status]}}  # fmt: skip


def _oom_fix(framework: str | None) -> str:
    (found,) = explain_pod(_failed_pod(framework), {"trainer": CUDA_OOM_LOG}, NOW)
    assert found.kind == "cuda-oom"
    return found.fix


@pytest.fixture(autouse=True)
def no_user_plugins(monkeypatch, tmp_path):
    """The machine's own plugins never take part; a test that wants plugins points here."""
    monkeypatch.setenv("CW_PLUGINS_DIR", str(tmp_path / "no-plugins"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# --- the built-ins, by the run's label ---------------------------------------------------------


def test_axolotls_cuda_oom_advice_names_axolotls_keys():
    fix = _oom_fix("axolotl")
    assert "micro_batch_size" in fix and "gradient_accumulation_steps" in fix and "sequence_len" in fix
    assert "per_device_train_batch_size" not in fix and "max_length" not in fix


def test_trl_and_verifiers_cuda_oom_advice_in_their_own_keys():
    trl = _oom_fix("trl")
    assert "lower per_device_train_batch_size (raise gradient_accumulation_steps" in trl
    assert "gradient_checkpointing: true" in trl and "max_length" in trl and "more GPUs (gpu:, nodes:" in trl
    verifiers = _oom_fix("verifiers")
    assert "trainer.args.micro_batch_size" in verifiers and "trainer.args.max_seq_len" in verifiers
    assert "(trainer.gpus:, nodes:" in verifiers and "accumulation" not in verifiers  # RLConfig has none


def test_without_a_known_framework_the_advice_is_in_plain_words():
    for fix in (_oom_fix(None), _oom_fix("nosuchframework")):
        assert "batch size per GPU" in fix and "gradient checkpointing" in fix
        assert "per_device_train_batch_size" not in fix and "micro_batch_size" not in fix


def test_a_deadlines_advice_names_the_frameworks_step_count():
    def deadline(framework: str) -> str:
        job = {"metadata": {"name": "r-trainer", "labels": {"app.kubernetes.io/name": framework}},
               "spec": {"activeDeadlineSeconds": 60},
               "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                          "message": "Job was active longer than specified deadline"}]}}  # fmt: skip
        (found,) = explain_owner("Job", job)
        return found.fix

    assert "(max_steps)" in deadline("axolotl") and "(trainer.args.max_steps)" in deadline("verifiers")
    assert "(fewer training steps)" in deadline("unknownfw")


def test_no_framework_is_loaded_for_a_run_without_a_log_to_explain():
    asked: list[str] = []
    pod = _failed_pod("axolotl")
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "OOMKilled"
    diagnose([], [pod], {}, NOW, frameworks=lambda name: asked.append(name))
    assert asked == []


# --- a plugin, loaded by the registry from $CW_PLUGINS_DIR -------------------------------------

DESCRIBED_PLUGIN = '''
from cw_cli.estimate.memory import TrainingSetup
from cw_cli.estimate.native_setup import RunSetup
from cw_cli.estimate.values import as_count, truthy
from cw_cli.estimate.words import ConfigWords
from cw_cli.frameworks.base import BaseTrainingFramework, FailureHint, TrainingType
from cw_cli.frameworks.distributed import trainer_world
from cw_cli.frameworks.plugin import SimplePlugin


class DescribedFramework(BaseTrainingFramework):
    name = "describedfw"
    training_types = (TrainingType.SFT,)
    model_key = "model"
    words = ConfigWords(micro_batch="train.batch", accumulation="train.accum", checkpointing="train.recompute",
                        length="train.seq", lora=("train.lora: on",), zero3="sharding: zero3")

    def required_keys(self, training_type):
        return [("model",)]

    def default_image(self, training_type):
        return "example.com/describedfw:1"

    def trainer_command(self, config, context):
        return ["describedfw-train"]

    def training_setup(self, native, training_type, cluster, base_dir, model_config):
        train = native.get("train") or {}
        gpus, nodes = trainer_world(cluster)
        setup = TrainingSetup(method="full", gpus_per_node=gpus, nodes=nodes, micro_batch=as_count(train.get("batch"), 4),
                              seq_len=as_count(train.get("seq"), 4096),
                              gradient_checkpointing=truthy(train.get("recompute")))
        return RunSetup(setup, notes=("describedfw trains in bf16",))

    def failure_hints(self):
        return (FailureHint("dataset-shards", r"DescribedFW: no shard matches", "no data shard",
                            "describedfw found no data shard to train on", "set `data.shards` to a glob that matches"),)


def get_plugin():
    return SimplePlugin(DescribedFramework, "1.0.0")
'''

SILENT_PLUGIN = '''
from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType
from cw_cli.frameworks.plugin import SimplePlugin


class SilentFramework(BaseTrainingFramework):
    name = "silentfw"
    training_types = (TrainingType.SFT,)
    model_key = "model"

    def default_image(self, training_type):
        return "example.com/silentfw:1"

    def trainer_command(self, config, context):
        return ["silentfw-train"]


def get_plugin():
    return SimplePlugin(SilentFramework, "1.0.0")
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    root = tmp_path / "plugins"
    for name, body in (("describedfw", DESCRIBED_PLUGIN), ("silentfw", SILENT_PLUGIN)):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(textwrap.dedent(body))
    monkeypatch.setenv("CW_PLUGINS_DIR", str(root))
    monkeypatch.delenv("CW_DISABLE_PLUGINS", raising=False)
    registry = FrameworkRegistry().load_all()
    assert not registry.failures, registry.failures
    return registry


@pytest.fixture
def model_folder(tmp_path):
    folder = tmp_path / "qwen3b"
    folder.mkdir()
    shutil.copy(MODELS / "Qwen__Qwen2.5-3B.json", folder / "config.json")
    return folder


def _config(tmp_path, model_folder, **native):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"gpu": 1, "checkpoint_volume": "none", "model": str(model_folder), **native}))
    return path


def test_a_plugin_that_describes_its_setup_gets_an_estimate_in_its_own_keys(plugins, tmp_path, model_folder):
    path = _config(tmp_path, model_folder, train={"batch": 8, "seq": 8192})
    result = api.estimate(path, "describedfw", "sft", registry=plugins, gpu_memory="80GB")
    assert result.estimate is not None and result.skipped is None
    assert result.setup is not None and (result.setup.micro_batch, result.setup.seq_len) == (8, 8192)
    assert "describedfw trains in bf16" in result.notes
    assert result.clearly_too_big and result.suggestions  # a 3B full fine-tune at 64k tokens per GPU
    written = [line for changes in result.changes for line in changes]
    assert {"train.recompute: true", "train.batch: 4", "train.accum: 2", "train.seq: 4096"} <= set(written)
    assert all(not line.startswith(("gradient_checkpointing", "per_device", "use_peft")) for line in written)
    # A change the plugin has no words for (QLoRA: no `qlora` lines) is never offered.
    assert all(s.setup.method != "qlora" for s in result.suggestions)


def test_cw_estimate_on_a_plugin(plugins, tmp_path, model_folder):
    from cw_cli.cli.app import build_app

    path = _config(tmp_path, model_folder, train={"batch": 8, "seq": 8192})
    result = CliRunner().invoke(build_app(plugins), ["estimate", "describedfw", "sft", str(path), "--gpu-memory",
                                                      "80GB", "-o", "json", "--no-hub"])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["estimated"] and data["framework"] == "describedfw" and data["trainer"]["per_gpu_bytes"] > 0
    assert any("train.recompute: true" in s["changes"] for s in data["suggestions"])


def test_a_plugin_without_a_setup_gets_no_estimate(plugins, tmp_path, model_folder):
    result = api.estimate(_config(tmp_path, model_folder), "silentfw", "sft", registry=plugins, gpu_memory="80GB")
    assert result.estimate is None and result.skipped is not None
    assert "no estimate for framework 'silentfw'" in result.skipped


def test_a_plugins_failure_advice_and_hints(plugins):
    assert "lower train.batch (raise train.accum" in _oom_fix("describedfw")
    assert "train.recompute: true" in _oom_fix("describedfw")
    assert "per_device_train_batch_size" not in _oom_fix("describedfw")
    pod = _failed_pod("describedfw")
    log = ["loading", "ValueError: DescribedFW: no shard matches data/*.bin", "exiting"]
    found = diagnose([], [pod], {(pod["metadata"]["name"], "trainer"): log}, NOW)
    assert [e.kind for e in found] == ["dataset-shards"]
    assert found[0].summary == "no data shard" and "data.shards" in found[0].fix
    assert any("no shard matches" in line for line in found[0].log)
    # The silent plugin declares no words: plain advice, never another framework's keys.
    assert "batch size per GPU" in _oom_fix("silentfw")


def test_trl_explains_its_lost_vllm_server_in_its_own_words():
    """The exact line TRL 1.16's vLLM client raises (trl/generation/vllm_client.py)."""
    pod = _failed_pod("trl")
    log = [
        "Traceback (most recent call last):",
        "ConnectionError: The vLLM server can't be reached at http://r-server:8000 after 240.0 seconds. Make sure "
        "the server is running by running `vllm serve`.",
    ]
    found = diagnose([], [pod], {(pod["metadata"]["name"], "trainer"): log}, NOW)
    assert [e.kind for e in found] == ["vllm-server-lost"]
    assert "--role server" in found[0].fix and "vllm_gpu_memory_utilization" in found[0].fix
    # Another framework's run with the same line is not given TRL's advice.
    other = _failed_pod("axolotl")
    assert all(e.kind != "vllm-server-lost" for e in diagnose([], [other], {(other["metadata"]["name"], "trainer"): log}, NOW))


@pytest.mark.parametrize(
    ("framework", "line", "kind", "fix_names"),
    [
        # axolotl 0.19, axolotl/utils/data/wrappers.py: handle_unknown_dataset_strategy
        ("axolotl", "ValueError: unhandled prompt tokenization strategy: my_format:load_rows. Did you mean "
         "my_format.load_rows?", "dataset-type", "datasets[].type"),
        # verifiers 0.1.9, verifiers/utils/env_utils.py: load_environment
        ("verifiers", "ValueError: Could not import 'vf-math' environment. Ensure the package for the 'vf-math' "
         "environment is installed.", "environment-missing", "prime env install"),
    ],
)  # fmt: skip
def test_axolotl_and_verifiers_explain_their_own_failures(framework, line, kind, fix_names):
    pod = _failed_pod(framework)
    log = ["Traceback (most recent call last):", line]
    found = diagnose([], [pod], {(pod["metadata"]["name"], "trainer"): log}, NOW)
    assert [e.kind for e in found] == [kind] and fix_names in found[0].fix
    other = _failed_pod("trl")  # the same line in another framework's run gets no such advice
    assert all(e.kind != kind for e in diagnose([], [other], {(other["metadata"]["name"], "trainer"): log}, NOW))
