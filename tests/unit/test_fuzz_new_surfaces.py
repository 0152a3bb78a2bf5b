"""Fuzzing what this release's new surfaces read from outside cw: the trainer's `[cw-progress]`
log lines (a server's answer: any pod may print anything), a pipeline file, the run listing with
its scores files (read from the volume by a helper pod), a `run:` reference. Each either gives
its result or refuses with cw's own error, never another exception."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cw_cli.config.pipeline import parse_pipeline
from cw_cli.diagnosis.progress import LINE_PREFIX, training_progress
from cw_cli.errors import CwError
from cw_cli.render.naming import is_run_name
from cw_cli.render.run_refs import parse_ref
from cw_cli.render.scores import GATE_ANNOTATION, Gate, best_checkpoint, gate_of, gate_refusal

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=30)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
                           max_leaves=25)  # fmt: skip
progress_keys = st.sampled_from(["step", "total", "elapsed_s", "steps_per_s", "samples_per_s", "tokens_per_s",
                                 "checkpoint", "checkpoint_at", "time"])  # fmt: skip


@st.composite
def progress_lines(draw) -> str:
    body = draw(st.dictionaries(progress_keys | st.text(max_size=8), scalars, max_size=9))
    text = json.dumps(body, allow_nan=True)
    cut = draw(st.integers(0, len(text)))
    noise = draw(st.sampled_from(["", "\r", "\x1b[2K", " 45%|####5     | 45/60 [00:20<00:06, 2.31it/s]\r"]))
    return noise + LINE_PREFIX + " " + (text if draw(st.booleans()) else text[:cut])


@SETTINGS
@given(st.lists(progress_lines() | st.text(max_size=60), max_size=6))
def test_any_log_tail_gives_progress_or_none(lines):
    found = training_progress(lines)
    if found is not None:
        assert found.step >= 0 and found.total >= 0


stage_bodies = st.dictionaries(
    st.sampled_from(["framework", "type", "config", "set", "after", "evaluate", "tasks", "environments", "metric", "limit",
                     "gpu", "checkpoint", "cpu", "memory"]) | st.text(max_size=8),
    json_values, max_size=6)  # fmt: skip


@SETTINGS
@given(st.one_of(json_values, st.fixed_dictionaries({"name": json_values, "stages": st.dictionaries(st.text(max_size=10), stage_bodies, max_size=4)})))
def test_any_pipeline_file_is_parsed_or_refused_with_cws_error(data):
    try:
        parse_pipeline(Path("/tmp/pipeline.yaml"), data, is_run_name)
    except CwError:
        pass


artifacts = st.fixed_dictionaries(
    {}, optional={"kind": st.sampled_from(["checkpoint", "final"]) | json_values, "complete": json_values,
                  "step": json_values, "scores": json_values | st.fixed_dictionaries(
                      {"metric": st.sampled_from(["t/acc"]) | json_values,
                       "scores": st.dictionaries(st.sampled_from(["t/acc"]) | st.text(max_size=5), json_values, max_size=3)},
                      optional={"higher_is_better": json_values})})  # fmt: skip


# Well-formed but for the step: a listing from an older or foreign lister, or a folder named oddly.
scored_checkpoints = st.fixed_dictionaries(
    {"kind": st.just("checkpoint"), "complete": st.just(True),
     "scores": st.fixed_dictionaries({"metric": st.just("t/acc"), "scores": st.fixed_dictionaries({"t/acc": st.floats(0, 1)})})},
    optional={"step": json_values})  # fmt: skip


@SETTINGS
@given(st.fixed_dictionaries({}, optional={"artifacts": st.lists(scored_checkpoints | artifacts | json_values, max_size=5) | json_values,
                                           "run_dir": json_values}),
       json_values)
def test_any_listing_gives_a_best_checkpoint_or_cws_error_and_the_gate_judges_it(listing, base_scores):
    try:
        chosen = best_checkpoint(listing)
    except CwError:
        return
    verdict = gate_refusal(Gate(metric="t/acc", max_drop=0.02, higher_is_better=True), chosen, base_scores)
    assert verdict is None or isinstance(verdict, str)


@SETTINGS
@given(st.text(max_size=80))
def test_any_run_reference_is_parsed_or_refused_with_cws_error(text):
    try:
        parse_ref(Path("/tmp/config.yaml"), "model_name_or_path", text)
    except CwError:
        pass


@SETTINGS
@given(json_values | st.fixed_dictionaries({"metric": json_values, "max_drop": json_values}, optional={"higher_is_better": json_values}))
def test_any_recorded_gate_is_read_as_a_gate_or_none(value):
    owner = {"metadata": {"annotations": {GATE_ANNOTATION: json.dumps(value, allow_nan=True)}}}
    gate = gate_of(owner)
    if gate is not None:
        assert gate.max_drop >= 0 and gate.max_drop != float("inf")


# --- the pod side: what the keeper reads from the API server, the notifier from the run's folder
import sys  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cw_cli" / "runtime"))
import cw_pipeline  # noqa: E402

from cw_cli.features.notify.pod import cw_notify  # noqa: E402

conditions = st.lists(st.fixed_dictionaries({}, optional={"type": st.sampled_from(["Complete", "Failed", "Completed"]) | json_values,
                                                          "status": st.sampled_from(["True", "False"]) | json_values}) | json_values,
                      max_size=3)  # fmt: skip
owners = st.none() | st.fixed_dictionaries({}, optional={"status": st.fixed_dictionaries({}, optional={"conditions": conditions | json_values}) | json_values})


@SETTINGS
@given(st.dictionaries(st.sampled_from(["sft", "dpo", "eval"]), owners), st.dictionaries(st.sampled_from(["sft", "dpo", "eval"]), json_values))
def test_the_pipeline_keeper_decides_from_any_answer(owners_read, recorded):
    document = {"order": ["sft", "dpo", "eval"], "stages": {"sft": {"after": [], "created": True},
                                                             "dpo": {"after": ["sft"]}, "eval": {"after": ["dpo"]}}}  # fmt: skip
    decided = cw_pipeline.decide(document, recorded, owners_read)
    assert set(decided) == {"sft", "dpo", "eval"}
    assert set(decided.values()) <= {"Succeeded", "Failed", "Running", "Deleted", "Skipped", "Create", "Waiting"}


@SETTINGS
@given(json_values)
def test_the_notifier_says_a_stall_from_any_stall_file(tmp_path_factory, content):
    run = tmp_path_factory.mktemp("run")
    (run / ".cw").mkdir()
    (run / ".cw" / cw_notify.STALL_FILE).write_text(json.dumps(content, allow_nan=True))
    assert isinstance(cw_notify.stall_text(run), str)


@SETTINGS
@given(st.integers(-300, 300), st.lists(st.text(max_size=80) | st.sampled_from(
    ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "Traceback (most recent call last):",
     "subprocess.CalledProcessError: Command '[...]' returned non-zero exit status 1.", "ValueError: bad",
     "Watchdog caught collective operation timeout"]), max_size=8))  # fmt: skip
def test_the_notifier_names_a_reason_for_any_failure(code, lines):
    reason = cw_notify.failure_reason(code, "\n".join(lines))
    assert f"exit code {code}" in reason


task_keys = st.sampled_from(["task", "dataset_path", "dataset_kwargs", "metric_list", "filter_list", "output_type",
                             "include", "doc_to_text"]) | st.text(max_size=8)  # fmt: skip


@SETTINGS
@given(json_values | st.dictionaries(task_keys, json_values | st.fixed_dictionaries({"data_files": json_values}), max_size=6))
def test_any_user_task_yaml_is_read_or_refused_with_a_reason(tmp_path_factory, content):
    import yaml

    from cw_cli.config.eval_tasks import read_user_task

    folder = tmp_path_factory.mktemp("task")
    path = folder / "task.yaml"
    path.write_text(yaml.safe_dump(content, allow_unicode=True))
    try:
        task = read_user_task(path, "task.yaml")
    except ValueError:
        return
    assert task.name and all(isinstance(score, str) for score in task.scores)


url_parts = st.sampled_from(["json://", "slack://", "mailto://", "discord://", "https://", "form://", "x://", ""])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.builds(lambda scheme, rest: scheme + rest, url_parts, st.text(max_size=40)), min_size=1, max_size=3),
       st.none() | st.text(max_size=20))  # fmt: skip
def test_any_notify_urls_are_taken_or_refused_naming_the_field(urls, secret):
    from pydantic import ValidationError

    from cw_cli.features.notify.config import NotifySpec, check_urls

    try:
        spec = NotifySpec.model_validate({"urls": urls, **({"secret": secret} if secret is not None else {})})
    except ValidationError:
        return  # the config loader turns it into a ConfigError naming the field (test_notify_config)
    try:
        check_urls(spec, Path("/tmp/config.yaml"))
    except CwError as error:
        assert "notify.urls[" in str(error) + " ".join(getattr(error, "issues", []) or [])


import cw_eval_watch  # noqa: E402


@SETTINGS
@given(json_values | st.binary(max_size=40) | st.fixed_dictionaries({"exit_code": scalars | st.just(0)}, optional={"finished_at": scalars}),
       st.booleans())  # fmt: skip
def test_the_watcher_reads_any_finished_record_as_a_yes_or_a_no(tmp_path_factory, content, model_there):
    """The trainer's ``.cw/finished.json`` lies on a volume anyone may write: any bytes give a yes or a no."""
    run = tmp_path_factory.mktemp("run")
    record = run / "finished.json"
    record.write_bytes(content if isinstance(content, bytes) else json.dumps(content, allow_nan=True).encode())
    if model_there:
        (run / "config.json").write_text("{}")
    finished = cw_eval_watch.trainer_finished(str(record))
    assert finished is (isinstance(content, dict) and type(content.get("exit_code")) is int and content["exit_code"] == 0)
    assert cw_eval_watch.final_ready(str(run), str(record)) is (finished and model_there)


