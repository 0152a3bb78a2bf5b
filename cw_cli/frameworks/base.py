"""The interface every training framework implements, built-in or plugin.

A framework knows its own native config (required keys, defaults, what to add before mounting
it), its images and commands, and which services a training type needs. It knows nothing about
the cluster client or the CLI: it describes; the renderer turns descriptions into manifests.
It also describes, in neutral terms, what the memory estimate and ``cw status`` need to know of
it: its training setup (``training_setup``), how its config spells the settings cw advises on
(``words``) and the failures its trainer's log shows (``failure_hints``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from msgspec import Struct, field

from cw_cli.frameworks.tracking import Tracking, from_trainer_args
from cw_cli.types import TrainingType

__all__ = ["TrainingType"]  # plugins import it from here (docs/plugins.md); it lives in cw_cli.types

if TYPE_CHECKING:  # pydantic is heavy; `cw --help` must not import it
    from cw_cli.config.models import ClusterSpec
    from cw_cli.estimate.native_setup import RunSetup
    from cw_cli.estimate.words import ConfigWords

CONFIG_MOUNT = "/etc/cw"
CONFIG_FILE = f"{CONFIG_MOUNT}/config.yaml"
CHECKPOINT_MOUNT = "/checkpoints"


class RunContext(Struct, frozen=True):
    """What a framework needs to know about the run it is describing.

    Attributes:
        run_name: The run's name; every object name starts with it.
        training_type: The training method.
        cluster: The validated cluster fields, with command-line flags applied.
        names: Object name per role (``config``, ``trainer``, ``nodes``, ``server``, ``reward``).
        services_only: Only the services are deployed (``--services``).
    """

    run_name: str
    training_type: TrainingType
    cluster: ClusterSpec
    names: dict[str, str]
    services_only: bool = False

    @property
    def gpus(self) -> int:
        """GPUs per trainer pod: ``cluster.gpu``, where the loader put the framework's default."""
        return self.cluster.gpu or 0

    @property
    def output_dir(self) -> str:
        """Default output folder on the checkpoint volume, one per run name."""
        return f"{CHECKPOINT_MOUNT}/{self.run_name}"


class ServiceDef(Struct, frozen=True):
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


class DatasetNeed(Struct, frozen=True):
    """The columns a training type reads from one dataset the native config names.

    Attributes:
        key: The config key of the dataset reference, for messages (``dataset_name``,
            ``datasets[0].path``).
        reference: Its value: a hub id, a local file or folder, or a builder name (``json``)
            with ``data_files``.
        accepted: Column sets, any one of which suffices (``({"messages"}, {"text"})``).
        description: What reads them, for messages (``trl sft reads ...``).
        data_files: ``data_files`` patterns (relative to the config or the hub repository).
        data_dir: ``data_dir``: a folder inside the dataset.
        split: The split trained on.
        config_name: The dataset's configuration (``name`` / ``dataset_config``).
        columns: Columns the framework keeps (``columns``), or None for all.
    """

    key: str
    reference: str
    accepted: tuple[frozenset[str], ...]
    description: str
    data_files: tuple[str, ...] = ()
    data_dir: str | None = None
    split: str = "train"
    config_name: str | None = None
    columns: tuple[str, ...] | None = None


def dataset_item_need(
    item: dict[str, Any], index: int, accepted: tuple[frozenset[str], ...], description: str
) -> DatasetNeed | None:
    """The need of one ``datasets[index]`` entry (``path``, ``data_files`` for its split, ``data_dir``,
    ``split``, ``name``, ``columns``), as TRL's and Axolotl's dataset lists write them; None when its
    data files cannot be made out (nothing to check against)."""
    split = item["split"] if isinstance(item.get("split"), str) else "train"
    files = item.get("data_files")
    if isinstance(files, dict):  # split -> path(s)
        files = files.get(split)
    listed = [files] if isinstance(files, str) else files if isinstance(files, list) else []
    data_files = tuple(f for f in listed if isinstance(f, str))
    if item.get("data_files") is not None and not data_files:
        return None
    columns = item.get("columns")
    return DatasetNeed(
        key=f"datasets[{index}].path",
        reference=str(item["path"]),
        accepted=accepted,
        description=description,
        data_files=data_files,
        data_dir=item["data_dir"] if isinstance(item.get("data_dir"), str) else None,
        split=split,
        config_name=item["name"] if isinstance(item.get("name"), str) else None,
        columns=tuple(map(str, columns)) if isinstance(columns, list) else None,
    )


class FailureHint(Struct, frozen=True):
    """A failure the framework's trainer log shows, explained in the framework's own words.

    ``cw status`` searches a failed container's log for it after cw's own causes (CUDA out of
    memory, a Hugging Face refusal, an NCCL timeout), so a hint explains what only this framework
    says.

    Attributes:
        kind: Stable code of the cause (``cw status -o json``'s ``explanations[].kind``).
        pattern: A regular expression searched in each log line; the last matching line is shown
            with the lines before it.
        summary: A few words for ``cw list`` (``env not installed``).
        message: What happened, in plain words.
        fix: What to change, in the config's keys.
    """

    kind: str
    pattern: str
    summary: str
    message: str
    fix: str


