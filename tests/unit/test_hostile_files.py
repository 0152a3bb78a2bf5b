"""Hostile config files end with a clean message and exit code 2: never a traceback, a hang or all the memory.

Each test drives the real CLI (`cw <framework> <type> CONFIG --dry-run`) in-process through click's
CliRunner, and checks the exit code, the message (file, field, fix) and, where the old code hung
or ate memory, the time taken.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner
from unit_helpers import CONFIGS, builtin_registry

BASE = "checkpoint_volume: ckpts\nmodel_name_or_path: m\ndataset_name: d\n"
#: Line numbers of keys appended to BASE start here.
FIRST_LINE = BASE.count("\n") + 1


@pytest.fixture(scope="module")
def cw():
    """``cw ARGS...`` in-process; returns click's Result (exit_code, stdout, stderr, exception)."""
    from cw_cli.cli.app import build_app

    app = build_app(builtin_registry())
    runner = CliRunner()

    def invoke(*args: object):
        return runner.invoke(app, [str(arg) for arg in args])

    return invoke


def _dry_run(cw, path: Path, framework: str = "trl", type_name: str = "sft", *extra: str):
    return cw(framework, type_name, path, "--dry-run", *extra)


def _refused(result, *fragments: str) -> str:
    """Assert a clean refusal (exit 2, `error:` naming the problem, no traceback); return stderr."""
    assert result.exit_code == 2, (result.exit_code, result.exception, result.output)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and "error:" in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in:\n{result.stderr}"
    return result.stderr


def _write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _verifiers_yaml(extra_trainer_args: str) -> str:
    text = (CONFIGS / "verifiers-grpo.yaml").read_text().replace("files: [cw_reverse_text.py]", "")
    return text + extra_trainer_args


# 1. Alias bombs ("billion laughs")


def _alias_bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return BASE + "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once_naming_the_file(cw, tmp_path):
    path = _write(tmp_path, _alias_bomb(9))  # 9**10 strings once expanded; 1.3 KB on disk
    assert path.stat().st_size < 2048
    started = time.monotonic()
    stderr = _refused(_dry_run(cw, path), str(path), "refused", "values (an alias counts as all it stands for)")
    assert time.monotonic() - started < 5
    assert "aliases" in stderr  # the hint says what the limits are


def test_many_cheap_aliases_are_refused(cw, tmp_path):
    path = _write(tmp_path, BASE + "anchor: &x 1\nmany: [" + ", ".join(["*x"] * 1001) + "]\n")
    _refused(_dry_run(cw, path), f"{path}:{FIRST_LINE + 1}: refused: more than 1000 aliases")


def test_an_alias_inside_its_own_anchor_is_refused(cw, tmp_path):
    path = _write(tmp_path, BASE + "loop: &a [1, *a]\n")
    _refused(_dry_run(cw, path), f"{path}:{FIRST_LINE}: refused: alias *a is used inside its own anchor")


def test_ordinary_anchors_and_merge_keys_still_work(cw, tmp_path):
    text = BASE + "common: &common {lr: 1.0e-5, warmup: 10}\nmodel_init_kwargs:\n  <<: *common\n  extra: *common\n"
    result = _dry_run(cw, _write(tmp_path, text))
    assert result.exit_code in (0, 2), result.output  # TRL may refuse the unknown keys; the YAML is fine
    assert "refused" not in result.stderr and "Traceback" not in result.output


def test_a_shared_node_is_walked_once_for_line_numbers(tmp_path):
    # Under the limits but 9**5 paths when walked as copies: the line recorder must not expand it.
    from cw_cli.config.yaml_source import load_yaml_config

    path = _write(tmp_path, _alias_bomb(4))
    started = time.monotonic()
    source = load_yaml_config(path)
    assert time.monotonic() - started < 2
    assert source.lines[("a4",)] == FIRST_LINE + 4
    assert not any(len(key) > 2 for key in source.lines)  # aliased subtrees are not re-recorded


# 2. What the config file is: its size and kind


