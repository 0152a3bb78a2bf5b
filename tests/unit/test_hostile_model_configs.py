"""A hostile model config.json: `cw estimate` and a launch's memory check refuse it in one line.

`num_hidden_layers: 1e12`, an `Infinity` vocabulary, zero heads, a list as `hidden_size`, a file
nested 100,000 deep: exit 2 naming config.json and the field, never a traceback, a MemoryError or
billions of layers built. A model_type nobody knows is skipped at once, without importing
transformers. The last test fuzzes the reader: any config.json is estimated or refused with a
cw error.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from unit_helpers import REPO, builtin_registry

from cw_cli.config.models import ClusterSpec
from cw_cli.config.options import EstimateOptions
from cw_cli.errors import ConfigError
from cw_cli.estimate.from_config import estimate_run
from cw_cli.estimate.model_config import DIMENSIONS, check_model_config
from cw_cli.frameworks.trl import TRLFramework

pytest.importorskip("hypothesis")  # the `test` extra; skipped, not failed, without it
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MODELS = REPO / "tests" / "fixtures" / "model_configs"
LLAMA = json.loads((MODELS / "meta-llama__Llama-3.2-3B.json").read_text())
MOE = json.loads((MODELS / "Qwen__Qwen3-30B-A3B.json").read_text())


@pytest.fixture(autouse=True)
def no_hub_no_home(monkeypatch, tmp_path):
    """No test reads the real machine's caches or reaches the hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def cw():
    """``cw ARGS...`` in-process; returns click's Result."""
    from cw_cli.cli.app import build_app

    app = build_app(builtin_registry())
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(arg) for arg in args])


def _model(tmp_path: Path, text: str) -> Path:
    """A run config naming a local model folder whose config.json is ``text``."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(text, encoding="utf-8")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"model_name_or_path": str(folder), "dataset_name": "d", "gpu": 1,
                                      "checkpoint_volume": "none"}))  # fmt: skip
    return config


def _refused(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.exception, result.output)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and "error:" in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in:\n{result.stderr}"


HOSTILE = [
    ('"num_hidden_layers": 1e12', "`num_hidden_layers` is 1e+12; expected a whole number from 1 to 10,000"),
    ('"vocab_size": Infinity', "`vocab_size` is Infinity; expected a whole number"),
    ('"num_attention_heads": 0', "`num_attention_heads` is 0; expected a whole number from 1 to"),
    ('"hidden_size": [3072]', "`hidden_size` is a list; expected a whole number"),
    ('"hidden_size": ' + "9" * 400, "`hidden_size` is an integer of 400 digits"),
    ('"num_key_value_heads": -8', "`num_key_value_heads` is -8"),
    ('"intermediate_size": 8192.5', "`intermediate_size` is 8192.5"),
    ('"head_dim": true', "`head_dim` is true"),
    ('"model_type": ["llama"]', '`model_type` is a list; expected a name such as "llama"'),
    ('"mlp_only_layers": 3', "`mlp_only_layers` is 3; expected a list of layer numbers"),
    ('"text_config": "x"', '`text_config` is "x"; expected an object'),
]


def _with(field: str) -> str:
    """LLAMA's config.json with one field replaced (written as JSON text: Infinity stays as written)."""
    key = field.split(":", 1)[0].strip('"')
    text = json.dumps({k: v for k, v in LLAMA.items() if k != key})
    return text[:-1] + ", " + field + "}"


@pytest.mark.parametrize(("field", "message"), HOSTILE, ids=[f.split(":")[0].strip('"') for f, _ in HOSTILE])
def test_cw_estimate_refuses_a_config_json_no_model_has(cw, tmp_path, field, message):
    config = _model(tmp_path, _with(field))
    result = cw("estimate", "trl", "sft", config, "--gpu-memory", "80GB")
    _refused(result, f"{tmp_path / 'model' / 'config.json'}: {message}", "hint: fix the field in the model's config.json")


@pytest.mark.parametrize(("field", "message"), HOSTILE[:4], ids=["layers", "vocab", "heads", "hidden"])
def test_a_launch_refuses_it_too(cw, tmp_path, field, message):
    config = _model(tmp_path, _with(field))
    result = cw("trl", "sft", config, "--dry-run", "--gpu-memory", "80GB")
    _refused(result, message)
    assert "kind: Job" not in result.stdout  # refused before the manifests are printed


def test_a_config_json_nested_100000_deep_is_refused(cw, tmp_path):
    config = _model(tmp_path, "[" * 100_000 + "]" * 100_000)
    result = cw("estimate", "trl", "sft", config, "--gpu-memory", "80GB")
    _refused(result, f"{tmp_path / 'model' / 'config.json'}: nested too deep to be a model's config.json")


