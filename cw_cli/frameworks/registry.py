"""The framework registry: built-ins, plugin folders and entry points, loaded the same way.

One broken plugin never breaks the others or ``cw --help``: its error is recorded and shown by
``cw frameworks``.

A plugin (a folder or an entry point, never a built-in) is imported in a thread of its own, with
its output captured and a time limit (:func:`plugin_time_limit`): a plugin that raises
``SystemExit`` or any other exception, prints at import, or does not finish in time is a failure
of that plugin, and cw goes on without it. The caveats of doing this in one process: a plugin
past its time limit cannot be stopped, only left behind (its thread goes on, using a CPU, until
cw exits; what it prints through ``sys.stdout``/``sys.stderr`` is dropped, but what it writes to
the file descriptors directly, from C or a child process, is not); a plugin that loops in C
without releasing the GIL stops cw too. Built-ins are imported directly: no thread, no cost.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

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
#: What `cw --help` says of each built-in without importing it (each is about twenty modules, one
#: per part of the contract); tests/unit/test_cli.py holds each equal to its class's description.
BUILTIN_DESCRIPTIONS = {
    "trl": "Hugging Face TRL: SFT, DPO, GRPO, KTO, reward models, RLOO and distillation through the `trl` command line",
    "axolotl": "Axolotl: SFT, DPO/IPO/KTO/ORPO/SimPO and GRPO with `axolotl train` (vLLM server for GRPO)",
    "verifiers": "verifiers 0.1.9.post3: vf-vllm inference server + vf-train under accelerate",
}
ENTRY_POINT_GROUP = "cw_cli.frameworks"
PLUGINS_DIR_ENV = "CW_PLUGINS_DIR"
DISABLE_PLUGINS_ENV = "CW_DISABLE_PLUGINS"
#: Seconds a plugin may take to load before the caller is told (``load_all(slow=...)``).
SLOW_PLUGIN_S = 3.0
#: Seconds a plugin may take to load before cw goes on without it (``CW_PLUGIN_TIMEOUT`` sets it).
PLUGIN_TIMEOUT_S = 15.0
PLUGIN_TIMEOUT_ENV = "CW_PLUGIN_TIMEOUT"
#: Characters of a plugin's output at import kept (to say what it printed); the rest is dropped.
CAPTURED_OUTPUT = 4096
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


def plugin_time_limit() -> float:
    """Seconds a plugin may take to load: ``$CW_PLUGIN_TIMEOUT`` when it is a positive number,
    else :data:`PLUGIN_TIMEOUT_S`."""
    try:
        value = float(os.environ.get(PLUGIN_TIMEOUT_ENV) or PLUGIN_TIMEOUT_S)
    except ValueError:
        return PLUGIN_TIMEOUT_S
    return value if 0 < value < 86_400 else PLUGIN_TIMEOUT_S


class _Captured:
    """A text stream standing in for ``sys.stdout``/``sys.stderr`` while plugins load: writes
    from a plugin's thread are kept (the first :data:`CAPTURED_OUTPUT` characters) and counted,
    writes from any other thread go to the real stream. Left in place after a plugin ran past
    its time limit, so what that plugin prints later never reaches cw's output (``-o json``)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.plugin_threads: set[int] = set()
        self.kept: dict[int, list[str]] = {}
        self.sizes: dict[int, int] = {}

    def write(self, text: str) -> int:
        ident = threading.get_ident()
        if ident not in self.plugin_threads:
            return int(self.real.write(text))
        size = self.sizes.get(ident, 0)
        if size < CAPTURED_OUTPUT:
            self.kept.setdefault(ident, []).append(str(text)[: CAPTURED_OUTPUT - size])
        self.sizes[ident] = size + len(text)
        return len(text)

    def flush(self) -> None:
        if threading.get_ident() not in self.plugin_threads:
            self.real.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, buffer...: the real stream's
        return getattr(self.real, name)


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
        #: What plugins did while loading that is not a failure (printing), one line each.
        self.notes: list[str] = []
        #: The failures were told to the user already (as warnings, when the registry loaded).
        self.reported = False
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
        loaded = self._prepare(plugin, source)
        self._add(loaded)
        return loaded

    def _prepare(self, plugin: FrameworkPlugin, source: str) -> LoadedFramework:
        """Check a plugin and build its framework, without adding it (plugin code runs here)."""
        name = plugin.name
        if not isinstance(name, str) or not name or not name.replace("-", "").replace("_", "").isalnum():
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
        return LoadedFramework(plugin=plugin, framework=framework, source=source, types=types)

    def _add(self, loaded: LoadedFramework) -> None:
        if loaded.name in self._frameworks:  # loaded meanwhile by another source
            other = self._frameworks[loaded.name].source
            raise FrameworkError(f"framework {loaded.name!r} from {loaded.source} is already provided by {other}")
        self._frameworks[loaded.name] = loaded

    def _try(self, source: str, load: Callable[[], Callable[[], FrameworkPlugin]]) -> None:
        # Plugins are trusted code that may hang at import: they load in a thread with a time limit.
        timer = None
        if self._slow is not None and source != "built-in":
            timer = threading.Timer(SLOW_PLUGIN_S, self._slow, (source, SLOW_PLUGIN_S))
            timer.daemon = True
            timer.start()
        self.loading = source
        try:
            if source == "built-in":
                self._load(source, load)
            else:
                self._load_isolated(source, load)
        finally:
            if timer is not None:
                timer.cancel()
        self.loading = None  # kept when an interrupt propagates: the caller names the plugin

    def _load(self, source: str, load: Callable[[], Callable[[], FrameworkPlugin]]) -> None:
        try:
            self._add(self._build(source, load))
        except FrameworkError as exc:
            self.failures.append(PluginFailure(source, exc.message))
        except Exception as exc:  # noqa: BLE001 - a plugin may fail in any way; never let it break cw
            self.failures.append(PluginFailure(source, f"{type(exc).__name__}: {exc}"))

    def _build(self, source: str, load: Callable[[], Callable[[], FrameworkPlugin]]) -> LoadedFramework:
        plugin = load()()
        if not isinstance(plugin, FrameworkPlugin):
            raise TypeError(f"get_plugin() returned {type(plugin).__name__}, not a FrameworkPlugin")
        return self._prepare(plugin, source)

    def _load_isolated(self, source: str, load: Callable[[], Callable[[], FrameworkPlugin]]) -> None:
        """Load a plugin in a thread of its own, its output captured, for at most
        :func:`plugin_time_limit` seconds; any way it fails is recorded as its failure.

        Raises:
            KeyboardInterrupt: Ctrl-C while waiting, or the plugin raised it (as a Ctrl-C would).
        """
        outcome: dict[str, Any] = {}
        streams = {name: getattr(sys, name) for name in ("stdout", "stderr")}
        captured = {name: _Captured(stream) for name, stream in streams.items()}

        def run() -> None:
            for stream in captured.values():  # first: the plugin's first line is captured too
                stream.plugin_threads.add(threading.get_ident())
            try:
                outcome["loaded"] = self._build(source, load)
            except BaseException as exc:  # noqa: BLE001 - SystemExit included: a plugin never ends cw
                outcome["error"] = exc

        limit = plugin_time_limit()
        thread = threading.Thread(target=run, name=f"cw plugin {source}", daemon=True)
        for name, stream in captured.items():
            setattr(sys, name, stream)
        finished = False
        try:
            thread.start()
            thread.join(limit)
            finished = not thread.is_alive()
        finally:
            if finished:  # else the plugin's thread may still print: its writes stay captured
                for name, stream in streams.items():
                    if getattr(sys, name) is captured[name]:
                        setattr(sys, name, stream)
        printed = sum(stream.sizes.get(thread.ident or 0, 0) for stream in captured.values())
        if not finished:
            self.failures.append(PluginFailure(source, f"did not finish loading in {limit:g} s (it may hang at import); "
                                                       f"cw went on without it ({PLUGIN_TIMEOUT_ENV} sets the limit)"))  # fmt: skip
            return
        error = outcome.get("error")
        if isinstance(error, KeyboardInterrupt):
            raise error
        if isinstance(error, FrameworkError):
            self.failures.append(PluginFailure(source, error.message))
        elif isinstance(error, SystemExit):
            self.failures.append(PluginFailure(source, f"SystemExit({error.code!r}) while loading: a plugin may not end cw"))
        elif error is not None:
            self.failures.append(PluginFailure(source, f"{type(error).__name__}: {error}"))
        else:
            try:
                self._add(outcome["loaded"])
            except FrameworkError as exc:
                self.failures.append(PluginFailure(source, exc.message))
                return
        if printed:
            self.notes.append(f"{source} printed {printed:,} characters while loading (not shown)")

    def load_all(
        self,
        *,
        include_plugins: bool = True,
        include_builtins: bool = True,
        slow: Callable[[str, float], None] | None = None,
    ) -> FrameworkRegistry:
        """Load the built-ins, then plugin folders, then entry points (unless disabled).

        Args:
            include_plugins: Load the plugin folders and entry points too.
            include_builtins: Load the built-ins (``cw --help`` lists them from
                :data:`BUILTIN_DESCRIPTIONS` and loads only the plugins).
            slow: Called (from another thread) with a plugin's source and the seconds spent when
                loading it has taken :data:`SLOW_PLUGIN_S`, so the caller can say which one hangs.
        """
        self._slow = slow
        for target in BUILTIN_TARGETS if include_builtins else ():
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


def registry_for(name: str) -> FrameworkRegistry:
    """The frameworks ``cw <name> ...`` needs: a built-in alone (no plugin is imported), else
    every framework."""
    registry = FrameworkRegistry()
    return registry.load_builtin(name) if name in BUILTINS else registry.load_all()


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
        found = registry_for(name)._frameworks.get(name)
        _NAMED[key] = found.framework if found is not None else None
    return _NAMED[key]