def test_a_50_mb_config_is_refused_before_reading(cw, tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as handle:
        handle.truncate(50 * 2**20)  # sparse: nothing is written, and nothing may be read
    started = time.monotonic()
    _refused(_dry_run(cw, path), str(path), "50.0 MiB; a config may be at most 1 MiB", "volume")
    assert time.monotonic() - started < 2


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_as_config_is_refused(cw):
    _refused(_dry_run(cw, Path("/dev/zero")), "/dev/zero: cannot read it: not a regular file")


def test_a_fifo_as_config_is_refused_without_blocking(cw, tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)

    def unblock() -> None:  # should a regression open the FIFO, give it a writer so the test ends
        time.sleep(5)
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return  # nobody is reading: the CLI did not open it
        os.write(fd, b"x: 1\n")
        os.close(fd)

    threading.Thread(target=unblock, daemon=True).start()
    started = time.monotonic()
    _refused(_dry_run(cw, fifo), f"{fifo}: cannot read it: not a regular file (a device, FIFO or socket)")
    assert time.monotonic() - started < 2


def test_a_folder_as_config_is_refused(cw, tmp_path):
    _refused(_dry_run(cw, tmp_path), f"{tmp_path}: cannot read it: it is a folder")


# 3. Deep nesting


@pytest.mark.parametrize("value", ["[" * 20000 + "]" * 20000, "{a: " * 20000 + "1" + "}" * 20000])
def test_20000_deep_nesting_is_refused(cw, tmp_path, value):
    path = _write(tmp_path, BASE + f"x: {value}\n")
    _refused(_dry_run(cw, path), f"{path}:{FIRST_LINE}: refused: nested more than 64 levels deep")


def test_a_config_63_levels_deep_still_renders(cw, tmp_path):
    # The limit leaves room for everything after loading (copies, validation, YAML dump).
    path = _write(tmp_path, BASE + "model_init_kwargs: {a: " + "[" * 62 + "]" * 62 + "}\n")
    result = _dry_run(cw, path)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "toml",
    [
        "x = " + "[" * 20000 + "]" * 20000 + "\n",
        ".".join(["a"] * 20000) + " = 1\n",
        "[" + ".".join(["t"] * 20000) + "]\n",
    ],
    ids=["array", "dotted-key", "table"],
)
def test_deep_toml_is_refused(cw, tmp_path, toml):
    path = _write(tmp_path, 'model = "m"\n' + toml, "config.toml")
    started = time.monotonic()
    _refused(_dry_run(cw, path, "verifiers", "grpo"), str(path), "refused:", "nested")
    assert time.monotonic() - started < 3


def test_a_deeply_nested_set_value_is_refused(cw, tmp_path):
    path = _write(tmp_path, BASE)
    _refused(_dry_run(cw, path, "trl", "sft", "--set", "x=" + "[" * 20000), "--set", "nested more than 64 levels")
    _refused(_dry_run(cw, path, "trl", "sft", "--set", ".".join(["k"] * 20000) + "=1"), "nested more than 64")


# 4. Quantities


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("memory", '"1e400"', "the exponent is over 18"),
        ("cpu", '"1e99999999"', "the exponent is over 18"),
        ("memory", '"' + "9" * 5000 + '"', "is not a Kubernetes quantity"),
        ("cpu", ".inf", "is not a Kubernetes quantity"),
        ("memory", '"99999999999Ei"', "larger than Kubernetes can hold"),
        ("memory", "1m", "memory below 1Mi makes no sense"),
        ("memory", "512", "memory below 1Mi makes no sense"),
        ("shm_size", "1m", "`m` means a thousandth; mebibytes are `Mi`"),
        ("cpu", "0.0001", "the smallest cpu Kubernetes accepts (1m)"),
    ],
)
def test_hostile_quantities_are_refused_in_milliseconds(cw, tmp_path, field, value, fragment):
    path = _write(tmp_path, BASE + f"{field}: {value}\n")
    started = time.monotonic()
    _refused(_dry_run(cw, path), f"{path}:{FIRST_LINE}: `{field}`:", fragment)
    assert time.monotonic() - started < 2


def test_real_quantities_still_work(cw, tmp_path):
    path = _write(tmp_path, BASE + "cpu: 500m\nmemory: 64Gi\nshm_size: 1Gi\nservices: {}\n")
    assert _dry_run(cw, path).exit_code == 0
    path = _write(tmp_path, BASE + "cpu: 1.5\nmemory: 1e9\n")
    assert _dry_run(cw, path).exit_code == 0


def test_parse_quantity_bounds():
    from cw_cli.config.quantity import parse_quantity

    assert parse_quantity("500m") == 0.5 and parse_quantity("64Gi") == 64 * 2**30 and parse_quantity(1.5) == 1.5
    assert parse_quantity("1e3") == 1000 and parse_quantity("2E18") == 2e18
    for hostile in ("1e19", "1e400", "1e99999999", "9" * 400, "1" * 41, "inf", "nan", "-1", "0"):
        started = time.monotonic()
        with pytest.raises(ValueError):
            parse_quantity(hostile)
        assert time.monotonic() - started < 0.1


