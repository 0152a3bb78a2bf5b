"""cw_vf_resume.py patches verifiers' RLTrainer only for the release it was written against (cw's
pin): an image with another verifiers is left alone, and says so in the log. Its version is
cw's pin (the pod-side file imports nothing of cw's)."""

from __future__ import annotations

import importlib.util
import types

import pytest
from unit_helpers import REPO

from cw_cli.frameworks.verifiers import VERIFIERS_VERSION


def _module():
    spec = importlib.util.spec_from_file_location("standalone_cw_vf_resume", REPO / "cw_cli/runtime/cw_vf_resume.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trainer_module():
    class Orchestrator:
        def submit_batch(self, batch_id):
            pass

    class RLTrainer:
        def __init__(self):
            pass

        def train(self, resume_from_checkpoint=None):
            pass

        def training_step(self, model):
            pass

    return types.SimpleNamespace(RLTrainer=RLTrainer, Orchestrator=Orchestrator)


def test_the_pod_side_pin_is_cws_pin():
    assert _module().VERIFIERS_VERSION == VERIFIERS_VERSION


@pytest.mark.parametrize("installed,patched", [(VERIFIERS_VERSION, True), ("0.1.10", False), (None, False)])
def test_only_the_pinned_verifiers_is_patched(monkeypatch, capsys, installed, patched):
    resume = _module()
    monkeypatch.setattr(resume, "_installed_version", lambda: installed)
    target = _trainer_module()
    original = target.RLTrainer.train
    resume.patch(target)
    assert (target.RLTrainer.train is not original) == patched
    assert getattr(target.RLTrainer, "_cw_resume_patched", False) == patched
    if not patched:
        assert f"verifiers {installed}: cw resumes RLTrainer only for {VERIFIERS_VERSION}" in capsys.readouterr().err