class ResourceDefaults(Struct, frozen=True):
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
    #: Native keys (paths into the config) naming folders the trainer writes; cw keeps them on
    #: the checkpoint volume.
    output_keys: ClassVar[tuple[tuple[str, ...], ...]] = (("output_dir",),)
    #: Native keys whose value may name a local file or folder to ship with the run (``*`` is
    #: every item of a list), e.g. ``("datasets", "*", "path")``.
    file_keys: ClassVar[tuple[tuple[str, ...], ...]] = ()
    #: Native keys whose values are dotted import paths (``rewards.accuracy``); a module of that
    #: name next to the config is shipped and importable in the pods.
    module_keys: ClassVar[tuple[tuple[str, ...], ...]] = ()
    #: Top-level native keys that count per step (batch sizes, accumulation steps): each must be
    #: a whole number of at least 1 (a negative batch size launched a run that fails at once).
    count_keys: ClassVar[tuple[str, ...]] = ()
    #: Native key of the model trained; with the framework and type it identifies a run's
    #: outputs, so a reused run name never resumes from another model's checkpoints.
    model_key: ClassVar[str] = "model_name_or_path"
    #: A script of the user's (the cluster field ``script``) reads the native config with its own
    #: parser, so cw neither renames its keys nor checks them against the framework's command.
    #: False where a script takes the framework's own arguments (verifiers' `@ config.toml`).
    script_reads_its_own_keys: ClassVar[bool] = True
    #: cw's pod entrypoint (``cw_entrypoint.py``) resumes from the newest ``checkpoint-N`` in
    #: ``output_dir`` (HF Trainer CLIs that take ``--resume_from_checkpoint``); False for
    #: frameworks that resume by themselves. A plugin's ``launcher_resumes`` (the earlier name)
    #: is read as this.
    entrypoint_resumes: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "launcher_resumes" in vars(cls):  # the attribute's earlier name, still honoured
            cls.entrypoint_resumes = bool(vars(cls)["launcher_resumes"])
    #: Native key of the model's revision (branch, tag or commit), so the estimate reads the
    #: config.json of that snapshot; None when the framework has none.
    model_revision_key: ClassVar[str | None] = None
    #: How the native config spells what the estimate's suggestions and ``cw status``'s advice
    #: name (the micro batch, gradient checkpointing, LoRA...). None: the advice is in plain
    #: words, never in another framework's keys, and the estimate lists no config changes.
    words: ClassVar[ConfigWords | None] = None
    #: Module whose ``read_setup(training_type, native, cluster, base_dir, model_config)`` is
    #: :meth:`training_setup`, imported only when an estimate is made (a built-in's ``setup.py``).
    setup_module: ClassVar[str | None] = None

    def training_setup(
        self,
        native: Mapping[str, Any],
        training_type: TrainingType,
        cluster: ClusterSpec,
        base_dir: Path | None,
        model_config: Mapping[str, Any] | None,
    ) -> RunSetup | None:
        """The run's training setup in neutral terms, for the memory estimate (``cw estimate``
        and the check before a launch); None (the default) when the framework gives none, and
        then the run gets no estimate.

        Called only once the model's config.json is found, so it may import what it needs then.

        Args:
            native: The native config as loaded (defaults merged, old spellings translated).
            training_type: The training method.
            cluster: cw's fields: ``gpu`` per node and ``nodes`` (see
                :func:`cw_cli.frameworks.distributed.trainer_world`), ``services.server``.
            base_dir: The config's folder (files the config names), None when unknown.
            model_config: The model's config.json (for ``dtype: auto``, PEFT's default targets).

        Returns:
            The trainer's :class:`~cw_cli.estimate.memory.TrainingSetup` and the vLLM engine's
            :class:`~cw_cli.estimate.vllm.VllmSetup` with notes, as a
            :class:`~cw_cli.estimate.native_setup.RunSetup`; or None.
        """
        if self.setup_module is None:
            return None
        import importlib  # the reader, and what it imports, load only for an estimate

        reader = importlib.import_module(self.setup_module).read_setup
        return reader(training_type.value, native, cluster, base_dir, model_config)

    @property
    def describes_training(self) -> bool:
        """Whether the framework gives a training setup (``setup_module``, or its own ``training_setup``)."""
        return self.setup_module is not None or type(self).training_setup is not BaseTrainingFramework.training_setup

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """Failures the trainer's log may show that only this framework explains (none by default)."""
        return ()

    def template_dirs(self) -> list[Path]:
        """Folders searched for this framework's templates, first match wins.

        A plugin overrides this to put its own folder first; the built-in templates are always
        last, so a plugin can reuse them.
        """
        return []

    def templates(self, training_type: TrainingType) -> dict[str, str]:
        """Template file per object kind used for this type.

        Keys are ``configmap``, ``job``, ``headless_service``, ``deployment``, ``service`` and
        the server keeper's ``keeper_serviceaccount``, ``keeper_role`` and ``keeper_rolebinding``, and
        the run's ``networkpolicy``;
        a plugin may point any of them at its own file.
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
        for key in self.count_keys:
            problem = _count_problem(native.get(key))
            if problem is not None:
                problems.append(f"`{key}: {_short(native[key])}` {problem}")
        where = _nul_at(native)
        if where is not None:  # it would reach a server's or trainer's arguments, which cannot hold one
            problems.append(f"`{where}` holds a NUL character (\\x00), which no argument or config value may hold; remove it")
        return problems

    def upgrade_config(self, native: dict[str, Any], training_type: TrainingType) -> tuple[dict[str, Any], list[str]]:
        """Translate keys that older releases of the framework spelled differently.

        Returns:
            (the config to use, one note per translated key). The default changes nothing.
        """
        return native, []

    def claims_native_keys(self, data: dict[str, Any]) -> set[str]:
        """Top-level keys that are the framework's own although cw has a field of that name.

        verifiers' vf-rl config has an ``env`` section (``id``, ``args``); cw's ``env`` is
        environment variables. A framework claims such a key when its value has its own shape.
        """
        return set()

    def native_resources(
        self, native: dict[str, Any], training_type: TrainingType, base_dir: Path
    ) -> dict[tuple[str, ...], tuple[int, str]]:
        """What the native config itself says about sizing, as cw fields.

        Args:
            native: The native config, defaults merged.
            training_type: The training method.
            base_dir: Folder of the config file (for files it names, e.g. an accelerate config).

        Returns:
            cw field path (``("gpu",)``, ``("services", "server", "gpu")``) -> (value, the native
            key that says so, for messages). cw uses a value when the user set no cw field for
            it; a flag that disagrees wins with a note; a cw field in the file that disagrees is
            an error.
        """
        return {}

    def dataset_needs(self, native: dict[str, Any], training_type: TrainingType) -> list[DatasetNeed]:
        """The columns the training type reads from each dataset the config names.

        cw checks them before launch where it can read the data here (a local file, the local
        Hugging Face cache). The default declares nothing, so a plugin is never refused for data
        it did not describe; declare only forms the framework is known to refuse.

        Args:
            native: The native config as the user wrote it (defaults merged).
            training_type: The training method.
        """
        return []

    def secrets_needed(self, native: dict[str, Any]) -> dict[str, str]:
        """Environment variables the config needs from a Secret (name -> the setting that needs it)."""
        needed: dict[str, str] = {}
        if self.pushes_to_hub(native):
            needed["HF_TOKEN"] = "push_to_hub: true"
        if self.tracking(native).wandb:
            needed["WANDB_API_KEY"] = self.wandb_setting(native)
        return needed

    def tracking(self, native: dict[str, Any]) -> Tracking:
        """Experiment trackers the config reports to (the Hugging Face Trainer's ``report_to``)."""
        return from_trainer_args(native)

    def wandb_setting(self, native: dict[str, Any]) -> str:
        """The setting that turns W&B on, as the user wrote it (for messages)."""
        return f"report_to: {native.get('report_to')}"

    def pushes_to_hub(self, native: dict[str, Any]) -> bool:
        """Whether the config uploads its results to the Hugging Face Hub (``push_to_hub: true``)."""
        return native.get("push_to_hub") is True

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
        # libyaml: ~10x faster, the same data (tests/unit/test_libyaml_dump_reads_back_the_same.py)
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return yaml.dump(config, Dumper=dumper, sort_keys=False)

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

    def setup_commands(self, config: dict[str, Any], context: RunContext) -> list[list[str]]:
        """Commands the trainer pod runs before training (argv each), e.g. installing an environment."""
        return []

    def trainer_env(self, context: RunContext) -> dict[str, str]:
        """Literal environment variables for the trainer container."""
        return {}

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        """Services this type needs before the trainer can start (none by default)."""
        return []


def _count_problem(value: Any) -> str | None:
    """Why a batch size or step count is unusable (None when fine or unset: the default)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return "must be a whole number, at least 1"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a whole number, at least 1"
    if isinstance(value, float) and not value.is_integer():
        return "must be a whole number, at least 1"
    return None if value >= 1 else "must be at least 1"


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _nul_at(value: Any, path: str = "", depth: int = 0) -> str | None:
    """The dotted path of the first string (value or key) holding a NUL, or None.

    Bounded: a loaded config is at most 64 levels deep (the loader refuses deeper).
    """
    if depth > 100:
        return None
    if isinstance(value, str):
        return (path or "(the config)") if "\0" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and "\0" in key:
                return here.replace("\0", "\\x00")
            found = _nul_at(item, here, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_at(item, f"{path}[{index}]", depth + 1)
            if found is not None:
                return found
    return None