# 5. Key types and tags


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ("    1: 2\n", "`trainer.args.1`: a TOML key is a string; quote it"),
        ("    s: !!set {a, b}\n", "`trainer.args.s`: a !!set value cannot be passed on"),
        ("    s: !!binary aGVsbG8=\n", "`trainer.args.s`: a !!binary value cannot be passed on"),
    ],
    ids=["int-key", "set", "binary"],
)
def test_verifiers_values_toml_cannot_hold_are_refused(cw, tmp_path, extra, fragment):
    path = _write(tmp_path, _verifiers_yaml(extra))
    _refused(_dry_run(cw, path, "verifiers", "grpo"), str(path), fragment)


def test_verifiers_serialization_turns_type_errors_into_value_errors():
    from cw_cli.frameworks.verifiers import VerifiersFramework

    with pytest.raises(ValueError, match="cannot be written as verifiers' TOML"):
        VerifiersFramework().serialize_config({"trainer": {"args": {"s": {1, 2}}}})


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("yes: 1", "`yes`: the key 'yes' is read as a bool, not a string; quote it ('yes': ...)"),
        ("model_init_kwargs: {null: 1}", "`model_init_kwargs.null`: the key 'null' is read as a null"),
        ("model_init_kwargs: {1.5: x}", "`model_init_kwargs.1.5`: the key '1.5' is read as a float"),
        ("model_init_kwargs: {[a]: x}", "`model_init_kwargs.<sequence>`: a key must be a string, not a sequence"),
        ("model_init_kwargs: {x: !!omap [a: 1]}", "`model_init_kwargs.x`: a !!omap value cannot be passed on"),
        ("x: 2024-13-45", "`x`: '2024-13-45' cannot be read (month must be in 1..12)"),
        ("x: " + "1" * 5000, "`x`: '1111111111111111111111111111111111111111...' cannot be read"),
    ],
)
def test_keys_and_values_a_config_cannot_hold_are_refused_with_their_path(cw, tmp_path, line, fragment):
    path = _write(tmp_path, BASE + line + "\n")
    _refused(_dry_run(cw, path), f"{path}:{FIRST_LINE}: {fragment}")


def test_integer_keys_still_work_where_frameworks_use_them(cw, tmp_path):
    # Axolotl's `max_memory` maps device indexes to sizes (tests/corpus has a published example).
    from unit_helpers import load

    path = _write(tmp_path, "checkpoint_volume: c\nbase_model: m\ndatasets: [{path: d, type: alpaca}]\n"
                  "max_memory: {0: 20GiB, 1: 20GiB, cpu: 64GiB}\n")
    assert load("axolotl", "sft", path).native["max_memory"] == {0: "20GiB", 1: "20GiB", "cpu": "64GiB"}


def test_a_set_value_given_on_the_command_line_is_refused(cw, tmp_path):
    path = _write(tmp_path, BASE)
    _refused(_dry_run(cw, path, "trl", "sft", "--set", "x=!!set {a}"), "--set 'x=!!set {a}': a !!set value")


# 6. Duplicate keys


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("gpu: 1\ngpu: 2\n", f"{FIRST_LINE + 1}: `gpu`: the key is given twice, at lines {FIRST_LINE} and {FIRST_LINE + 1}"),
        ("model_init_kwargs:\n  a: 1\n  'a': 2\n", f"`model_init_kwargs.a`: the key is given twice, at lines {FIRST_LINE + 1}"),
        ("max_memory: {0: a, 0x0: b}\n", f"{FIRST_LINE}: `max_memory.0x0`: the key is given twice"),
    ],
    ids=["top", "nested", "int"],
)
def test_duplicate_keys_are_refused_with_both_lines(cw, tmp_path, text, fragment):
    path = _write(tmp_path, BASE + text)
    _refused(_dry_run(cw, path), fragment)


# 7. Booleans are not numbers


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("gpu: true", "gpu"),
        ("nodes: true", "nodes"),
        ("backoff_limit: false", "backoff_limit"),
        ("ttl_hours: true", "ttl_hours"),
        ("services: {server: {gpu: true}}", "services.server.gpu"),
        ("tolerations: [{key: k, operator: Exists, tolerationSeconds: true}]", "tolerations.0.tolerationSeconds"),
    ],
)
def test_booleans_are_refused_where_a_number_is_expected(cw, tmp_path, text, field):
    path = _write(tmp_path, BASE + text + "\n")
    _refused(_dry_run(cw, path), f"`{field}`: must be a number, not")


