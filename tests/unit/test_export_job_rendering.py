"""The export Job is built from the run's facts and the validated flags only: its command is the
pod-side script's, its resources are the flags', and no flag value can add to the manifest."""

from __future__ import annotations

import pytest
import yaml

from cw_cli.render.export import ExportChoice, ExportFacts, check_choice, export_manifests, export_name

FACTS = ExportFacts(run_name="ex", run_dir="/checkpoints/ex", claim="ckpts", image="huggingface/trl:1.16.0",
                    labels={"cw-cli.dev/run": "ex"}, env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                        "name": "hf", "key": "HF_TOKEN"}}}])  # fmt: skip


def test_the_job_runs_the_export_script_on_the_run_folder_with_the_flags_resources():
    job, config_map = export_manifests(FACTS, ExportChoice(checkpoint="500", merge=True, gpu=1, memory="128Gi"))
    assert job["metadata"]["name"] == "ex-export-500-merged" == export_name("ex", ExportChoice("500", merge=True))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python3", "/etc/cw/cw_export.py", "--run-dir", "/checkpoints/ex",
                                    "--checkpoint", "500", "--merge"]  # fmt: skip
    assert container["resources"]["limits"] == {"cpu": "8", "memory": "128Gi", "nvidia.com/gpu": 1}
    assert job["metadata"]["labels"] == {"cw-cli.dev/run": "ex", "app.kubernetes.io/component": "export"}
    assert job["spec"]["backoffLimit"] == 0 and "cw_export.py" in config_map["data"]


@pytest.mark.parametrize(
    "choice,problem",
    [
        (ExportChoice(checkpoint="../../etc"), "--checkpoint"),
        (ExportChoice(checkpoint="9" * 40), "--checkpoint"),
        (ExportChoice(checkpoint="\u00b2"), "--checkpoint"),
        (ExportChoice(push_to_hub="org/name\nkind: Secret"), "--push-to-hub"),
        (ExportChoice(push_to_hub="a b"), "--push-to-hub"),
        (ExportChoice(private=True), "--private is for --push-to-hub"),
        (ExportChoice(gpu=-1), "--gpu -1"),
    ],
)
def test_bad_flags_are_named(choice, problem):
    assert any(problem in line for line in check_choice(choice))


def test_good_flags_pass_and_stay_values():
    choice = ExportChoice(checkpoint="latest", push_to_hub="my-org/my.model_v2", private=True)
    assert check_choice(choice) == []
    job, _ = export_manifests(FACTS, choice)
    text = yaml.safe_dump(job)
    assert yaml.safe_load(text) == job and job["spec"]["template"]["spec"]["containers"][0]["command"][-3:] == [
        "--push-to-hub", "my-org/my.model_v2", "--private"]
