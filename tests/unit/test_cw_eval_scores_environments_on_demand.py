"""`cw eval RUN --environments ENV`: verifiers environments scored by vf-eval on demand, also for a
run launched without an `eval:` block; the environment the run shipped travels from its
ConfigMap, any other is installed from the hub; bad input names the flag."""

from __future__ import annotations

import pytest

from cw_cli.after_training.evaluation import RunEnvironments, eval_settings, run_environments
from cw_cli.errors import ConfigError

MODULE = "import verifiers as vf\n\ndef load_environment(**kwargs):\n    ...\n"


def test_a_shipped_environment_travels_and_a_hub_one_is_installed():
    settings = eval_settings("r", None, [], None, 4, 0, environments=["cw-reverse-text", "primeintellect/gsm8k"],
                             shipped=RunEnvironments({"cw_reverse_text.py": MODULE}, {}))  # fmt: skip
    assert settings["harness"] == "vf-eval" and settings["environments"] == ["cw-reverse-text", "primeintellect/gsm8k"]
    assert settings["environment_files"] == {"cw_reverse_text.py": MODULE}
    assert len(settings["install"]) == 1 and "primeintellect/gsm8k" in " ".join(map(str, settings["install"][0]))
    assert settings["metric"] == "cw-reverse-text/reward" and settings["num_examples"] == 4
    assert settings["serve_with"] == "transformers" and settings["gpu"] == 0


def test_the_runs_gpu_choice_and_an_explicit_metric_carry_over():
    run = {"harness": "lm-eval", "tasks": ["hellaswag"], "gpu": 1, "metric": "hellaswag/acc"}
    settings = eval_settings("r", run, [], "gsm8k/correct_answer", None, None, environments=["primeintellect/gsm8k"])
    assert settings["serve_with"] == "vllm" and settings["gpu"] == 1 and settings["metric"] == "gsm8k/correct_answer"


@pytest.mark.parametrize(("tasks", "environments", "metric", "limit", "said"), [
    (["hellaswag"], ["primeintellect/gsm8k"], None, None, "--tasks and --environments: name one"),
    ([], ["bad id!"], None, None, "--environments"),
    ([], ["primeintellect/gsm8k"], "other/reward", None, "--metric"),
    ([], ["primeintellect/gsm8k"], None, 2.5, "--limit"),
])  # fmt: skip
def test_bad_flags_are_refused_naming_the_flag(tasks, environments, metric, limit, said):
    with pytest.raises(ConfigError) as caught:
        eval_settings("r", None, tasks, metric, limit, 0, environments=environments)
    text = "\n".join(caught.value.issues)
    assert said in text and "eval." not in text, text
    assert len(caught.value.issues) == 1, caught.value.issues  # one problem, one line


class OneConfigMap:
    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    def get(self, kind: str, name: str) -> dict | None:
        return {"data": self.data} if (kind, name) == ("ConfigMap", "r-config") else None


def test_the_runs_own_modules_are_its_python_files_but_not_cws():
    kube = OneConfigMap({"cw_reverse_text.py": MODULE, "cw_entrypoint.py": "cw's", "config.toml": "[env]"})
    assert run_environments(kube, "r").modules == {"cw_reverse_text.py": MODULE}  # type: ignore[arg-type]