# 8. Image references


@pytest.mark.parametrize(
    "image",
    ["foo\nbar", " foo:1", "foo:1 ", "foo\t:1", "foo\x07:1", "foo\u00a0:1", ""],
    ids=["newline", "leading-space", "trailing-space", "tab", "bell", "nbsp", "empty"],
)
def test_an_image_with_whitespace_or_control_characters_is_refused(cw, tmp_path, image):
    import json

    path = _write(tmp_path, BASE + f"image: {json.dumps(image)}\n")
    _refused(_dry_run(cw, path), f"{path}:{FIRST_LINE}: `image`:", "is not an image reference")
    path = _write(tmp_path, BASE.replace("model_name_or_path", "use_vllm: true\nvllm_mode: server\nmodel_name_or_path")
                  + f"services: {{server: {{image: {json.dumps(image)}}}}}\n")
    _refused(_dry_run(cw, path, "trl", "grpo"), "`services.server.image`:", "is not an image reference")


# 9. Shipped files


def test_a_shipped_file_name_must_be_a_configmap_key(cw, tmp_path):
    (tmp_path / "my reward.py").write_text("x = 1\n")
    path = _write(tmp_path, BASE + "files: ['my reward.py']\n")
    _refused(_dry_run(cw, path), f"{path}:{FIRST_LINE}: `files.0`:", "valid ConfigMap key", "rename the file")


def test_two_shipped_files_with_one_name_are_refused(cw, tmp_path):
    path = _write(tmp_path, BASE + "files: [a/x.py, b/x.py]\n")
    _refused(_dry_run(cw, path), "`files`: two files are named 'x.py'")


def test_a_fifo_in_files_is_not_a_regular_file_and_is_not_opened(cw, tmp_path):
    os.mkfifo(tmp_path / "reward.py")
    path = _write(tmp_path, BASE + "files: [reward.py]\n")
    started = time.monotonic()
    _refused(_dry_run(cw, path), f"`files`: {tmp_path / 'reward.py'} is not a regular file")
    assert time.monotonic() - started < 2


def test_a_folder_in_files_is_named_a_folder(cw, tmp_path):
    (tmp_path / "reward.py").mkdir()
    path = _write(tmp_path, BASE + "files: [reward.py]\n")
    _refused(_dry_run(cw, path), f"`files`: {tmp_path / 'reward.py'} is a folder")


def test_a_10_mb_file_in_files_is_refused_from_its_size_without_reading_it(cw, tmp_path):
    big = tmp_path / "data.jsonl"
    with open(big, "wb") as handle:
        handle.truncate(10 * 2**20)
    path = _write(tmp_path, BASE + "files: [data.jsonl]\n")
    tracemalloc.start()
    try:
        result = _dry_run(cw, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _refused(result, f"`files`: {big} is 10.00 MiB, over the 1 MiB a ConfigMap holds", "volumes: {my-data: /data}")
    assert peak < 5 * 2**20, f"{peak / 2**20:.1f} MiB allocated: the file was read"


def test_a_referenced_folder_is_walked_only_until_it_is_too_large(cw, tmp_path, monkeypatch):
    from cw_cli.render import shipped_files

    monkeypatch.setattr(shipped_files, "MAX_TREE_FILES", 5)
    data = tmp_path / "data"
    data.mkdir()
    for index in range(20):
        (data / f"part-{index}.jsonl").write_text("{}\n")
    os.mkfifo(data / "pipe")  # never a file to ship (nor to open)
    path = _write(tmp_path, BASE.replace("dataset_name: d", "dataset_name: data"))
    _refused(_dry_run(cw, path), "`dataset_name: data` is at least 6 files and 0.00 MiB, too large to ship", "volumes:")


def test_a_referenced_device_is_never_shipped_and_its_data_refused(cw, tmp_path):
    path = _write(tmp_path, BASE.replace("dataset_name: d", "dataset_name: /dev/null"))
    result = _dry_run(cw, path)  # no trainer reads data from a device: refused before launch (issue 32)
    assert result.exit_code == 2 and "ships /dev/null" not in result.stderr, result.output
    assert "/dev/null is not a regular file or folder" in result.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
