"""What a framework hands cw, as plain values: the run it describes (:class:`RunContext`), the
servers it needs (:class:`ServiceDef`), the data it reads (:class:`DatasetNeed`), the failures its
log shows (:class:`FailureHint`) and its default sizing (:class:`ResourceDefaults`).

The parts of the framework contract (:mod:`cw_cli.frameworks.parts`) take and return these;
plugins import them from :mod:`cw_cli.frameworks.base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from cw_cli.types import TrainingType

if TYPE_CHECKING:  # pydantic is heavy; `cw --help` must not import it
    from cw_cli.config.models import ClusterSpec

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

