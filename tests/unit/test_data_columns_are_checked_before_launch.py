"""Before a run takes GPUs, cw checks that its data has the columns its training type reads
(issue 25 item 5): local files shipped with the run and datasets in the local Hugging Face
cache are read (first record, header or schema only); a wrong column is a ConfigError naming the
config, the key, the file, the columns found and the ones expected; a hub dataset not cached,
or a form not readable here, is a notice that its columns were not checked."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from unit_helpers import REPO, builtin_registry, load, plan_for, write_config

from cw_cli.errors import ConfigError

NOT_CHECKED = "its columns were not checked"
MODEL = {"model_name_or_path": "m"}


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path, monkeypatch):
    """No test reads the machine's own Hugging Face cache."""
    cache = tmp_path / "hub-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def _jsonl(path: Path, *records: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _plan(tmp_path: Path, type_name: str, native: dict[str, Any], framework: str = "trl", **flags: Any):
    return plan_for(framework, type_name, write_config(tmp_path, native), **flags)


def _refusal(tmp_path: Path, type_name: str, native: dict[str, Any], framework: str = "trl") -> str:
    with pytest.raises(ConfigError) as info:
        _plan(tmp_path, type_name, native, framework)
    return "\n".join(info.value.issues)


def _data_notices(plan) -> list[str]:
    return [n for n in plan.notices if NOT_CHECKED in n]


MSG = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
# (type, extra native keys, first record, accepted by `trl <type>` 1.16)
CASES = [
    ("sft", {}, {"messages": MSG}, True),
    ("sft", {}, {"text": "The sky is blue."}, True),
    ("sft", {}, {"prompt": "The sky is", "completion": " blue."}, True),
    ("sft", {}, {"prompt": MSG[:1], "completion": MSG[1:]}, True),  # conversational prompt-completion
    ("sft", {}, {"conversations": [{"from": "human", "value": "hi"}]}, True),  # ShareGPT, converted by TRL
    ("sft", {}, {"input_ids": [1, 2, 3]}, True),  # pre-tokenized
    ("sft", {"dataset_text_field": "content"}, {"content": "The sky is blue."}, True),
    ("sft", {"dataset_kwargs": {"skip_prepare_dataset": True}}, {"pixel_values": [0]}, True),
    ("sft", {}, {"question": "q", "answer": "a"}, False),
    ("sft", {}, {"prompt": "The sky is"}, False),
    ("sft", {"dataset_text_field": "content"}, {"text": "renamed away"}, False),
    ("dpo", {}, {"prompt": "p", "chosen": "a", "rejected": "b"}, True),
    ("dpo", {}, {"chosen": MSG, "rejected": MSG}, True),  # implicit prompt
    ("dpo", {}, {"prompt": "p", "completion": "c", "label": True}, False),
    ("dpo", {}, {"prompt": "p", "chosen": "a"}, False),
    ("kto", {}, {"prompt": "p", "completion": "c", "label": True}, True),
    ("kto", {}, {"prompt": "p", "chosen": "a", "rejected": "b"}, True),  # paired: TRL unpairs it
    ("kto", {}, {"chosen": "pa", "rejected": "pb"}, True),
    ("kto", {}, {"prompt": "p", "completion": "c"}, False),  # no label
    ("kto", {}, {"completion": "c", "label": True}, False),
    ("reward", {}, {"chosen": "a", "rejected": "b"}, True),
    ("reward", {}, {"prompt": "p", "chosen": "a", "rejected": "b"}, True),
    ("reward", {}, {"chosen_ids": [1], "rejected_ids": [2]}, True),
    ("reward", {}, {"prompt": "p", "completion": "c"}, False),
    ("grpo", {"reward_funcs": ["think_format_reward"]}, {"prompt": "p"}, True),
    ("grpo", {"reward_funcs": "accuracy_reward"}, {"prompt": "p", "solution": "1"}, True),
    ("grpo", {"reward_funcs": ["accuracy_reward"]}, {"prompt": "p", "answer": "1"}, False),
    ("grpo", {"reward_funcs": ["rewards.mine"]}, {"prompt": "p", "anything": 1}, True),
    ("grpo", {"reward_funcs": ["think_format_reward"]}, {"question": "q"}, False),
    ("rloo", {"reward_funcs": ["reasoning_accuracy_reward"]}, {"prompt": "p", "solution": "1"}, True),
    ("rloo", {"reward_funcs": ["reasoning_accuracy_reward"]}, {"prompt": "p"}, False),
    ("distillation", {"teacher_model_name_or_path": "t"}, {"prompt": MSG[:1]}, True),
    ("distillation", {"teacher_model_name_or_path": "t"}, {"messages": MSG}, False),
]


