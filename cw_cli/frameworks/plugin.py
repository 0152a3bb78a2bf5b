"""The plugin contract: what a package returns from ``get_plugin()``.

Built-in frameworks are plugins too; they are loaded by the same code as a user's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType


class FrameworkPlugin(ABC):
    """A loadable framework: metadata plus the framework class."""

    @property
    @abstractmethod
    def name(self) -> str:
        """Command name of the framework (``cw <name> <type>``)."""

    @property
    def version(self) -> str:
        """Plugin version, shown by ``cw frameworks``."""
        return "0.0.0"

    @property
    def description(self) -> str:
        """One line shown in help and ``cw frameworks``."""
        return self.get_framework_class().description

    @abstractmethod
    def get_framework_class(self) -> type[BaseTrainingFramework]:
        """The framework class this plugin provides."""

    def get_supported_training_types(self) -> list[TrainingType]:
        """Training types offered as commands; defaults to the framework's own list."""
        return list(self.get_framework_class().training_types)

    def initialize(self, context: dict[str, Any]) -> None:
        """Called once after loading, with ``{"cw_version": ...}``; may raise to refuse loading."""
        return None  # optional: most plugins need no set-up

    def cleanup(self) -> None:
        """Called when cw exits."""
        return None  # optional: most plugins hold nothing to release


class SimplePlugin(FrameworkPlugin):
    """A plugin made from a framework class alone; how the built-ins register."""

    def __init__(self, framework_class: type[BaseTrainingFramework], version: str) -> None:
        self._framework_class = framework_class
        self._version = version

    @property
    def name(self) -> str:
        return self._framework_class.name

    @property
    def version(self) -> str:
        return self._version

    def get_framework_class(self) -> type[BaseTrainingFramework]:
        return self._framework_class
