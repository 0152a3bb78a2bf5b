"""The framework contract is what docs/plugins.md says: six small parts, each documented in its
own section with every public member, composed by BaseTrainingFramework; and the three built-ins
implement the parts the same way (one class per part, in a module named after the part, composed
by ``<name>/framework.py``, with no logic in their ``__init__.py``)."""

from __future__ import annotations

import ast
import inspect
import re

import pytest
from unit_helpers import REPO

from cw_cli.frameworks import base
from cw_cli.frameworks.base import PARTS, BaseTrainingFramework
from cw_cli.frameworks.registry import BUILTINS, FrameworkRegistry

DOC = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
FRAMEWORKS = REPO / "cw_cli" / "frameworks"


def _members(part: type) -> set[str]:
    """Public attributes and hooks a part declares itself (annotations included)."""
    return {name for name in {*vars(part), *vars(part).get("__annotations__", {})}
            if not name.startswith("_")}  # fmt: skip


def _section(part: type) -> str:
    """The docs section of a part: from its `### N. `Part`` heading to the next heading."""
    found = re.search(rf"^### \d\. `{part.__name__}`.*?(?=^##)", DOC, flags=re.M | re.S)
    assert found, f"docs/plugins.md has no section for {part.__name__}"
    return found.group(0)


def _documented(section: str) -> set[str]:
    """The members a section's table names (its first column)."""
    return {match.group(1) for match in re.finditer(r"^\| `(\w+)", section, flags=re.M)}


def _shared(cls: type) -> bool:
    """A class of the contract itself (a part, a shared helper part, the base), not a framework's."""
    return cls.__module__.startswith("cw_cli.frameworks.parts.") or cls in (BaseTrainingFramework, object)


def _owner(framework: type, name: str) -> type:
    return next(cls for cls in framework.__mro__ if name in vars(cls) or name in vars(cls).get("__annotations__", {}))


@pytest.mark.parametrize("part", PARTS, ids=lambda part: part.__name__)
def test_each_part_is_one_section_naming_exactly_its_members(part):
    assert part.__doc__ and part.__module__ == f"cw_cli.frameworks.parts.{part.__module__.rsplit('.', 1)[1]}"
    own = _members(part) - {"name"} if part.__name__ != "Identity" else _members(part)
    assert _documented(_section(part)) == own


def test_the_parts_are_the_whole_base_and_no_hook_is_in_two():
    seen: dict[str, str] = {}
    for part in PARTS:
        for name in _members(part) - ({"name"} if part.__name__ != "Identity" else set()):
            assert name not in seen, f"{name} is in {seen[name]} and {part.__name__}"
            seen[name] = part.__name__
    annotated = {name for cls in BaseTrainingFramework.__mro__ for name in vars(cls).get("__annotations__", {})}
    public = {name for name in {*dir(BaseTrainingFramework), *annotated} if not name.startswith("_")}
    assert public == set(seen)
    assert BaseTrainingFramework.__bases__ == PARTS and vars(BaseTrainingFramework).keys() <= {
        "__module__", "__doc__", "__abstractmethods__", "_abc_impl", "__qualname__", "__firstlineno__",
        "__static_attributes__"}  # fmt: skip


def test_the_required_members_are_the_ones_the_docs_mark_required():
    required = {match.group(1) for part in PARTS
                for match in re.finditer(r"^\| `(\w+)[^|]*\| yes \|", _section(part), flags=re.M)}  # fmt: skip
    assert required == {"name", "training_types", *BaseTrainingFramework.__abstractmethods__}


def test_what_plugins_import_from_base_is_on_the_page():
    for name in base.__all__:
        assert f"`{name}`" in DOC or f"`{name}(" in DOC, name


@pytest.mark.parametrize("builtin", sorted(BUILTINS))
def test_the_builtins_implement_each_part_the_same_way(builtin):
    registry = FrameworkRegistry().load_builtin(builtin)
    framework = type(registry.get(builtin).framework)
    assert framework.__module__ == f"cw_cli.frameworks.{builtin}.framework"
    for part in PARTS[1:]:  # the identity is the framework class's own attributes
        module = part.__module__.rsplit(".", 1)[1]
        mine = [cls for cls in framework.__mro__[1:] if issubclass(cls, part) and not _shared(cls)]
        assert len(mine) == 1, (builtin, part.__name__, mine)
        assert mine[0].__module__ == f"cw_cli.frameworks.{builtin}.{module}"
        for name in _members(part) - {"name"}:  # each hook comes from its part's class, or a shared one
            owner = _owner(framework, name)
            assert owner is mine[0] or _shared(owner), (builtin, name, owner)
    for name in _members(PARTS[0]):
        assert _owner(framework, name) in (framework, PARTS[0]), (builtin, name)


@pytest.mark.parametrize("builtin", sorted(BUILTINS))
def test_a_builtins_init_only_gets_the_plugin_and_re_exports(builtin):
    tree = ast.parse((FRAMEWORKS / builtin / "__init__.py").read_text(encoding="utf-8"))
    defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    assert defined == ["get_plugin"]
    assert inspect.getsource(__import__(f"cw_cli.frameworks.{builtin}", fromlist=["x"]).get_plugin).count("\n") <= 4


def test_a_plugin_written_against_the_old_single_class_still_loads(tmp_path, monkeypatch):
    """A plugin overriding hooks of several parts in one class, importing from the old places."""
    folder = tmp_path / "oldstyle"
    folder.mkdir()
    (folder / "__init__.py").write_text(
        "from cw_cli.estimate.words import ConfigWords\n"
        "from cw_cli.frameworks.base import BaseTrainingFramework, FailureHint, TrainingType\n"
        "from cw_cli.frameworks.plugin import SimplePlugin\n\n"
        "class Old(BaseTrainingFramework):\n"
        "    name = 'oldstyle'\n"
        "    training_types = (TrainingType.SFT,)\n"
        "    launcher_resumes = True\n"
        "    words = ConfigWords(micro_batch='bs')\n"
        "    def default_image(self, training_type):\n        return 'img:1'\n"
        "    def trainer_command(self, config, context):\n        return ['train']\n"
        "    def validate_config(self, native, training_type):\n"
        "        return super().validate_config(native, training_type) + ['own check']\n"
        "    def failure_hints(self):\n        return (FailureHint('k', 'p', 's', 'm', 'f'),)\n\n"
        "def get_plugin():\n    return SimplePlugin(Old, '1.0')\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("CW_PLUGINS_DIR", str(tmp_path))
    registry = FrameworkRegistry().load_all()
    assert registry.failures == []
    old = registry.get("oldstyle").framework
    assert old.entrypoint_resumes is True and old.words.micro_batch == "bs"
    assert old.validate_config({}, old.training_types[0]) == ["own check"]
    assert old.failure_hints()[0].kind == "k" and not old.describes_training


def test_class_attributes_come_before_methods_in_every_framework_class():
    late = []
    for path in sorted(FRAMEWORKS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            seen_method = False
            for item in node.body:
                seen_method = seen_method or isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                if seen_method and isinstance(item, (ast.Assign, ast.AnnAssign)):
                    late.append(f"{path.relative_to(REPO)}:{item.lineno} ({node.name})")
    assert late == []
