"""Golden files: every example config renders exactly the reviewed manifests in tests/expected/.

Regenerate after an intended change, then review the diff like code:
    CW_UPDATE_GOLDEN=1 pytest tests/unit/test_golden_rendering.py
"""

from __future__ import annotations

import copy
import difflib
import os
from pathlib import Path

import pytest
import yaml
from unit_helpers import CONFIGS, EXPECTED, REPO, container, kinds_and_names, mounted_config, obj, plan_for, pod_spec, reparse

RUN = "golden-run"
#: config stem -> (framework, training type)
GOLDEN_CONFIGS = {
    "trl-sft": ("trl", "sft"),
    "test-cluster-sft": ("trl", "sft"),
    "test-cluster-dpo": ("trl", "dpo"),
    "trl-dpo": ("trl", "dpo"),
    "trl-grpo": ("trl", "grpo"),
    "trl-kto": ("trl", "kto"),
    "trl-reward": ("trl", "reward"),
    "trl-rloo": ("trl", "rloo"),
    "trl-distillation": ("trl", "distillation"),
    "axolotl-sft": ("axolotl", "sft"),
    "axolotl-grpo": ("axolotl", "grpo"),
    "verifiers-grpo": ("verifiers", "grpo"),
}
#: ConfigMap keys whose text is a file of the repo (cw's runtime files, the user's files next
#: to the config) are shown as a placeholder in the golden file and checked byte for byte below,
#: so editing the reward server does not churn every golden file.
def _file_keys() -> dict[str, Path]:
    from cw_cli.frameworks import runtime_files

    keys = {key: runtime_files.RUNTIME_DIR / source for key, source in runtime_files._SOURCES.items()}
    keys.update({path.name: path for path in CONFIGS.glob("*.py")})
    return keys


FILE_KEYS = _file_keys()


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (config.yaml, scripts) as literal blocks, so a reviewer can read them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(ch in value for ch in "\t\r") and value == value.rstrip(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _normalized(manifests: list[dict]) -> list[dict]:
    manifests = copy.deepcopy(manifests)
    for manifest in manifests:
        if manifest["kind"] == "ConfigMap":
            for key, path in FILE_KEYS.items():
                if key in manifest["data"]:
                    manifest["data"][key] = f"<contents of {path.relative_to(REPO)}>"
    return manifests


def render_golden(stem: str) -> str:
    framework, type_name = GOLDEN_CONFIGS[stem]
    plan = plan_for(framework, type_name, CONFIGS / f"{stem}.yaml", run_name=RUN)
    header = f"# cw {framework} {type_name} configs/{stem}.yaml --name {RUN} --dry-run (reviewed; regenerate with CW_UPDATE_GOLDEN=1)\n"
    body = yaml.dump_all(
        _normalized(plan.manifests), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=True
    )
    return header + body


def test_every_example_config_has_a_golden_entry():
    # A pipeline file (`stages:`) is no run config: cw pipeline plans its stages' configs, which are here.
    stems = {path.stem for path in CONFIGS.glob("*.yaml") if "stages" not in yaml.safe_load(path.read_text(encoding="utf-8"))}
    assert stems == set(GOLDEN_CONFIGS), "a new example config needs a golden file (add it to GOLDEN_CONFIGS)"


@pytest.mark.parametrize("stem", sorted(GOLDEN_CONFIGS))
def test_rendering_matches_reviewed_golden_file(stem):
    expected_path = EXPECTED / f"{stem}.yaml"
    actual = render_golden(stem)
    if os.environ.get("CW_UPDATE_GOLDEN"):
        expected_path.parent.mkdir(parents=True, exist_ok=True)
        expected_path.write_text(actual, encoding="utf-8")
    assert expected_path.is_file(), f"{expected_path} is missing: run CW_UPDATE_GOLDEN=1 pytest {Path(__file__).relative_to(REPO)}"
    expected = expected_path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True), actual.splitlines(keepends=True), f"expected/{stem}.yaml", "rendered"
            )
        )
        pytest.fail(
            f"rendering of configs/{stem}.yaml changed; if intended, regenerate with CW_UPDATE_GOLDEN=1 and review:\n{diff}",
            pytrace=False,
        )


@pytest.mark.parametrize("stem", sorted(GOLDEN_CONFIGS))
def test_dry_run_yaml_round_trips_to_the_same_manifests(stem):
    framework, type_name = GOLDEN_CONFIGS[stem]
    plan = plan_for(framework, type_name, CONFIGS / f"{stem}.yaml", run_name=RUN)
    assert reparse(plan) == plan.manifests