@pytest.mark.parametrize(("type_name", "extra", "record", "accepted"), CASES, ids=[f"{c[0]}-{'-'.join(c[2])}-{c[3]}" for c in CASES])
def test_each_trl_type_accepts_what_trl_reads_and_refuses_the_rest(tmp_path, type_name, extra, record, accepted):
    _jsonl(tmp_path / "train.jsonl", record, record)
    native = {**MODEL, **extra, "dataset_name": "train.jsonl"}
    if accepted:
        plan = _plan(tmp_path, type_name, native)
        assert not _data_notices(plan)
        return
    text = _refusal(tmp_path, type_name, native)
    assert f"{tmp_path / 'config.yaml'}: `dataset_name`: train.jsonl does not have the columns" in text
    assert f"file: {tmp_path / 'train.jsonl'}" in text
    assert f"columns found: {', '.join(record)}" in text
    assert "columns expected: " in text and f"`trl {type_name}`" in text


def test_the_refusal_has_one_line_each_for_file_found_and_expected(tmp_path):
    _jsonl(tmp_path / "data.jsonl", {"question": "q", "answer": "a"})
    text = _refusal(tmp_path, "sft", {**MODEL, "dataset_name": "data.jsonl"})
    lines = text.splitlines()
    assert lines[1:4] == [
        f"  file: {tmp_path / 'data.jsonl'}",
        "  columns found: question, answer",
        "  columns expected: messages; or text; or prompt and completion; or conversations; or input_ids",
    ]


