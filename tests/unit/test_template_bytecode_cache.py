"""Compiled templates are cached on disk, and the cache can never change or fail a render."""

from __future__ import annotations

from pathlib import Path

import pytest

from cw_cli.render import templates
from cw_cli.render.templates import render_manifest

TEMPLATE = 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ name }}\ndata:\n  key: {{ value }}\n'


@pytest.fixture(autouse=True)
def _fresh_environments():
    templates._environment.cache_clear()
    yield
    templates._environment.cache_clear()


def _render(folder: Path, value: str = "v") -> dict:
    templates._environment.cache_clear()  # a new process would build a new environment
    return render_manifest("t.yaml.j2", {"name": "x", "value": value}, [folder], "ConfigMap", "x")


def test_a_second_environment_loads_the_compiled_template_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CW_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t.yaml.j2").write_text(TEMPLATE)
    first = _render(tmp_path)
    entries = list((tmp_path / "cache" / "templates").iterdir())
    assert len(entries) == 1

    compiled: list[str] = []
    original = templates.jinja2.Environment.compile

    def counting(self, *args, **kwargs):
        compiled.append(str(args[1] if len(args) > 1 else kwargs.get("name")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(templates.jinja2.Environment, "compile", counting)
    assert _render(tmp_path) == first
    assert compiled == []  # read back, not compiled again


def test_an_edited_template_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("CW_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t.yaml.j2").write_text(TEMPLATE)
    assert _render(tmp_path)["data"] == {"key": "v"}
    (tmp_path / "t.yaml.j2").write_text(TEMPLATE.replace("key:", "other:"))
    assert _render(tmp_path)["data"] == {"other": "v"}


def test_a_corrupt_cache_entry_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("CW_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t.yaml.j2").write_text(TEMPLATE)
    expected = _render(tmp_path)
    for entry in (tmp_path / "cache" / "templates").iterdir():
        entry.write_bytes(b"not bytecode at all")
    assert _render(tmp_path) == expected


def test_a_cache_folder_that_cannot_be_made_still_renders(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("CW_CACHE_DIR", str(blocker))
    (tmp_path / "t.yaml.j2").write_text(TEMPLATE)
    assert _render(tmp_path)["data"] == {"key": "v"}


def test_a_full_disk_while_caching_still_renders(tmp_path, monkeypatch):
    monkeypatch.setenv("CW_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t.yaml.j2").write_text(TEMPLATE)

    def no_space(self, bucket):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(templates.jinja2.FileSystemBytecodeCache, "dump_bytecode", no_space)
    assert _render(tmp_path)["data"] == {"key": "v"}
    assert list((tmp_path / "cache" / "templates").iterdir()) == []