@SETTINGS
@given(st.lists(st.text(max_size=30), max_size=3), st.none() | st.text(max_size=30), st.none() | st.floats(allow_nan=True),
       st.lists(st.text(max_size=12), max_size=2))  # fmt: skip
def test_any_environments_flag_gives_settings_or_cws_error(environments, metric, limit, tasks):
    """`cw eval RUN --environments ... --metric ... --limit ...` as typed: settings, or one clear error."""
    from cw_cli.after_training.evaluation import eval_settings

    try:
        settings = eval_settings("r", None, tasks, metric, limit, 0, environments=environments)
    except CwError:
        return
    assert settings["harness"] in ("vf-eval", "lm-eval")


eval_keys = st.sampled_from(["tasks", "environments", "environment_args", "metric", "limit", "rollouts_per_example"])


@SETTINGS
@given(st.dictionaries(eval_keys | st.text(max_size=8), json_values, max_size=5) | json_values,
       st.none() | st.tuples(st.text(max_size=20), st.dictionaries(st.text(max_size=8), json_values, max_size=3)))  # fmt: skip
def test_any_eval_block_with_any_trained_environment_is_checked_or_refused(block, trained):
    """A verifiers run's own environment filled into any `eval:` block: a checked block, or pydantic's
    refusal (which the loader words as `eval.<field>`), never another exception."""
    from pydantic import ValidationError

    from cw_cli.config.eval_environments import with_trained_environment
    from cw_cli.config.evaluation import EvalSpec

    filled = with_trained_environment(block, trained)
    try:
        spec = EvalSpec.model_validate(filled)
    except ValidationError:
        return
    assert (spec.tasks is None) != (spec.environments is None)
    assert set(spec.environment_args or {}) <= set(spec.environments or [])
    json.dumps(spec.environment_args, allow_nan=False)  # what the pod passes as --env-args