def test_an_oversized_config_json_is_refused_from_its_size(cw, tmp_path):
    config = _model(tmp_path, "")
    with open(tmp_path / "model" / "config.json", "wb") as handle:
        handle.truncate(17 * 2**20)  # sparse: nothing is written, nothing may be read
    _refused(cw("estimate", "trl", "sft", config), "is 17.0 MiB, more than a config.json ever is (16 MiB)")


def test_a_fifo_named_config_json_is_refused_without_being_opened(cw, tmp_path):
    config = _model(tmp_path, "")
    (tmp_path / "model" / "config.json").unlink()
    os.mkfifo(tmp_path / "model" / "config.json")
    _refused(cw("estimate", "trl", "sft", config, "-o", "json"), "config.json: not a regular file")


def test_a_config_json_linked_to_a_kernel_file_is_refused_without_waiting(cw, tmp_path):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc here")
    config = _model(tmp_path, "")
    (tmp_path / "model" / "config.json").unlink()
    # /proc/kmsg blocks on read (when readable at all); /proc/self/status is the same kind of file
    # (a "regular" file of size 0) and is readable by anyone.
    (tmp_path / "model" / "config.json").symlink_to("/proc/self/status")
    _refused(cw("estimate", "trl", "sft", config), "config.json: not a regular file")
    (tmp_path / "model" / "config.json").unlink()
    (tmp_path / "model" / "config.json").symlink_to("/proc/kmsg")
    _refused(cw("estimate", "trl", "sft", config), "config.json: not a regular file")


@pytest.mark.parametrize(
    ("text", "said"),
    [('{"hidden_size": ', "is not valid JSON"), ("[1, 2]", "holds a JSON list"), ("\udcff", "is not")],
)
def test_a_corrupt_config_json_is_named_not_reported_as_not_found(cw, tmp_path, text, said):
    config = _model(tmp_path, "")
    if text == "\udcff":
        (tmp_path / "model" / "config.json").write_bytes(b"\xff\xfe{}")
    else:
        (tmp_path / "model" / "config.json").write_text(text)
    result = cw("estimate", "trl", "sft", config)
    _refused(result, said)
    assert "not found" not in result.output


def test_an_unknown_model_type_is_skipped_without_building_a_model(cw, tmp_path, monkeypatch):
    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("transformers was asked to build a model_type it does not list")

    monkeypatch.setattr("transformers.AutoConfig.for_model", never)
    config = _model(tmp_path, json.dumps({**LLAMA, "model_type": "frobnicator"}))
    result = cw("estimate", "trl", "sft", config, "--gpu-memory", "80GB", "-o", "json")
    assert result.exit_code == 0, result.output
    skipped = json.loads(result.stdout)["skipped"]
    assert "model_type 'frobnicator'" in skipped and "the installed transformers does not know it either" in skipped
    assert len(skipped) < 400  # not transformers' list of every model it knows


def test_real_configs_pass_the_check():
    for path in MODELS.glob("*.json"):
        check_model_config(json.loads(path.read_text()), str(path))


# --- property -------------------------------------------------------------------------------------

hostile_numbers = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.integers(min_value=-2, max_value=5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 1e12, 2**31, 2**63, 10_000, 10_001, 2**24, 2**24 + 1, 4096.0]),
)
field_values = st.one_of(
    hostile_numbers, st.none(), st.booleans(), st.text(max_size=5), st.lists(st.integers(-3, 50), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
model_types = st.sampled_from(["llama", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "gemma2", "phi3", "gpt_neox",
                               "frobnicator", None, 7, ["llama"]])  # fmt: skip
config_jsons = st.tuples(
    st.sampled_from([LLAMA, MOE]),
    model_types,
    st.dictionaries(st.sampled_from([*DIMENSIONS, "mlp_only_layers", "tie_word_embeddings", "torch_dtype",
                                     "text_config"]), field_values, max_size=4),  # fmt: skip
).map(lambda parts: {**parts[0], "model_type": parts[1], **parts[2]})
CLUSTER = ClusterSpec.model_validate({"gpu": 1})


@settings(max_examples=150, deadline=None, derandomize=True)
@given(config_jsons, st.booleans())
def test_any_config_json_is_estimated_or_refused_with_a_cw_error(config, lora):
    native = {"model_name_or_path": "", "use_peft": lora, "per_device_train_batch_size": 2, "max_length": 1024}
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config), encoding="utf-8")  # NaN, Infinity as JSON5 does
        native["model_name_or_path"] = folder
        try:
            result = estimate_run(TRLFramework(), "sft", native, CLUSTER, None, EstimateOptions(gpu_memory="24GB"))
        except ConfigError as error:
            assert error.message.startswith(f"{folder}/config.json: `") and error.hint
            return
    result.summary()
    json.dumps(result.to_dict())  # what -o json writes
