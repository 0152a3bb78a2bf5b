"""An `eval:` block may name verifiers environments, scored by verifiers' own vf-eval: bad input is
one line naming `eval.<field>` before anything is created; the rendered settings carry what the
evaluation pod needs (the environment module shipped with the run, or the hub install the trainer
would run; the server for its GPUs; what to pip-install); the pod side builds vf-eval's and the
server's command lines and names the scores of vf-eval's saved metadata `<env>/reward` and
`<env>/<reward function>`."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from unit_helpers import REPO, load, plan_for, write_config

from cw_cli.errors import ConfigError

sys.path.insert(0, str(REPO / "cw_cli" / "runtime"))
import cw_vf_eval  # noqa: E402

BASE = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara"}
GOOD = {"environments": ["cw-reverse-text"], "metric": "cw-reverse-text/reward", "limit": 4, "rollouts_per_example": 2}


def _error(tmp_path: Path, block: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        load("trl", "sft", write_config(tmp_path, {**BASE, "eval": block}))
    return "\n".join(caught.value.issues)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"metric": "x/reward"}, "`eval.tasks` / `eval.environments`: name exactly one"),
        ({**GOOD, "tasks": ["hellaswag"]}, "`eval.tasks` / `eval.environments`: name exactly one"),
        ({**GOOD, "environments": ["my env"]}, "`eval.environments`: 'my env' is no verifiers environment id"),
        ({**GOOD, "environments": ["a/x", "b/x"], "metric": "x/reward"}, "`eval.environments`: an environment is named twice"),
        ({**GOOD, "metric": "other/reward"}, "`eval.metric`: 'other/reward' names environment 'other', which is not in eval.environments"),
        ({**GOOD, "limit": 0.5}, "`eval.limit`: 0.5 is no whole number"),
        ({**GOOD, "num_fewshot": 2}, "`eval.num_fewshot`: only for lm-eval tasks"),
        ({"tasks": ["hellaswag"], "metric": "hellaswag/acc", "rollouts_per_example": 2}, "`eval.rollouts_per_example`: only for environments"),
    ],
)  # fmt: skip
def test_bad_environment_blocks_are_refused_naming_the_field(tmp_path, block, expected):
    text = _error(tmp_path, block)
    assert expected in text and "Traceback" not in text


def test_a_hub_environment_scores_under_its_name_without_the_owner(tmp_path):
    config = load("trl", "sft", write_config(tmp_path, {**BASE, "eval": {"environments": ["primeintellect/vf-gsm8k"],
                                                                        "metric": "vf-gsm8k/correct_answer"}}))  # fmt: skip
    assert config.cluster.eval is not None and config.cluster.eval.environments == ["primeintellect/vf-gsm8k"]


def _verifiers_config(tmp_path: Path, block: dict) -> Path:
    import yaml

    data = yaml.safe_load((REPO / "configs" / "verifiers-grpo.yaml").read_text())
    shutil.copy(REPO / "configs" / "cw_reverse_text.py", tmp_path / "cw_reverse_text.py")
    return write_config(tmp_path, {**data, "eval": block})


def test_a_shipped_environment_travels_in_the_settings_and_a_gpu_evaluation_serves_with_vllm(tmp_path):
    from cw_cli.render.evaluation import eval_requirements, settings_of

    config = load("verifiers", "grpo", _verifiers_config(tmp_path, {**GOOD, "generation": {"temperature": 0}}))
    assert config.cluster.eval is not None
    settings = settings_of(config.cluster.eval, config.path.parent, config.cluster.gpu, list(config.cluster.files))
    assert settings["harness"] == "vf-eval" and settings["environments"] == ["cw-reverse-text"]
    assert settings["environment_files"] == {"cw_reverse_text.py": (tmp_path / "cw_reverse_text.py").read_text()}
    assert settings["install"] == [] and settings["serve_with"] == "vllm" and settings["gpu"] == 1
    assert (settings["num_examples"], settings["rollouts_per_example"], settings["sampling_args"]) == (4, 2, {"temperature": 0})
    assert eval_requirements(settings) == ["verifiers==0.1.9.post3"]  # the image has vLLM; no transformers 5 on a GPU


def test_a_hub_environment_is_installed_as_the_trainer_installs_it_and_cpu_serves_with_transformers(tmp_path):
    from cw_cli.after_training.evaluation import eval_settings
    from cw_cli.frameworks.verifiers.launch import environment_install
    from cw_cli.render.eval_environments import CPU_SERVER_REQUIREMENTS
    from cw_cli.render.evaluation import eval_requirements, settings_of

    block = {"environments": ["primeintellect/vf-gsm8k"], "metric": "vf-gsm8k/reward", "gpu": 0}
    config = load("verifiers", "grpo", _verifiers_config(tmp_path, block))
    assert config.cluster.eval is not None
    settings = settings_of(config.cluster.eval, config.path.parent, config.cluster.gpu, list(config.cluster.files))
    assert settings["environment_files"] == {} and settings["serve_with"] == "transformers"
    assert settings["install"] == [environment_install("primeintellect/vf-gsm8k")]
    assert eval_requirements(settings) == ["verifiers==0.1.9.post3", "prime==0.18.0", *CPU_SERVER_REQUIREMENTS]
    on_gpu = eval_settings("r", settings, [], None, None, 1)  # `cw eval RUN --gpu 1`
    assert on_gpu["serve_with"] == "vllm" and eval_requirements(on_gpu) == ["verifiers==0.1.9.post3", "prime==0.18.0"]


def test_the_run_ships_the_vf_eval_runner_and_its_jobs_install_verifiers(tmp_path):
    from cw_cli.frameworks.runtime_files import VF_EVAL_FILE
    from cw_cli.render.evaluation import JOB_FILE, SPEC_FILE

    plan = plan_for("verifiers", "grpo", _verifiers_config(tmp_path, GOOD), run_name="vfe")
    config_map = next(m for m in plan.manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "vfe-config")
    data = config_map["data"]
    assert VF_EVAL_FILE in data and json.loads(data[SPEC_FILE])["harness"] == "vf-eval"
    command = json.loads(data[JOB_FILE])["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python3", "/etc/cw/cw_pip.py", "verifiers==0.1.9.post3"] and "/etc/cw/cw_eval.py" in command


def test_cw_eval_of_an_environment_run_gets_the_runner_in_its_own_config_map():
    from cw_cli.frameworks.runtime_files import VF_EVAL_FILE
    from cw_cli.render.evaluation import EvalResources, eval_manifests, target
    from cw_cli.render.export import ExportFacts

    facts = ExportFacts(run_name="r", run_dir="/checkpoints/r", claim="c", image="i", labels={})
    settings = {"harness": "vf-eval", "environments": ["e"], "requirements": ["verifiers==0.1.9.post3"]}
    job, config_map = eval_manifests(facts, settings, target(facts.run_dir, "3"), EvalResources(), requirements=["x==1"])
    assert VF_EVAL_FILE in config_map["data"]
    lm_job, lm_map = eval_manifests(facts, {"harness": "lm-eval"}, target(facts.run_dir, "3"), EvalResources())
    assert VF_EVAL_FILE not in lm_map["data"]


def test_scores_are_vf_evals_averages_named_by_environment():
    metadata = {"env_id": "cw-reverse-text", "avg_reward": 0.25, "avg_metrics": {"reversal_similarity": 0.5, "num_turns": 1}}
    assert cw_vf_eval.scores_of("owner/cw-reverse-text", metadata) == {
        "cw-reverse-text/reward": 0.25, "cw-reverse-text/reversal_similarity": 0.5, "cw-reverse-text/num_turns": 1.0}  # fmt: skip
    with pytest.raises(ValueError, match="no finite avg_reward"):
        cw_vf_eval.scores_of("e", {"avg_reward": float("nan")})
    with pytest.raises(ValueError, match="not a JSON object"):
        cw_vf_eval.scores_of("e", [])


def test_the_command_lines_are_vf_evals_and_the_servers_own_flags():
    spec = {"serve_with": "transformers", "num_examples": 3, "rollouts_per_example": 2, "sampling_args": {"temperature": 0}}
    assert cw_vf_eval.vf_eval_command(spec, "my-env", "/m", 8123) == [
        "vf-eval", "--model", "/m", "--api-base-url", "http://127.0.0.1:8123/v1", "--api-key-var",
        "CW_EVAL_API_KEY", "--save-results", "--num-examples", "3", "--rollouts-per-example", "2",
        "--sampling-args", '{"temperature": 0}', "--", "my-env"]  # fmt: skip
    assert cw_vf_eval.server_command(spec, "/m", 8123) == ["transformers", "serve", "/m", "--host", "127.0.0.1", "--port", "8123"]
    vllm = cw_vf_eval.server_command({"serve_with": "vllm", "gpu": 2}, "/m", 8123)
    assert vllm == ["vllm", "serve", "/m", "--served-model-name", "cw-eval", "--tensor-parallel-size", "2",
                    "--host", "127.0.0.1", "--port", "8123"]  # fmt: skip
    assert cw_vf_eval.vf_eval_command({"serve_with": "vllm"}, "e", "/m", 1)[2] == "cw-eval"


def test_a_lora_checkpoint_is_served_by_vllm_on_its_base(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Q", "r": 12}))
    command = cw_vf_eval.server_command({"serve_with": "vllm", "gpu": 1}, str(tmp_path), 9)
    assert command[:7] == ["vllm", "serve", "Qwen/Q", "--enable-lora", "--lora-modules", f"cw-eval={tmp_path}", "--max-lora-rank"]
    assert command[7] == "16"


def test_failed_rollouts_are_counted_from_vf_evals_results(tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text('{"reward": 0, "error": "ModelError()"}\n{"reward": 1, "error": null}\nnot json\n')
    assert cw_vf_eval.rollout_errors(str(results)) == (1, 2, "ModelError()")
    assert cw_vf_eval.rollout_errors(str(tmp_path / "missing")) == (0, 0, "")


def test_cw_eval_flags_change_an_environment_runs_metric_and_examples_or_are_refused_naming_the_flag():
    from cw_cli.after_training.evaluation import eval_settings

    run = {"harness": "vf-eval", "environments": ["owner/my-env"], "metric": "my-env/reward", "num_examples": 5, "gpu": 0}
    changed = eval_settings("r", run, [], "my-env/exact", 20, None)
    assert (changed["metric"], changed["num_examples"], changed["harness"]) == ("my-env/exact", 20, "vf-eval")
    with pytest.raises(ConfigError) as caught:
        eval_settings("r", run, [], "other/reward", 2.5, None)
    assert any(i.startswith("--metric: 'other/reward'") for i in caught.value.issues)
    assert any(i.startswith("--limit: 2.5 is no whole number") for i in caught.value.issues)