@SETTINGS
@given(json_values, st.text(max_size=20))
def test_vf_eval_is_given_arguments_only_as_one_json_object(arguments, environment):
    """cw-eval.json's environment_args as read in the pod (any JSON): vf-eval's argv is strings, and
    --env-args, when there, is one JSON object."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cw_cli" / "runtime"))
    import cw_vf_eval

    command = cw_vf_eval.vf_eval_command({"environment_args": arguments}, environment, "/m", 8000)
    assert all(isinstance(part, str) for part in command)
    options, ended, rest = command[: command.index("--")], "--" in command, command[command.index("--") + 1 :]
    assert ended and rest == [environment]  # whatever its name, the environment is never a flag
    if "--env-args" in options:
        assert isinstance(json.loads(options[options.index("--env-args") + 1]), dict)


@SETTINGS
@given(st.none() | st.integers() | st.text(max_size=200) | st.builds(
    lambda table, key, value: f"[{table}]\n{key} = {value}\n", st.sampled_from(["env", "environment", "x"]),
    st.sampled_from(["id", "args"]), st.text(max_size=30)))  # fmt: skip
def test_a_runs_config_toml_read_back_gives_arguments_or_none(text):
    """A run's ConfigMap `config.toml` (a server's answer): `{id: args}` or `{}`, never an exception."""
    from cw_cli.after_training.evaluation import trained_arguments

    found = trained_arguments(text)
    assert all(isinstance(k, str) and isinstance(v, dict) and v for k, v in found.items()) and len(found) <= 1
