"""The framework registry: built-ins, plugin folders and entry points, loaded the same way.

One broken plugin never breaks the others or ``cw --help``: its error is recorded and shown by
``cw frameworks``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from msgspec import Struct, field

from cw_cli import __version__
from cw_cli.errors import FrameworkError
from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType
from cw_cli.frameworks.plugin import FrameworkPlugin

#: Built-in framework name -> where its plugin is (a test checks each plugin has that name).
BUILTINS = {
    "trl": "cw_cli.frameworks.trl:get_plugin",
    "axolotl": "cw_cli.frameworks.axolotl:get_plugin",
    "verifiers": "cw_cli.frameworks.verifiers:get_plugin",
}
BUILTIN_TARGETS = tuple(BUILTINS.values())
ENTRY_POINT_GROUP = "cw_cli.frameworks"
PLUGINS_DIR_ENV = "CW_PLUGINS_DIR"
DISABLE_PLUGINS_ENV = "CW_DISABLE_PLUGINS"
#: Seconds a plugin may take to load before the caller is told (``load_all(slow=...)``).
SLOW_PLUGIN_S = 3.0
DEFAULT_PLUGINS_DIR = Path("~/.cw-cli/plugins")


class LoadedFramework(Struct):
    """A framework ready to use, with where it came from."""

    plugin: FrameworkPlugin
    framework: BaseTrainingFramework
    source: str
    types: dict[str, TrainingType] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.plugin.name


class PluginFailure(Struct, frozen=True):
    """A plugin that could not be loaded, and why."""

    source: str
    error: str


def plugins_dir() -> Path:
    """The folder scanned for plugin packages (``$CW_PLUGINS_DIR`` or ``~/.cw-cli/plugins``)."""
    return Path(os.environ.get(PLUGINS_DIR_ENV) or DEFAULT_PLUGINS_DIR).expanduser()


def _import_target(target: str) -> Callable[[], FrameworkPlugin]:
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute or "get_plugin")


def _import_folder_plugin(package_dir: Path) -> Callable[[], FrameworkPlugin]:
    # A private module name so a plugin called e.g. "trl" cannot shadow the real package.
    module_name = f"cw_user_plugins.{package_dir.name}"
    spec = importlib.util.spec_from_file_location(
        module_name, package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {package_dir}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    if not hasattr(module, "get_plugin"):
        raise ImportError(f"{package_dir / '__init__.py'} defines no get_plugin()")
    return module.get_plugin


class FrameworkRegistry:
    """Frameworks by name, plus the plugins that failed to load."""

    def __init__(self) -> None:
        self._frameworks: dict[str, LoadedFramework] = {}
        self.failures: list[PluginFailure] = []
        #: The plugin being loaded now (its source), so an interrupt can name it.
        self.loading: str | None = None
        self._slow: Callable[[str, float], None] | None = None

    def register(self, plugin: FrameworkPlugin, source: str) -> LoadedFramework:
        """Add a plugin's framework.

        Args:
            plugin: The plugin object.
            source: Where it came from, for ``cw frameworks``.

        Raises:
            FrameworkError: The name is taken or the plugin is malformed.
        """
        name = plugin.name
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise FrameworkError(f"plugin from {source} has an invalid name {name!r}")
        if name in self._frameworks:
            raise FrameworkError(f"framework {name!r} from {source} is already provided by {self._frameworks[name].source}")
        framework_class = plugin.get_framework_class()
        if not (isinstance(framework_class, type) and issubclass(framework_class, BaseTrainingFramework)):
            raise FrameworkError(f"plugin {name!r} from {source}: get_framework_class() must return a BaseTrainingFramework subclass")
        framework = framework_class()
        types = {t.value: t for t in plugin.get_supported_training_types()}
        for alias, target in framework_class.aliases.items():
            if target.value in types:
                types[alias] = target
        if not types:
            raise FrameworkError(f"plugin {name!r} from {source} supports no training type")
        plugin.initialize({"cw_version": __version__})
        loaded = LoadedFramework(plugin=plugin, framework=framework, source=source, types=types)
        self._frameworks[name] = loaded
        return loaded

    def _try(self, source: str, load: Callable[[], Callable[[], FrameworkPlugin]]) -> None:
        # Plugins are trusted code that may hang at import; cw cannot stop it, but says which one.
        timer = None
        if self._slow is not None and source != "built-in":
            import threading

            timer = threading.Timer(SLOW_PLUGIN_S, self._slow, (source, SLOW_PLUGIN_S))
            timer.daemon = True
            timer.start()
        self.loading = source
        try:
            self._load(source, load)
        finally:
            if timer is not None:
                timer.cancel()
        self.loading = None  # kept when an interrupt propagates: the caller names the plugin

    def _load(self, source: str, load: Callable[[], Callable[[], FrameworkPlugin]]) -> None:
        try:
            plugin = load()()
            if not isinstance(plugin, FrameworkPlugin):
                raise TypeError(f"get_plugin() returned {type(plugin).__name__}, not a FrameworkPlugin")
            self.register(plugin, source)
        except FrameworkError as exc:
            self.failures.append(PluginFailure(source, exc.message))
        except Exception as exc:  # noqa: BLE001 - a plugin may fail in any way; never let it break cw
            self.failures.append(PluginFailure(source, f"{type(exc).__name__}: {exc}"))

    def load_all(
        self, *, include_plugins: bool = True, slow: Callable[[str, float], None] | None = None
    ) -> FrameworkRegistry:
        """Load the built-ins, then plugin folders, then entry points (unless disabled).

        Args:
            include_plugins: Load the plugin folders and entry points too.
            slow: Called (from another thread) with a plugin's source and the seconds spent when
                loading it has taken :data:`SLOW_PLUGIN_S`, so the caller can say which one hangs.
        """
        self._slow = slow
        for target in BUILTIN_TARGETS:
            self._try("built-in", partial(_import_target, target))
        if not include_plugins or os.environ.get(DISABLE_PLUGINS_ENV):
            return self
        folder = plugins_dir()
        if folder.is_dir():
            for package_dir in sorted(p for p in folder.iterdir() if (p / "__init__.py").is_file()):
                self._try(str(package_dir), partial(_import_folder_plugin, package_dir))
        from importlib.metadata import entry_points

        for entry in entry_points(group=ENTRY_POINT_GROUP):
            self._try(f"entry point {entry.name} ({entry.value})", entry.load)
        return self

    def load_builtin(self, name: str) -> FrameworkRegistry:
        """Load one built-in framework only (``cw trl sft`` needs no other framework).

        A plugin cannot take a built-in's name (the built-in is loaded first and wins), so the
        plugin folders and entry points cannot change what ``cw <built-in> ...`` runs; skipping
        them spares importing every plugin and scanning every installed package's entry points.

        Raises:
            FrameworkError: ``name`` is not a built-in framework.
        """
        if name not in BUILTINS:
            raise FrameworkError(f"{name!r} is not a built-in framework", hint=f"built-in: {', '.join(BUILTINS)}")
        self._try("built-in", partial(_import_target, BUILTINS[name]))
        return self

    def names(self) -> list[str]:
        """Names of the loaded frameworks."""
        return list(self._frameworks)

    def all(self) -> list[LoadedFramework]:
        """Every loaded framework, in load order."""
        return list(self._frameworks.values())

    def get(self, name: str) -> LoadedFramework:
        """Return a framework by name.

        Raises:
            FrameworkError: No such framework (with a suggestion).
        """
        if name in self._frameworks:
            return self._frameworks[name]
        from difflib import get_close_matches

        close = get_close_matches(name, self._frameworks, n=1)
        hint = f"did you mean `{close[0]}`?" if close else f"known frameworks: {', '.join(self._frameworks)}"
        raise FrameworkError(f"unknown framework {name!r}", hint=hint)

    def resolve_type(self, name: str, training_type: str) -> tuple[LoadedFramework, TrainingType]:
        """Return the framework and the canonical training type for ``cw <name> <type>``.

        Raises:
            FrameworkError: Unknown framework or a type it does not support.
        """
        loaded = self.get(name)
        if training_type not in loaded.types:
            raise FrameworkError(
                f"`{name}` has no training type {training_type!r}",
                hint=f"supported: {', '.join(loaded.types)}",
            )
        return loaded, loaded.types[training_type]

    def cleanup(self) -> None:
        """Call every plugin's cleanup, ignoring their errors."""
        for loaded in self._frameworks.values():
            try:
                loaded.plugin.cleanup()
            except Exception:  # noqa: BLE001 - cleanup must not mask the command's result
                pass


#: Frameworks already looked up by :func:`framework_named`, per plugin setting (name, folder, disabled).
_NAMED: dict[tuple[str, str, bool], BaseTrainingFramework | None] = {}


def framework_named(name: str) -> BaseTrainingFramework | None:
    """The framework a run's ``app.kubernetes.io/name`` label names, loaded as ``cw <name>`` would:
    a built-in alone, else every plugin; None when no framework has that name (or it fails to load).

    For explaining a run after the fact (``cw status``): what its trainer's log means is the
    framework's to say. Cached per name and plugin setting, so many runs cost one load.
    """
    key = (name, str(plugins_dir()), bool(os.environ.get(DISABLE_PLUGINS_ENV)))
    if key not in _NAMED:
        registry = FrameworkRegistry()
        if name in BUILTINS:
            registry.load_builtin(name)
        else:
            registry.load_all()
        found = registry._frameworks.get(name)
        _NAMED[key] = found.framework if found is not None else None
    return _NAMED[key]
