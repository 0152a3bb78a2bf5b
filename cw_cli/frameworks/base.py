"""The interface every training framework implements, built-in or plugin.

A framework knows its own native config (required keys, defaults, what to add before mounting
it), its images and commands, and which services a training type needs. It knows nothing about
the cluster client or the CLI: it describes; the renderer turns descriptions into manifests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # pydantic is heavy; `cw --help` must not import it
    from cw_cli.config.models import ClusterSpec

CONFIG_MOUNT = "/etc/cw"
CONFIG_FILE = f"{CONFIG_MOUNT}/config.yaml"
CHECKPOINT_MOUNT = "/checkpoints"


class TrainingType(str, Enum):
    """The training methods cw knows; a framework supports a subset."""

    SFT = "sft"
    DPO = "dpo"
    GRPO = "grpo"


@dataclass(frozen=True)
class RunContext:
    """What a framework needs to know about the run it is describing.

    Attributes:
        run_name: The run's name; every object name starts with it.
        training_type: The training method.
        cluster: The validated cluster fields, with command-line flags applied.
        gpus: GPUs per trainer pod (after framework defaults).
        names: Object name per role (``config``, ``trainer``, ``nodes``, ``server``, ``reward``).
        services_only: Only the services are deployed (``--services``).
    """

    run_name: str
    training_type: TrainingType
    cluster: ClusterSpec
    gpus: int
    names: dict[str, str]
    services_only: bool = False

    @property
    def output_dir(self) -> str:
        """Default output folder on the checkpoint volume, one per run name."""
        return f"{CHECKPOINT_MOUNT}/{self.run_name}"


@dataclass(frozen=True)
class ServiceDef:
    """A long-running server the trainer talks to (a Deployment plus a Service).

    Attributes:
        role: ``server`` (generation) or ``reward``; also the object-name suffix.
        image: Container image.
        command: Full container command (argv).
        port: Port the server listens on; the Service exposes the same port.
        gpus: GPUs per replica.
        cpu: CPU request and limit, or None for no request.
        memory: Memory request and limit, or None.
        health_path: HTTP path answering 200 once the server is ready.
        env: Extra literal environment variables.
        extra_ports: More ports the Service exposes (name -> port), e.g. a weight-sync
            rendezvous the trainer connects to through the Service name.
        headless: The Service name resolves to the pod's own IP (``clusterIP: None``, published
            before the pod is Ready), for a server that binds a socket to the address its clients
            use; a ClusterIP is not an address a pod can bind.
    """

    role: str
    image: str
    command: list[str]
    port: int
    gpus: int
    cpu: str | None = None
    memory: str | None = None
    health_path: str = "/health"
    env: dict[str, str] = field(default_factory=dict)
    extra_ports: dict[str, int] = field(default_factory=dict)
    headless: bool = False


@dataclass(frozen=True)
class ResourceDefaults:
    """Default resources of the trainer for a framework."""

    gpu: int = 8
    cpu: str | None = "32"
    memory: str | None = "256Gi"


class BaseTrainingFramework(ABC):
    """A training backend: turns a native config into what the pods run.

    Subclasses set ``name``, ``description`` and ``training_types`` and implement the abstract
    methods. Plugins subclass it exactly as the built-ins do.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    training_types: ClassVar[tuple[TrainingType, ...]] = ()
    #: Extra command names accepted for a type, e.g. ``{"rlhf": TrainingType.GRPO}``.
    aliases: ClassVar[dict[str, TrainingType]] = {}
    resources: ClassVar[ResourceDefaults] = ResourceDefaults()
    #: ConfigMap key of the mounted native config (``/etc/cw/<name>``).
    config_file_name: ClassVar[str] = "config.yaml"

    def template_dirs(self) -> list[Path]:
        """Folders searched for this framework's templates, first match wins.

        A plugin overrides this to put its own folder first; the built-in templates are always
        last, so a plugin can reuse them.
        """
        return []

    def templates(self, training_type: TrainingType) -> dict[str, str]:
        """Template file per object kind used for this type.

        Keys are ``configmap``, ``job``, ``headless_service``, ``deployment`` and ``service``;
        a plugin may point any of them at its own file.
        """
        return {
            "configmap": "common/configmap.yaml.j2",
            "job": "common/job.yaml.j2",
            "headless_service": "common/headless-service.yaml.j2",
            "deployment": "common/deployment.yaml.j2",
            "service": "common/service.yaml.j2",
        }

    def native_defaults(self, training_type: TrainingType) -> dict[str, Any]:
        """Native config values used when the user's file does not set them."""
        return {}

    def known_native_keys(self) -> frozenset[str]:
        """Native keys that look like cw fields but are legitimate (skips "did you mean" there)."""
        return frozenset()

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        """Native keys that must be present; each entry lists alternatives (any one suffices)."""
        return []

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        """Check the native config; return one message per problem (empty when valid).

        The default checks ``required_keys``; override to add more and call super().
        """
        problems = []
        for alternatives in self.required_keys(training_type):
            if not any(key in native for key in alternatives):
                wanted = " or ".join(f"`{key}`" for key in alternatives)
                problems.append(f"missing {wanted} (required by `{self.name} {training_type.value}`)")
        return problems

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        """Return the native config as mounted in the pods (e.g. with cw's output folder added)."""
        return dict(native)

    def serialize_config(self, config: dict[str, Any]) -> str:
        """The mounted config's text (YAML by default; override for another format).

        Args:
            config: The result of ``prepare_config``.

        Raises:
            ValueError: A value has no form in the file's format.
        """
        import yaml  # lazily: only rendering needs it

        # allow_unicode stays off: PyYAML would write line breaks (NEL, U+2028) raw and lose them.
        return yaml.safe_dump(config, sort_keys=False)

    def pip_packages(self, config: dict[str, Any], context: RunContext) -> list[str]:
        """Requirements installed in the run's pods before their command starts (none by default).

        For a framework whose pinned image lacks its own packages; pip skips what the image
        already satisfies, so an image that has them starts without touching the network.
        """
        return []

    def config_files(self, native: dict[str, Any], context: RunContext, base_dir: Path) -> dict[str, str]:
        """Extra files for the ConfigMap besides ``config.yaml`` (name -> text).

        Args:
            native: The native config as the user wrote it.
            context: The run being described.
            base_dir: Folder of the user's config file, for relative paths.
        """
        return {}

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

    def trainer_env(self, context: RunContext) -> dict[str, str]:
        """Literal environment variables for the trainer container."""
        return {}

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        """Services this type needs before the trainer can start (none by default)."""
        return []
