"""Property: whatever the config file holds, `cw trl sft FILE --dry-run` ends with exit code 0 or 2.

Hypothesis builds YAML-ish documents (nested mappings and lists of random scalars, cw's field
names among random keys, hostile YAML fragments, raw text) plus random files next to them, and
runs the real CLI in-process. Anything else (an unhandled exception is exit code 1 with a
traceback) or an example slower than the deadline fails the test. Derandomized, so CI is stable.
"""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("hypothesis")  # the `test` extra; skipped, not failed, without it
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from unit_helpers import builtin_registry  # noqa: E402

#: Names the generated documents use as keys: cw's fields, TRL keys cw reads, and anything.
FIELDS = [
    "gpu", "cpu", "memory", "nodes", "image", "files", "env", "secrets", "checkpoint_volume", "volumes",
    "hf_cache_volume", "node_selector", "annotations", "tolerations", "queue", "rdma", "priority_class",
    "service_account", "ttl_hours", "backoff_limit", "shm_size", "pull", "pip", "services", "server", "reward",
    "args", "port", "tensor_parallel_size", "model", "path", "read_only", "name", "key",
    "model_name_or_path", "dataset_name", "datasets", "data_files", "output_dir", "learning_rate", "use_vllm",
    "vllm_mode", "chat_template_path", "accelerate_config", "deepspeed", "reward_funcs", "max_memory",
    "model_init_kwargs", "<<",
]
#: Files the documents may name; some are written next to the config (with random content).
NAMES = ["reward.py", "data.jsonl", "tpl.jinja", "my file.py", "sub", "sub/x.txt", "../x", "/", "", "."]
SPECIAL = [
    "500m", "64Gi", "1e400", "1e99999999", "1m", "0", "-1", "1.5", "ckpts", "none", "Qwen/Qwen2.5-0.5B",
    "trl-lib/Capybara", "/etc/cw", "/checkpoints", "/data", "~", "{{ x }}", "---", "a\nb", " x ", "\x07", "0x1F",
]
#: Hostile YAML lines, mixed into the raw-text documents.
FRAGMENTS = [
    "a: &a [1, *a]", "x: !!set {a, b}", "x: !!binary aGVsbG8=", "x: !!omap [a: 1]", "x: !!python/name:os.system",
    "? [a, b]\n: c", "yes: 1", "null: 2", "1.5: x", "0: a", "x: 2024-13-45", "x: " + "1" * 5000,
    "gpu: 1\ngpu: 2", "b: &b {k: 1}\nc: {<<: *b, k2: 2}", "d: " + "[" * 100 + "]" * 100, "e: *undefined",
    "%YAML 1.1\n---", "---\nx: 1", "\t- tab", "f: 'unterminated", "g: !!int x", "memory: \"1e400\"",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(SPECIAL + NAMES)
)
keys = st.sampled_from(FIELDS) | st.text(max_size=6) | st.integers(min_value=-2, max_value=3) | st.sampled_from(NAMES)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=16,
)
documents = st.dictionaries(keys, values, max_size=6)
variable_names = st.sampled_from(["HF_TOKEN", "A", "_X", "1BAD", "CUDA_VISIBLE_DEVICES", ""])
#: Plausible values of cw's fields (one time in eight anything at all), so that many examples get
#: through loading into validation and rendering.
cw_fields = st.fixed_dictionaries(
    {},
    optional={
        name: st.integers(min_value=0, max_value=7).flatmap(lambda n, s=strategy: values if n == 0 else s)
        for name, strategy in {
            "gpu": st.integers(min_value=-1, max_value=9),
            "nodes": st.integers(min_value=1, max_value=3),
            "cpu": st.sampled_from(["500m", "2", "1.5", "1e3", "0.0001", "1e99999999"]),
            "memory": st.sampled_from(["64Gi", "1Mi", "512Mi", "1m", "1e400"]),
            "shm_size": st.sampled_from(["1Gi", "64Gi"]),
            "image": st.sampled_from(["img:1", "ghcr.io/o/i:2", "a b", "x\n"]),
            "checkpoint_volume": st.sampled_from(["ckpts", "none"]),
            "env": st.dictionaries(variable_names, scalars, max_size=3),
            "secrets": st.dictionaries(variable_names, st.sampled_from(["hf-token", "X"]), max_size=2),
            "files": st.lists(st.sampled_from(NAMES), max_size=3),
            "volumes": st.dictionaries(st.sampled_from(["data", "ckpts"]), st.sampled_from(["/data", "/x", "x"])),
            "services": st.dictionaries(
                st.sampled_from(["server", "reward"]),
                st.dictionaries(st.sampled_from(["gpu", "cpu", "memory", "image", "args", "port"]), scalars),
                max_size=2,
            ),
            "pip": st.lists(st.sampled_from(["numpy", "-e .", " x"]), max_size=2),
        }.items()
    },
)
#: TRL SFT's own keys whose values cw reads or ships (paths, free-form mappings).
native_fields = st.fixed_dictionaries(
    {},
    optional={
        "model_init_kwargs": values,
        "dataset_name": st.sampled_from(NAMES) | scalars,
        "chat_template_path": st.sampled_from(NAMES) | scalars,
        "output_dir": st.sampled_from(["/tmp/out", "out", "/checkpoints/x"]) | scalars,
        "learning_rate": scalars,
    },
)
RUNNABLE = {"checkpoint_volume": "ckpts", "model_name_or_path": "m", "dataset_name": "d"}
base = st.sampled_from([{}, RUNNABLE, RUNNABLE, RUNNABLE])


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    """A config file's text: a dumped document, JSON, or raw lines with hostile fragments."""
    document: dict[Any, Any] = {**draw(base), **draw(cw_fields), **draw(native_fields)}
    if draw(st.integers(min_value=0, max_value=3)) == 0:  # now and then, keys of any name
        document.update(draw(documents))
    style = draw(st.sampled_from(["yaml", "yaml", "json", "raw"]))
    if style == "yaml":
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=draw(st.booleans()))
    if style == "json":
        return json.dumps(document, default=str)
    lines = draw(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=5))
    return yaml.safe_dump(document, sort_keys=False) + "\n".join(lines) + "\n"


files_on_disk = st.lists(st.tuples(st.sampled_from(NAMES[:4] + ["sub/x.txt"]), st.binary(max_size=64)), max_size=3)


@pytest.fixture(scope="module")
def cw():
    """The CLI, built once and warmed up, so the deadline measures one config, not the imports."""
    from click.testing import CliRunner

    from cw_cli.cli.app import build_app

    app = build_app(builtin_registry())
    runner = CliRunner()

    def invoke(path: Path):
        return runner.invoke(app, ["trl", "sft", str(path), "--dry-run"])

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text("checkpoint_volume: ckpts\nmodel_name_or_path: m\ndataset_name: d\n")
        assert invoke(path).exit_code == 0
    yield invoke


@settings(
    max_examples=200,
    deadline=timedelta(seconds=3),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=config_texts(), files=files_on_disk, make_folder=st.booleans())
def test_any_config_ends_in_exit_code_0_or_2(cw, text, files, make_folder):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name, content in files:
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        if make_folder and not (root / "reward.py").exists():
            (root / "reward.py").mkdir()  # a folder named like a file
        path = root / "config.yaml"
        path.write_text(text, encoding="utf-8")
        result = cw(path)
    event(f"exit code {result.exit_code}")  # shown by --hypothesis-show-statistics
    report = f"exit {result.exit_code}: {result.exception!r}\n{result.output}\n--- config:\n{text}"
    assert result.exit_code in (0, 2), report
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert "error:" in result.stderr
