"""A failed export or evaluation Job, waited for through the API, names the Job and the log to
read (`cw logs RUN --role export|eval`), not the bare run failure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import cw_cli.k8s.operations as operations
from cw_cli.api.after_training import Evaluation, Export
from cw_cli.errors import RunFailed


@pytest.mark.parametrize(
    ("job", "what", "role"),
    [
        (lambda run: Export(name="r-export-40", run=run, run_dir="/checkpoints/r"), "export", "export"),
        (lambda run: Evaluation(name="r-eval-40", run=run, checkpoint="checkpoint-40", scores="s.json"), "evaluation", "eval"),
    ],
)
def test_a_failed_after_training_job_names_itself_and_its_log(monkeypatch, job, what, role):
    def fails(kube, name, timeout, progress):
        raise RunFailed("run failed: BackoffLimitExceeded")

    monkeypatch.setattr(operations, "wait_for_run", fails)
    run = SimpleNamespace(name="r", session=SimpleNamespace(kube=object()))
    waited = job(run)
    with pytest.raises(RunFailed) as error:
        waited.wait(timeout=1)
    assert error.value.message == f"{what} {waited.name} failed: BackoffLimitExceeded"
    assert error.value.hint == f"see its log: cw logs r --role {role}"