def test_a_csv_header_a_json_array_and_a_text_file_are_read(tmp_path):
    with open(tmp_path / "d.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([["prompt", "completion"], ["a", "b"]])
    assert not _data_notices(_plan(tmp_path, "sft", {**MODEL, "dataset_name": "d.csv"}))
    (tmp_path / "d.json").write_text(json.dumps([{"chosen": "a", "rejected": "b"}] * 3))
    assert not _data_notices(_plan(tmp_path, "dpo", {**MODEL, "dataset_name": "d.json"}))
    (tmp_path / "d.txt").write_text("plain text lines\n")
    assert not _data_notices(_plan(tmp_path, "sft", {**MODEL, "dataset_name": "d.txt"}))
    assert "columns found: text" in _refusal(tmp_path, "dpo", {**MODEL, "dataset_name": "d.txt"})
    with open(tmp_path / "bad.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([["question", "answer"], ["a", "b"]])
    assert "columns found: question, answer" in _refusal(tmp_path, "sft", {**MODEL, "dataset_name": "bad.csv"})


def test_a_parquet_schema_is_read(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": ["p"], "chosen": ["a"], "rejected": ["b"]}), tmp_path / "pref.parquet")
    assert not _data_notices(_plan(tmp_path, "dpo", {**MODEL, "dataset_name": "pref.parquet"}))
    text = _refusal(tmp_path, "sft", {**MODEL, "dataset_name": "pref.parquet"})
    assert "columns found: prompt, chosen, rejected" in text


def test_parquet_without_pyarrow_is_not_checked_and_says_so(tmp_path, monkeypatch):
    (tmp_path / "d.parquet").write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    notes = _data_notices(_plan(tmp_path, "sft", {**MODEL, "dataset_name": "d.parquet"}))
    assert len(notes) == 1 and "pyarrow" in notes[0] and notes[0].startswith("`dataset_name`: d.parquet")


def test_a_folder_is_read_by_its_train_files(tmp_path):
    _jsonl(tmp_path / "data" / "train.jsonl", {"prompt": "p", "chosen": "a", "rejected": "b"})
    _jsonl(tmp_path / "data" / "test.jsonl", {"other": 1})  # another split: not what trains
    assert not _data_notices(_plan(tmp_path, "dpo", {**MODEL, "dataset_name": "data"}))
    _jsonl(tmp_path / "data" / "test.jsonl", {"prompt": "p", "chosen": "a", "rejected": "b"})
    _jsonl(tmp_path / "data" / "train.jsonl", {"other": 1})
    text = _refusal(tmp_path, "dpo", {**MODEL, "dataset_name": "data"})
    assert f"file: {tmp_path / 'data' / 'train.jsonl'}" in text
    _jsonl(tmp_path / "data" / "train.jsonl", {"prompt": "p", "chosen": "a", "rejected": "b"})
    native = {**MODEL, "dataset_name": "data", "dataset_train_split": "test"}
    _jsonl(tmp_path / "data" / "test.jsonl", {"other": 1})
    assert "test.jsonl" in _refusal(tmp_path, "dpo", native)


def test_datasets_items_with_a_builder_data_files_and_columns_are_checked(tmp_path):
    _jsonl(tmp_path / "sft.jsonl", {"messages": MSG, "id": 1})
    good = {**MODEL, "datasets": [{"path": "json", "data_files": "sft.jsonl"}]}
    assert not _data_notices(_plan(tmp_path, "sft", good))
    kept = {**MODEL, "datasets": [{"path": "json", "data_files": ["sft.jsonl"], "columns": ["id"]}]}
    text = _refusal(tmp_path, "sft", kept)
    assert "`datasets[0].path`: json" in text and "columns kept by `columns`: id" in text
    _jsonl(tmp_path / "second.jsonl", {"question": "q"})
    two = {**MODEL, "datasets": [{"path": "sft.jsonl"}, {"path": "second.jsonl"}]}
    assert "`datasets[1].path`: second.jsonl" in _refusal(tmp_path, "sft", two)


def test_datasets_wins_over_dataset_name_as_trl_does(tmp_path):
    _jsonl(tmp_path / "good.jsonl", {"text": "t"})
    _jsonl(tmp_path / "bad.jsonl", {"question": "q"})
    native = {**MODEL, "dataset_name": "bad.jsonl", "datasets": [{"path": "good.jsonl"}]}
    assert not _data_notices(_plan(tmp_path, "sft", native))


def _cache(root: Path, repo: str, files: dict[str, str | bytes], card: str | None = None) -> Path:
    """A hub cache entry as huggingface_hub lays it out: refs/main -> snapshots/<commit>/..."""
    folder = root / f"datasets--{repo.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snapshot = folder / "snapshots" / commit
    for name, content in {**files, **({"README.md": card} if card else {})}.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (snapshot / name).write_bytes(content)
        else:
            (snapshot / name).write_text(content)
    return snapshot


def test_a_hub_dataset_in_the_local_cache_is_checked(tmp_path, empty_hub_cache):
    record = json.dumps({"prompt": "p", "completion": "c", "label": True}) + "\n"
    _cache(empty_hub_cache, "org/kto-data", {"data/train-00000-of-00001.jsonl": record, "data/test.jsonl": "{}\n"})
    assert not _data_notices(_plan(tmp_path, "kto", {**MODEL, "dataset_name": "org/kto-data"}))
    text = _refusal(tmp_path, "dpo", {**MODEL, "dataset_name": "org/kto-data"})
    assert "`dataset_name`: org/kto-data does not have the columns" in text
    assert "datasets--org--kto-data/snapshots/" in text and "train-00000-of-00001.jsonl" in text
    assert "columns found: prompt, completion, label" in text


def test_hf_home_locates_the_cache_when_hf_hub_cache_is_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _cache(tmp_path / "hf" / "hub", "org/bad", {"train.jsonl": '{"question": "q"}\n'})
    assert "org/bad" in _refusal(tmp_path, "sft", {**MODEL, "dataset_name": "org/bad"})


def test_a_dataset_card_picks_the_configuration_and_split(tmp_path, empty_hub_cache):
    card = (
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train_sft\n    path: sft/train-*\n"
        "- config_name: prefs\n  data_files:\n  - split: train\n    path: prefs/*.jsonl\n---\n# card\n"
    )
    files = {
        "sft/train-0.jsonl": json.dumps({"messages": MSG}) + "\n",
        "prefs/all.jsonl": json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n",
    }
    _cache(empty_hub_cache, "org/mixed", files, card)
    sft = {**MODEL, "dataset_name": "org/mixed", "dataset_train_split": "train_sft"}
    assert not _data_notices(_plan(tmp_path, "sft", sft))
    assert not _data_notices(_plan(tmp_path, "dpo", {**MODEL, "dataset_name": "org/mixed", "dataset_config": "prefs"}))
    assert "prefs/all.jsonl" in _refusal(tmp_path, "sft", {**MODEL, "dataset_name": "org/mixed", "dataset_config": "prefs"})
    nosuch = {**MODEL, "dataset_name": "org/mixed", "dataset_config": "nosuch"}
    assert "has no configuration `nosuch`" in _data_notices(_plan(tmp_path, "sft", nosuch))[0]


def test_a_hub_dataset_not_cached_is_a_notice_not_an_error(tmp_path, empty_hub_cache):
    plan = _plan(tmp_path, "sft", {**MODEL, "dataset_name": "trl-lib/Capybara"})
    assert _data_notices(plan) == [
        "`dataset_name`: trl-lib/Capybara is not in the local Hugging Face cache: its columns were not checked"
    ]
    _cache(empty_hub_cache, "org/card-only", {}, "---\nlicense: mit\n---\n")  # the card, not the data
    notes = _data_notices(_plan(tmp_path, "sft", {**MODEL, "dataset_name": "org/card-only"}))
    assert notes == ["`dataset_name`: org/card-only has no data files of the `train` split here: " + NOT_CHECKED]


def test_a_path_on_a_volume_is_a_notice(tmp_path):
    notes = _data_notices(_plan(tmp_path, "sft", {**MODEL, "dataset_name": "/data/train.jsonl"}))
    assert notes == ["`dataset_name`: /data/train.jsonl is not on this machine (a path in the image or on a volume): " + NOT_CHECKED]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_is_never_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")  # opening it for reading would block forever
    assert "not a regular file" in _refusal(tmp_path, "sft", {**MODEL, "dataset_name": "pipe.jsonl"})


def test_a_first_record_over_the_read_bound_is_not_checked(tmp_path):
    from cw_cli.frameworks.trl import TRLFramework
    from cw_cli.render import dataset_check
    from cw_cli.types import TrainingType

    path = tmp_path / "long.jsonl"  # too large to ship, but a --local run reads it in place
    path.write_text(json.dumps({"question": "x" * (dataset_check.READ_LIMIT + 10)}) + "\n")
    needs = TRLFramework().dataset_needs({**MODEL, "dataset_name": "long.jsonl"}, TrainingType.SFT)
    notes = dataset_check.check_datasets(needs, tmp_path)
    assert len(notes) == 1 and "over 1 MiB" in notes[0] and NOT_CHECKED in notes[0]


def test_a_local_run_checks_too(tmp_path):
    _jsonl(tmp_path / "train.jsonl", {"question": "q"})
    path = write_config(tmp_path, {**MODEL, "dataset_name": "train.jsonl", "checkpoint_volume": None})
    from cw_cli.render.plan import RunRequest, build_plan

    loaded, training_type = builtin_registry().resolve_type("trl", "sft")
    with pytest.raises(ConfigError) as info:
        build_plan(RunRequest(loaded, training_type, load("trl", "sft", path), "golden-run", local=True))
    assert "columns found: question" in info.value.issues[0]


def test_axolotl_chat_template_reads_field_messages(tmp_path):
    _jsonl(tmp_path / "conv.jsonl", {"conversations": [{"from": "user", "value": "hi"}]})
    item = {"path": "./conv.jsonl", "ds_type": "json", "type": "chat_template"}
    base = {"base_model": "m", "output_dir": "./out"}
    named = {**base, "datasets": [{**item, "field_messages": "conversations"}]}
    assert not _data_notices(_plan(tmp_path, "sft", named, framework="axolotl"))
    text = _refusal(tmp_path, "sft", {**base, "datasets": [item]}, framework="axolotl")
    assert "`datasets[0].path`: ./conv.jsonl" in text and "columns expected: messages" in text
    other = {**base, "datasets": [{**item, "type": "alpaca"}]}  # a type cw declares nothing for
    assert not _data_notices(_plan(tmp_path, "sft", other, framework="axolotl"))


def test_axolotl_dpo_chat_template_default_reads_messages_chosen_rejected(tmp_path):
    _jsonl(tmp_path / "p.jsonl", {"messages": MSG[:1], "chosen": MSG[1], "rejected": MSG[1]})
    base = {"base_model": "m", "rl": "dpo", "output_dir": "./out"}
    good = {**base, "datasets": [{"path": "p.jsonl", "type": "chat_template.default"}]}
    assert not _data_notices(_plan(tmp_path, "dpo", good, framework="axolotl"))
    renamed = {**base, "datasets": [{"path": "p.jsonl", "type": "chat_template.default", "field_chosen": "better"}]}
    assert "columns expected: messages and rejected and better" in _refusal(tmp_path, "dpo", renamed, framework="axolotl")


def test_frameworks_that_declare_nothing_are_never_checked():
    from cw_cli.frameworks.base import BaseTrainingFramework
    from cw_cli.types import TrainingType

    verifiers = builtin_registry().resolve_type("verifiers", "grpo")[0].framework
    assert verifiers.dataset_needs({"env": {"id": "x"}}, TrainingType.GRPO) == []
    assert BaseTrainingFramework.dataset_needs(verifiers, {"dataset_name": "x"}, TrainingType.SFT) == []


def test_a_dry_run_with_a_wrong_column_exits_2_naming_it(tmp_path, monkeypatch):
    from cw_cli.cli.app import build_app

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _jsonl(tmp_path / "train.jsonl", {"question": "q", "answer": "a"})
    config = write_config(tmp_path, {**MODEL, "dataset_name": "train.jsonl"})
    result = CliRunner().invoke(build_app(builtin_registry()), ["trl", "sft", str(config), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "`dataset_name`: train.jsonl does not have the columns" in result.output
    assert "columns found: question, answer" in result.output
    assert "columns expected: messages; or text; or prompt and completion" in result.output
    assert "Traceback" not in result.output and "kind: Job" not in result.output


def test_the_check_imports_no_data_library_at_import_time():
    code = (
        "import sys, cw_cli.render.plan, cw_cli.render.dataset_check\n"
        "heavy = sorted(m for m in ('pyarrow', 'datasets', 'pandas') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert result.stdout.strip() == "[]"