@pytest.mark.parametrize("stem", sorted(GOLDEN_CONFIGS))
def test_configmap_files_are_the_repo_files_byte_for_byte(stem):
    framework, type_name = GOLDEN_CONFIGS[stem]
    plan = plan_for(framework, type_name, CONFIGS / f"{stem}.yaml", run_name=RUN)
    data = obj(plan, "ConfigMap", f"{RUN}-config")["data"]
    for key, path in FILE_KEYS.items():
        if key in data:
            assert data[key] == path.read_text(encoding="utf-8")


# Reviewer's checks of the golden output, stated as properties so a regenerated golden file
# cannot silently accept a regression of them.


@pytest.mark.parametrize("stem", sorted(GOLDEN_CONFIGS))
def test_golden_trainer_job_is_first_owner_and_only_trainer_has_config_gpus(stem):
    framework, type_name = GOLDEN_CONFIGS[stem]
    source = yaml.safe_load((CONFIGS / f"{stem}.yaml").read_text())
    plan = plan_for(framework, type_name, CONFIGS / f"{stem}.yaml", run_name=RUN)
    assert kinds_and_names(plan)[:2] == [("Job", f"{RUN}-trainer"), ("ConfigMap", f"{RUN}-config")]
    assert plan.owner_name == f"{RUN}-trainer"
    trainer = container(plan.manifests[0], "trainer")
    gpus = str(source["gpu"])
    assert trainer["resources"]["requests"]["nvidia.com/gpu"] == gpus
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == gpus
    for init in pod_spec(plan.manifests[0]).get("initContainers", []):
        assert "nvidia.com/gpu" not in init["resources"]["requests"]
        assert "nvidia.com/gpu" not in init["resources"]["limits"]
    for name, spec in (source.get("services") or {}).items():
        if name == "reward" and not spec.get("model"):
            continue
        deployment = obj(plan, "Deployment", f"{RUN}-{name}")
        served = container(deployment, name)["resources"]
        want = str(spec.get("gpu", 1))
        assert served["requests"]["nvidia.com/gpu"] == want and served["limits"]["nvidia.com/gpu"] == want
        if "memory" in spec:
            assert served["requests"]["memory"] == spec["memory"] == served["limits"]["memory"]
        else:  # its own default, sized by its GPUs, never the trainer's
            assert served["requests"]["memory"] == f"{32 * int(want)}Gi" != trainer["resources"]["requests"].get("memory")


# verifiers' TOML nests its trainer settings (checked in test_verifiers_config.py).
@pytest.mark.parametrize("stem", sorted(set(GOLDEN_CONFIGS) - {"verifiers-grpo"}))
def test_golden_configmap_has_no_cluster_fields_and_keeps_float_learning_rate(stem):
    from cw_cli.config.models import CLUSTER_FIELDS

    framework, type_name = GOLDEN_CONFIGS[stem]
    source = yaml.safe_load((CONFIGS / f"{stem}.yaml").read_text())
    plan = plan_for(framework, type_name, CONFIGS / f"{stem}.yaml", run_name=RUN)
    mounted = mounted_config(plan)
    assert not set(mounted) & CLUSTER_FIELDS
    for key, value in source.items():
        if key not in CLUSTER_FIELDS and key != "script":
            if isinstance(value, dict):
                assert mounted[key].items() >= value.items()
            elif key != "reward_funcs" and not str(mounted[key]).startswith("/etc/cw/files/"):  # shipped: rewritten
                assert mounted[key] == value, key
    if "learning_rate" in mounted:
        assert isinstance(mounted["learning_rate"], float)
    assert mounted["output_dir"] == f"/checkpoints/{RUN}"


@pytest.mark.parametrize("stem", sorted(GOLDEN_CONFIGS))
def test_golden_labels_select_only_their_own_pods(stem):
    framework, type_name = GOLDEN_CONFIGS[stem]
    plan = plan_for(framework, type_name, CONFIGS / f"{stem}.yaml", run_name=RUN)
    for manifest in plan.manifests:
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RUN and labels["cw-cli.dev/run"] == RUN
        assert labels["app.kubernetes.io/managed-by"] == "cw"
        assert labels["cw-cli.dev/training-type"] == ("grpo" if type_name == "rlhf" else type_name)
    for deployment in [m for m in plan.manifests if m["kind"] == "Deployment"]:
        role = deployment["metadata"]["name"].removeprefix(f"{RUN}-")
        selector = deployment["spec"]["selector"]["matchLabels"]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
        assert selector["app.kubernetes.io/component"] == role
        service = obj(plan, "Service", deployment["metadata"]["name"])
        assert service["spec"]["selector"] == selector
        port = container(deployment, role)["ports"][0]["containerPort"]
        assert service["spec"]["ports"][0]["targetPort"] == port
