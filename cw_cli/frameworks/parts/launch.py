"""Part 4 of the framework contract: the trainer pod's image, command and templates."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from cw_cli.frameworks.descriptions import RunContext
from cw_cli.types import TrainingType


class Launch(ABC):
    """How the trainer runs: its image and command (the two required hooks of the contract), a
    user's own script instead, commands and packages before training, its environment, and the
    templates its objects are rendered from.
    """

    #: cw's pod entrypoint (``cw_entrypoint.py``) resumes from the newest ``checkpoint-N`` in
    #: ``output_dir`` (HF Trainer CLIs that take ``--resume_from_checkpoint``); False for
    #: frameworks that resume by themselves. A plugin's ``launcher_resumes`` (the earlier name)
    #: is read as this.
    entrypoint_resumes: ClassVar[bool] = False
    #: A script of the user's (the cluster field ``script``) reads the native config with its own
    #: parser, so cw neither renames its keys nor checks them against the framework's command.
    #: False where a script takes the framework's own arguments (verifiers' `@ config.toml`).
    script_reads_its_own_keys: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "launcher_resumes" in vars(cls):  # the attribute's earlier name, still honoured
            cls.entrypoint_resumes = bool(vars(cls)["launcher_resumes"])

    @abstractmethod
    def default_image(self, training_type: TrainingType) -> str:
        """Pinned image the trainer runs when the user names none."""

    @abstractmethod
    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        """The trainer container's full command (argv).

        Args:
            config: The native config as mounted (the result of ``prepare_config``).
            context: The run being described.
        """

    def script_command(
        self, config: dict[str, Any], context: RunContext, script: str
    ) -> tuple[list[str], dict[str, Any]] | None:
        """How the trainer runs the user's own script (the cluster field ``script``) instead of
        the framework's command.

        Args:
            config: The native config as prepared (the result of ``prepare_config``).
            context: The run being described.
            script: The script's path in the pod.

        Returns:
            (the trainer's command, the config as mounted for the script), or None when the
            framework has no way to run a script of the user's (cw then refuses the run).

        Raises:
            ValueError: A setting of the config cannot be carried over to the script's launch.
        """
        return None

    def launch_notes(self, config: dict[str, Any], context: RunContext) -> list[str]:
        """What the user should know before this run starts (printed with the plan's notes), e.g.
        a restart that does not resume; none by default.

        Args:
            config: The native config as mounted (the result of ``prepare_config``).
            context: The run being described.
        """
        return []

    def setup_commands(self, config: dict[str, Any], context: RunContext) -> list[list[str]]:
        """Commands the trainer pod runs before training (argv each), e.g. installing an environment."""
        return []

    def pip_packages(self, config: dict[str, Any], context: RunContext) -> list[str]:
        """Requirements installed in the run's pods before their command starts (none by default).

        For a framework whose pinned image lacks its own packages; pip skips what the image
        already satisfies, so an image that has them starts without touching the network.
        """
        return []

    def trainer_env(self, context: RunContext) -> dict[str, str]:
        """Literal environment variables for the trainer container."""
        return {}

    def template_dirs(self) -> list[Path]:
        """Folders searched for this framework's templates, first match wins.

        A plugin overrides this to put its own folder first; the built-in templates are always
        last, so a plugin can reuse them.
        """
        return []

    def templates(self, training_type: TrainingType) -> dict[str, str]:
        """Template file per object kind used for this type.

        Keys are ``configmap``, ``job``, ``headless_service``, ``deployment``, ``service``, the
        server keeper's ``keeper_serviceaccount``, ``keeper_role`` and ``keeper_rolebinding``,
        and the run's ``networkpolicy``; a plugin may point any of them at its own file.
        """
        return {
            "configmap": "common/configmap.yaml.j2",
            "job": "common/job.yaml.j2",
            "headless_service": "common/headless-service.yaml.j2",
            "deployment": "common/deployment.yaml.j2",
            "service": "common/service.yaml.j2",
            "keeper_serviceaccount": "common/keeper-serviceaccount.yaml.j2",
            "keeper_role": "common/keeper-role.yaml.j2",
            "keeper_rolebinding": "common/keeper-rolebinding.yaml.j2",
            "networkpolicy": "common/networkpolicy.yaml.j2",
        }
