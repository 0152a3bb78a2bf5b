"""The `cw` command line: framework commands from the registry, plus run and cluster commands.

Built on click, and lazily: a command's module is imported, and its options built, only when that
command runs (or its own --help is asked for). `cw status` never pays for the launch options,
`cw --help` never imports a command. typer was measured at 0.15 s to build one 4-option command
(it makes a pydantic TypeAdapter per parameter), which is more than the whole budget of a
`cw status` (docs/architecture.md, "Start-up").
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

import click

from cw_cli import __version__
from cw_cli.errors import ExitCode

if TYPE_CHECKING:
    from cw_cli.frameworks.registry import FrameworkRegistry

HELP = "Launch LLM post-training runs (SFT, DPO, GRPO) on a Kubernetes GPU cluster."

#: name -> ("module:attribute" of the click command, one-line help shown by `cw --help`).
#: The help is written here so listing the commands imports none of them; a unit test checks
#: that each line is the first line of the command's own help.
COMMANDS: dict[str, tuple[str, str]] = {
    "list": (
        "cw_cli.cli.runs:list_command",
        "List the runs in the namespace, with state, GPUs, age and why a failed run failed.",
    ),
    "status": (
        "cw_cli.cli.runs:status_command",
        "Show a run's Job, pods and services; say why a pod is Pending or why the run failed.",
    ),
    "logs": (
        "cw_cli.cli.runs:logs_command",
        "Print (or follow) the log of one pod of a run, through the API server.",
    ),
    "metrics": (
        "cw_cli.cli.metrics:metrics_command",
        "Show a run's training metrics (loss, reward...) from its trainer log: a table and a chart.",
    ),
    "estimate": ("cw_cli.cli.estimate:estimate_command", "Estimate a run's per-GPU memory (trainer, vLLM) and whether it fits."),
    "artifacts": (
        "cw_cli.cli.artifacts:artifacts_command",
        "List a run's checkpoints, final model and exports on its volume (step, size, time, metrics).",
    ),
    "download": (
        "cw_cli.cli.download:download_command",
        "Copy a run's model, checkpoint or export to this machine, verified; run again to go on after a stop.",
    ),
    "serve": (
        "cw_cli.cli.serve:serve_command",
        "Serve a run's model (vLLM, or transformers on CPU) for a while, reachable through the API server.",
    ),
    "try": (
        "cw_cli.cli.serve:try_command",
        "Ask a run's model one question (a server is started on it, asked and stopped).",
    ),
    "export": (
        "cw_cli.cli.export:export_command",
        "Export a run's model to RUN/exported/ on its checkpoint volume (merged, or pushed to the Hub).",
    ),
    "eval": (
        "cw_cli.cli.eval:eval_command",
        "Evaluate a run's model with lm-evaluation-harness (or verifiers' vf-eval); scores go to its folder, cw artifacts and cw metrics.",
    ),
    "pipeline": (
        "cw_cli.cli.pipeline:pipeline_command",
        "Launch a pipeline: each stage an ordinary run, each later one started in the cluster when those it waits for succeeded.",
    ),
    "delete": (
        "cw_cli.cli.runs:delete_command",
        "Delete every object of a run, or of every run of a sweep (and nothing else).",
    ),
    "frameworks": (
        "cw_cli.cli.info:frameworks_command",
        "List the frameworks (built-in and plugins) and the plugins that failed to load.",
    ),
    "schema": (
        "cw_cli.cli.info:schema_command",
        "Print the JSON Schema of cw's config fields (for editors).",
    ),
    "cluster": (
        "cw_cli.cli.cluster:cluster_group",
        "The test cluster: a real Kubernetes control plane, fake GPU nodes (KWOK) and a real node.",
    ),
    "completion": (
        "cw_cli.cli.info:completion_command",
        "Print the shell completion script; e.g. add `eval \"$(cw completion bash)\"` to ~/.bashrc.",
    ),
}


def load_command(target: str) -> click.Command:
    """Import ``module:attribute`` and return that click command."""
    module_name, _, attribute = target.partition(":")
    command = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is not a click command")
    return command


class FrameworkGroup(click.Group):
    """`cw <framework>`: one launch command per training type, built when asked for."""

    def __init__(self, registry: FrameworkRegistry, framework_name: str, **kwargs: Any) -> None:
        loaded = registry.get(framework_name)
        super().__init__(name=framework_name, help=loaded.plugin.description, no_args_is_help=True, **kwargs)
        self.registry = registry
        self.types = loaded.types

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.types)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.types:
            return None
        from cw_cli.cli.run import make_run_command

        return make_run_command(self.registry, str(self.name), cmd_name, self._short_help(cmd_name))

    def _short_help(self, type_name: str) -> str:
        training_type = self.types[type_name]
        alias = f" (same as {training_type.value})" if type_name != training_type.value else ""
        return f"{self.name} {type_name}{alias}: launch a run."

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self._short_help(name)) for name in self.list_commands(ctx)]
        with formatter.section("Training types"):
            formatter.write_dl(rows)


class CwGroup(click.Group):
    """The root `cw` group: commands from :data:`COMMANDS` and one group per registered framework."""

    def __init__(self, registry: FrameworkRegistry | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._registry = registry
        self._single: list[FrameworkRegistry] = []  # one built-in each, for `cw <built-in> ...`

    @property
    def registry(self) -> FrameworkRegistry:
        """The framework registry, loaded (built-ins, plugin folders, entry points) on first use."""
        if self._registry is None:
            self._registry = _load_registry()
        return self._registry

    def cleanup(self) -> None:
        """Release what the plugins loaded (only if the registry was loaded)."""
        for registry in [*self._single, *([self._registry] if self._registry is not None else [])]:
            registry.cleanup()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [loaded.name for loaded in self.registry.all()] + list(COMMANDS)

    def registry_for(self, name: str) -> FrameworkRegistry:
        """The frameworks ``cw <name> ...`` (or ``cw estimate <name> ...``) needs: a built-in
        alone, so no plugin is imported (a plugin that hangs or exits cannot touch it), unless
        every framework is loaded already."""
        from cw_cli.frameworks.registry import BUILTINS, FrameworkRegistry

        if name in BUILTINS and self._registry is None:  # only that framework: no plugin scan
            single = FrameworkRegistry().load_builtin(name)
            self._single.append(single)
            return single
        return self.registry

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            return load_command(COMMANDS[cmd_name][0])
        registry = self.registry_for(cmd_name)
        if cmd_name in {loaded.name for loaded in registry.all()}:
            return FrameworkGroup(registry, cmd_name)
        return None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        frameworks = self._framework_rows()
        with formatter.section("Frameworks (cw FRAMEWORK TYPE CONFIG)"):
            formatter.write_dl(frameworks or [("(none)", "no framework loaded: see `cw frameworks`")])
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, (_, short) in COMMANDS.items()])


    def _framework_rows(self) -> list[tuple[str, str]]:
        """(name, description) of every framework: the built-ins from their table, without importing
        them, then the plugins (a plugin cannot take a built-in's name: the built-in wins)."""
        if self._registry is not None:
            return [(loaded.name, loaded.plugin.description) for loaded in self._registry.all()]
        from cw_cli.frameworks.registry import BUILTIN_DESCRIPTIONS

        plugins = _load_registry(include_builtins=False)
        self._single.append(plugins)  # cleaned up at exit like the others
        rows = list(BUILTIN_DESCRIPTIONS.items())
        return rows + [(loaded.name, loaded.plugin.description) for loaded in plugins.all() if loaded.name not in BUILTIN_DESCRIPTIONS]


def _load_registry(include_builtins: bool = True) -> FrameworkRegistry:
    """Every framework, saying which plugin is slow to load, and which one a Ctrl-C stopped."""
    from cw_cli.frameworks.registry import DISABLE_PLUGINS_ENV, FrameworkRegistry

    def slow(source: str, seconds: float) -> None:
        from cw_cli.cli.plain import printable, say  # only then: `cw --help` imports nothing more

        say(f"note: loading the plugin {printable(source)} has taken {seconds:g} s and goes on (it may hang at import); "
            f"Ctrl-C stops cw, {DISABLE_PLUGINS_ENV}=1 starts it without plugins")  # fmt: skip

    registry = FrameworkRegistry()
    try:
        registry.load_all(slow=slow, include_builtins=include_builtins)
    except KeyboardInterrupt:
        from cw_cli.cli.plain import printable, say

        where = f"the plugin {printable(registry.loading)}" if registry.loading else "the frameworks"
        say(f"error: interrupted while loading {where}; {DISABLE_PLUGINS_ENV}=1 starts cw without plugins")
        raise click.exceptions.Exit(int(ExitCode.INTERRUPTED)) from None
    if registry.failures:
        from cw_cli.cli.plain import printable, say

        for failure in registry.failures:  # one line each: cw goes on without that plugin
            say(f"warning: the plugin {printable(failure.source)} failed to load and is left out: "
                f"{printable(failure.error)[:300]}")  # fmt: skip
        registry.reported = True
    return registry


def _debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        os.environ["CW_DEBUG"] = "1"


def build_app(registry: FrameworkRegistry | None = None) -> CwGroup:
    """A fresh `cw` application; its framework commands come from ``registry`` (default: loaded when needed)."""
    app = CwGroup(
        registry,
        name="cw",
        help=HELP,
        no_args_is_help=True,
        context_settings={"help_option_names": ["--help", "-h"], "max_content_width": 120},
    )
    app.params.append(
        click.Option(["--debug"], is_flag=True, expose_value=False, is_eager=True, callback=_debug,
                     help="Show details and tracebacks of errors.")
    )  # fmt: skip
    click.version_option(__version__, "--version", prog_name="cw", message="%(prog)s %(version)s")(app)
    return app


def main() -> None:
    """Run `cw` with the process's arguments; ends with :class:`SystemExit`, like click."""
    app = build_app()
    try:
        app.main(prog_name="cw")
    finally:
        app.cleanup()


def console_main() -> None:
    """The `cw` executable: :func:`main`, then an exit that skips the interpreter's teardown."""
    from cw_cli.cli.hard_exit import exit_now

    try:
        main()
    except SystemExit as stop:
        exit_now(stop.code)
    exit_now(0)
