"""Jinja rendering where no value can change a manifest's structure.

Every ``{{ expression }}`` is written out as JSON (which is YAML), so a value is always one
scalar, list or mapping in flow style: newlines, quotes, ``{{`` or whole YAML documents inside a
user's string stay inside that string. The result is parsed and checked anyway.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

from cw_cli.cache import cache_dir
from cw_cli.errors import CwError
from cw_cli.labels import COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL

PACKAGE_DIR = Path(__file__).resolve().parent.parent


def builtin_template_dir() -> Path:
    """The shipped templates: inside the wheel, or at the repo root for an editable install."""
    packaged = PACKAGE_DIR / "kubeconfigs"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent / "kubeconfigs"


class TemplateError(CwError):
    """A template is missing, broken, or rendered something that is not the expected object."""


# Characters JSON leaves alone but YAML treats as line breaks or refuses (DEL, C1 controls, BOM),
# written as JSON escapes. (A translation table: compiling the equivalent regex cost every render.)
_YAML_UNSAFE = {code: f"\\u{code:04x}" for code in (*range(0x7F, 0xA0), 0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF)}


def _to_json(value: Any) -> str:
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()  # StrictUndefined raises here
    text = json.dumps(value, ensure_ascii=False, sort_keys=False)
    return text.translate(_YAML_UNSAFE)


def _with_component(labels: dict[str, str], component: str) -> dict[str, str]:
    return {**labels, COMPONENT_LABEL: component}


def _selector(labels: dict[str, str]) -> dict[str, str]:
    keys = (INSTANCE_LABEL, COMPONENT_LABEL, MANAGED_BY_LABEL)
    return {key: labels[key] for key in keys if key in labels}


class _QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs (compiling them was a tenth of a dry run).

    Jinja checks each entry against the template's source checksum and its own bytecode version,
    so an edited template or another Python recompiles. A cache that cannot be read or written
    only costs that time again: it never fails a render.
    """

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError, TypeError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    folder = cache_dir() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return _QuietBytecodeCache(str(folder))


@lru_cache(maxsize=8)
def _environment(search_path: tuple[str, ...]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(search_path)),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        finalize=_to_json,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - not HTML; values are JSON-encoded by finalize
    )
    env.filters["with_component"] = _with_component
    env.filters["selector"] = _selector
    return env


def render_manifest(
    template: str, context: dict[str, Any], search_dirs: list[Path], expect_kind: str, expect_name: str
) -> dict[str, Any]:
    """Render one template into one manifest and check that it is the object it should be.

    Args:
        template: Template path relative to a search folder, e.g. ``common/job.yaml.j2``.
        context: Template variables.
        search_dirs: Folders searched in order (a plugin's own first, the built-ins last).
        expect_kind: The kind the result must have.
        expect_name: The metadata.name the result must have.

    Returns:
        The manifest as a dict.

    Raises:
        TemplateError: Missing template, undefined variable, invalid YAML, or a result that is
            not exactly one object of the expected kind and name.
    """
    paths = tuple(str(path) for path in [*search_dirs, builtin_template_dir()])
    try:
        text = _environment(paths).get_template(template).render(**context)
    except jinja2.TemplateNotFound:
        raise TemplateError(f"template {template!r} not found in {', '.join(paths)}") from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"template {template!r}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"template {template!r}: {exc}") from None
    try:
        # libyaml's loader when PyYAML has it: the pure-Python one was 90% of planning a run.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        documents = [doc for doc in yaml.load_all(text, Loader=loader) if doc is not None]
    except yaml.YAMLError as exc:
        raise TemplateError(f"template {template!r} rendered invalid YAML", detail=f"{exc}\n---\n{text}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise TemplateError(f"template {template!r} must render exactly one object, got {len(documents)}")
    manifest = documents[0]
    name = (manifest.get("metadata") or {}).get("name")
    if manifest.get("kind") != expect_kind or name != expect_name:
        raise TemplateError(
            f"template {template!r} rendered {manifest.get('kind')} {name!r}, expected {expect_kind} {expect_name!r}"
        )
    return manifest
