"""`cw export --push-to-hub`: what cw_export.py passes to huggingface_hub binds to the installed
huggingface_hub's own signatures (HfApi(), create_repo, upload_folder), so a renamed or removed
argument fails here, not in a user's export pod; and the repo id it pushes is one huggingface_hub
accepts."""

from __future__ import annotations

import importlib.util
import inspect

import pytest
from huggingface_hub import HfApi

from cw_cli.frameworks.runtime_files import RUNTIME_DIR


def _cw_export():
    spec = importlib.util.spec_from_file_location("cw_export_under_test", RUNTIME_DIR / "cw_export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bound_calls(monkeypatch):
    """HfApi's methods replaced by recorders that bind each call to the real method's signature."""
    calls: list[tuple[str, inspect.BoundArguments]] = []
    originals = {name: getattr(HfApi, name) for name in ("__init__", "create_repo", "upload_folder")}

    def recorder(name):
        def call(self, *args, **kwargs):
            calls.append((name, inspect.signature(originals[name]).bind(self, *args, **kwargs)))  # TypeError if wrong
            if name == "__init__":
                return originals[name](self, *args, **kwargs)
            return f"https://huggingface.co/{kwargs.get('repo_id', args[0] if args else '')}"

        return call

    for name in originals:
        monkeypatch.setattr(HfApi, name, recorder(name))
    return calls


def test_the_push_binds_to_huggingface_hubs_own_signatures(bound_calls, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    (tmp_path / "model.safetensors").write_bytes(b"\0")
    url = _cw_export().push(tmp_path, "my-org/my-model", private=True)
    assert url == "https://huggingface.co/my-org/my-model"
    assert [name for name, _ in bound_calls] == ["__init__", "create_repo", "upload_folder"]
    init, create, upload = (bound.arguments for _, bound in bound_calls)
    assert init["token"] == "hf_test"
    assert create["repo_id"] == "my-org/my-model" and create["private"] is True and create["exist_ok"] is True
    assert upload["repo_id"] == "my-org/my-model" and upload["folder_path"] == str(tmp_path)
    assert upload["commit_message"].startswith("cw export of ")


def test_the_pod_refuses_a_repo_id_huggingface_hub_refuses_before_exporting(tmp_path, capsys):
    (tmp_path / "model.safetensors").write_bytes(b"\0")
    code = _cw_export().main(["--run-dir", str(tmp_path), "--push-to-hub", "org/name--x"])
    assert code == 2 and "--push-to-hub 'org/name--x'" in capsys.readouterr().err
    assert not (tmp_path / "exported").exists()
