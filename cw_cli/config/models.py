"""The cluster side of a cw config: what cw reads, as opposed to the framework's native keys.

A user's YAML mixes these top-level fields with the framework's own config; cw takes these out
and mounts the rest, unchanged, in the run's ConfigMap.

Unlike cw's other modules, this one keeps its annotations evaluated (no ``from __future__ import
annotations``): pydantic would otherwise compile and evaluate each field's annotation string
when the models are built, on every command that reads a config.

The models are built at the end of this module with pydantic's plugin lookup off, and the blocks
few configs have (``eval:``, ``gate:``, and each feature's, such as ``notify:``) only when a config
has them: see config/model_building.py. A feature's block (cw_cli/features) is a field of
:class:`ClusterSpec` added from the feature's declaration, so the feature stays in its folder.
"""

import posixpath
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema, field_validator, model_validator
from pydantic.functional_validators import AfterValidator, BeforeValidator

from cw_cli.config.model_building import OnDemand, build_without_plugin_lookup, with_feature_blocks
from cw_cli.config.quantity import MIN_CPU, MIN_MEMORY, normalize_quantity
from cw_cli.types import CODE_MOUNT

if TYPE_CHECKING:  # what the blocks are; pydantic validates them with OnDemand
    from cw_cli.config.evaluation import EvalSpec
    from cw_cli.config.gate import GateSpec

    EvalBlock = EvalSpec | None
    GateBlock = GateSpec | None
else:
    EvalBlock = Annotated[Optional[Any], OnDemand("cw_cli.config.evaluation", "EvalSpec")]  # noqa: UP045 - null allowed, as written_forms reads it
    GateBlock = Annotated[Optional[Any], OnDemand("cw_cli.config.gate", "GateSpec")]  # noqa: UP045

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _quantity(value: object, minimum: float = 0.0, what: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("must be a Kubernetes quantity such as 32, 500m or 64Gi")
    return normalize_quantity(value, minimum, what)


Quantity = Annotated[str, BeforeValidator(_quantity)]
CpuQuantity = Annotated[str, BeforeValidator(lambda value: _quantity(value, MIN_CPU, "cpu"))]
MemoryQuantity = Annotated[str, BeforeValidator(lambda value: _quantity(value, MIN_MEMORY, "memory"))]


#: A GPU's memory as `gpu_memory` or `--gpu-memory` write it: 80GB, 80Gi, 141GB, 81559MiB, a number of GiB.
#: Compiled on first use (by ``re``'s own cache): few configs set gpu_memory.
_GPU_MEMORY = r"(?i)\s*([0-9]*\.?[0-9]+)\s*(|g|gb|gi|gib|m|mb|mi|mib|t|tb|ti|tib)\s*"


def gpu_memory_size(value: object) -> str:
    """Check one GPU's memory as ``gpu_memory`` or ``--gpu-memory`` write it (``80GB``, ``80Gi``, ``81559MiB``, ``80``).

    Returns:
        The size as text, stripped.

    Raises:
        ValueError: Not a size greater than zero (``0``, ``-1``, ``abc``, a boolean); the message
            says what a size looks like.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("must be a memory size such as 80GB, 80Gi or 81559MiB")
    text = str(value).strip()
    match = re.fullmatch(_GPU_MEMORY, text) if len(text) <= 40 else None
    if not match or float(match.group(1)) <= 0:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"{shown!r} is not a memory size such as 80GB, 80Gi or 81559MiB (a bare number is GiB)")
    return text


GpuMemorySize = Annotated[str, BeforeValidator(gpu_memory_size), WithJsonSchema({"type": ["string", "number"]})]


def _env_value(value: object) -> object:
    # YAML types `PORT: 8000` and `DEBUG: true`; an environment variable is text (`true`, as a shell writes it).
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, (int, float)) else value


#: Characters no value of a process's environment or command line can hold: NUL ends a C string,
#: and other C0 controls (all but tab, newline and carriage return) are paste accidents. DEL and
#: C1 controls stay: they are valid bytes there, and the manifests escape them.
_NOT_IN_PROCESS_TEXT = r"[\x00-\x08\x0b\x0c\x0e-\x1f]"
#: What no short name-like value (a GPU product, a model id, a local path) may hold: every control
#: character, and Unicode's invisible bidirectional formatting characters, which make the text
#: display in another order than the one Kubernetes and the trainer read.
_HIDDEN_IN_NAME = r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
#: The same, where a value may span lines (labels, tolerations, Secret keys: their own checks are
#: Kubernetes'; a tab or line break there is rendered, escaped, as written).
_HIDDEN_IN_LABEL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
_CONTROL_NAMES = {"\x00": "NUL", "\t": "TAB", "\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\x1b": "ESCAPE", "\x7f": "DELETE"}


def hidden_character(text: str, pattern: str = _HIDDEN_IN_NAME) -> str | None:
    """The first control or bidirectional formatting character of ``text``, as ``U+202E (RIGHT-TO-LEFT OVERRIDE)``.

    Args:
        text: A value from the config or the command line.
        pattern: The characters refused (a regular expression character class).

    Returns:
        The code point and its name, or None when ``text`` has none of them.
    """
    found = re.search(pattern, text)
    if found is None:
        return None
    import unicodedata  # only for a value that has one

    char = found.group()
    name = _CONTROL_NAMES.get(char) or unicodedata.name(char, "a control character")
    return f"U+{ord(char):04X} ({name}) at character {found.start() + 1}"


def _text_checker(pattern: str, why: str) -> Callable[[object], object]:
    def check(value: object) -> object:
        if isinstance(value, str) and (hidden := hidden_character(value, pattern)):
            shown = value if len(value) <= 60 else value[:60] + "..."
            raise ValueError(f"{shown!r} holds {hidden}, {why}; remove it (retype the value)")
        return value

    return check


_INVISIBLE = "an invisible character that changes how the text displays or is read"
_NOT_TEXT = "which a process's environment and arguments cannot hold"
#: A short name-like value: a GPU product, a model id, a local path.
NameText = Annotated[str, AfterValidator(_text_checker(_HIDDEN_IN_NAME, _INVISIBLE))]
#: A label, toleration or Secret key value, written into manifests.
LabelText = Annotated[str, AfterValidator(_text_checker(_HIDDEN_IN_LABEL, _INVISIBLE))]
#: Text a process receives (an environment value, a server argument) or an annotation value.
ProcessText = Annotated[str, AfterValidator(_text_checker(_NOT_IN_PROCESS_TEXT, _NOT_TEXT))]

#: An environment variable's value: written as a string, number or boolean, kept as text.
EnvValue = Annotated[
    ProcessText, BeforeValidator(_env_value), WithJsonSchema({"type": ["string", "number", "boolean"]})
]

#: A number as YAML 1.2, JSON and TOML write it, when it is given as a string (``--set gpu=0o10``,
#: ``gpu: "1_0"``: pydantic would read the latter as 10). Compiled on first use (by ``re``'s own cache).
_DECIMAL = r"\s*[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\s*"


def _not_bool(value: object) -> object:
    # pydantic reads `true` as 1 for a number field; `gpu: true` is a mistake, not one GPU.
    # (A model validator rather than an annotated type: the JSON Schema keeps minimum/maximum.)
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    if isinstance(value, str) and not re.fullmatch(_DECIMAL, value):
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise ValueError(f"{shown!r} is not a plain decimal number; write digits only, e.g. 8")
    return value


def image_problem(value: object) -> str | None:
    """Why an ``image:`` value written in a config is no image reference (None when it may be one).

    An image reference has no whitespace at all: a stray newline or space is a copy-paste accident
    the kubelet would only report as a failed pull once the pod is scheduled. The ``--image`` flag
    is checked the same way.
    """
    if isinstance(value, str) and (not value or any(ch.isspace() or not ch.isprintable() for ch in value)):
        shown = value if len(value) <= 60 else value[:60] + "..."
        return (
            f"{shown!r} is not an image reference such as ghcr.io/org/trainer:1.0 (no spaces, tabs, newlines or "
            "control characters)"
        )
    return None


#: What the API server accepts as a ConfigMap key (and so as a shipped file's name).
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


def _shipped_name(entry: object) -> object:
    if not isinstance(entry, str):
        return entry

    name = posixpath.basename(entry.rstrip("/"))
    if not _CONFIGMAP_KEY.fullmatch(name) or name in (".", "..") or name.startswith(".."):
        shown = entry if len(entry) <= 60 else entry[:60] + "..."
        raise ValueError(
            f"{shown!r}: the file is shipped under its name, which must be a valid ConfigMap key (letters, digits, "
            "'-', '_' and '.', not '.' or '..'); rename the file, e.g. my_reward.py"
        )
    return entry


ShippedName = Annotated[str, BeforeValidator(_shipped_name)]


def _dns_name(value: str) -> str:
    if not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid Kubernetes object name (lower-case letters, digits, '-' and '.')")
    return value


DnsName = Annotated[str, BeforeValidator(lambda v: _dns_name(str(v)) if isinstance(v, str) else v)]


def _requirement(value: object) -> object:
    # Passed to pip as one argument each: a leading '-' would make it a pip option.
    if isinstance(value, str) and (
        not value.strip() or value != value.strip() or value.startswith("-") or not value.isprintable()
    ):
        raise ValueError(
            f"{value!r} is not a pip requirement such as 'math-verify==0.8.0' "
            "(no leading '-' or spaces; set pip options with PIP_* variables in `env`)"
        )
    return value


Requirement = Annotated[str, BeforeValidator(_requirement)]


def _check_variable_names(variables: Mapping[str, object]) -> None:
    for name in variables:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid environment variable name")


class StrictModel(BaseModel):
    """A model that refuses unknown keys, so typos are caught.

    Empty lists and dicts are plain defaults (``default=[]``): pydantic copies a mutable default
    for each instance. ``default_factory=list`` would do the same, but pydantic then reads the
    builtin's signature, which costs every command that validates a config ~5 ms (tokenize's
    regexes, compiled for it).
    """

    # Built at the end of the module, by _build_without_plugin_lookup.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


class SecretRef(StrictModel):
    """A key of a Kubernetes Secret, exposed to the pods as an environment variable."""

    name: DnsName = Field(description="Name of the Secret in the run's namespace.")
    key: LabelText | None = Field(default=None, description="Key in the Secret; defaults to the variable's name.")


class Toleration(StrictModel):
    """A Kubernetes toleration, copied to every pod of the run."""

    key: LabelText | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelText | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")

    _numbers_not_bools = field_validator("toleration_seconds", mode="before")(_not_bool)


#: Mount paths cw owns in every pod; a user volume may not take them.
RESERVED_MOUNTS = ("/etc/cw", "/checkpoints", "/dev/shm", "/hf-cache", CODE_MOUNT)
#: `checkpoint_volume: none`: the user accepts that the run's outputs die with its pod.
NO_VOLUME = "none"


class VolumeMount(StrictModel):
    """A PersistentVolumeClaim mounted into every pod of the run (datasets, shared models)."""

    path: str = Field(description="Absolute mount path in the pods, e.g. /data.")
    read_only: bool = Field(default=True, description="Mount read-only (the default: inputs are not changed).")

    @field_validator("path")
    @classmethod
    def _absolute(cls, path: str) -> str:

        if not path.startswith("/") or posixpath.normpath(path) != path or path == "/" or not path.isprintable():
            raise ValueError(f"{path!r} must be a normalised absolute path such as /data")
        for reserved in RESERVED_MOUNTS:
            if path == reserved or path.startswith(reserved + "/") or reserved.startswith(path + "/"):
                raise ValueError(f"{path!r} overlaps {reserved}, which cw mounts itself; pick another path")
        return path


def _volume_mount(value: object) -> object:
    return {"path": value} if isinstance(value, str) else value


#: A git remote cw hands to `git clone`: a URL (https, ssh, git, file) or scp-like `user@host:path`;
#: never an option (a leading '-' would be one), never whitespace or control characters.
_GIT_URL = re.compile(r"(?:(?:https?|ssh|git|file)://[^\s]+|[\w.-]+@[\w.-]+:[^\s]+)")
#: A full commit id (SHA-1, or SHA-256 repositories): a branch or tag moves, a resumed run must not.
_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
#: A script path inside the code: relative, no '..', plain characters.
_SCRIPT_PATH = re.compile(r"[\w][\w.-]*(?:/[\w][\w.-]*)*\.py")


class CodeSource(StrictModel):
    """The run's own code: a local folder shipped with the run, or a git repository at a commit.

    The trainer finds it at /cw-code (on PYTHONPATH, with its `src/` folder), fetched or unpacked
    before the command starts, on every node.
    """

    path: NameText | None = Field(
        default=None, description="A local folder (relative to the config), shipped with the run (1 MiB compressed)."
    )
    git: str | None = Field(
        default=None, description="A git repository the pods clone, e.g. https://github.com/huggingface/open-r1."
    )
    commit: str | None = Field(
        default=None, description="The full commit id to check out (required with `git`: a branch moves, a resumed run must not)."
    )
    install: bool = Field(
        default=False,
        description="pip-install the code (`pip install --no-deps`, its pyproject.toml or setup.py) before the command; "
        "list its dependencies under `pip`.",
    )

    @field_validator("git")
    @classmethod
    def _git_url(cls, url: str | None) -> str | None:
        if url is not None and (not _GIT_URL.fullmatch(url) or not url.isprintable()):
            raise ValueError(
                f"{url[:80]!r} is not a git URL cw can clone; write one such as https://github.com/org/repo "
                "(or git@github.com:org/repo)"
            )
        return url

    @field_validator("commit", mode="before")
    @classmethod
    def _full_commit(cls, commit: object) -> object:
        if isinstance(commit, str) and _COMMIT.fullmatch(commit.strip().lower()):
            return commit.strip().lower()
        if commit is None:
            return commit
        raise ValueError(
            f"{str(commit)[:80]!r} is not a full commit id (40 hex digits): a branch or tag moves, and a resumed run "
            "must run the same code; find it with `git ls-remote <url> <branch>` or `git rev-parse HEAD`"
        )

    @model_validator(mode="after")
    def _one_source(self) -> "CodeSource":
        if (self.path is None) == (self.git is None):
            raise ValueError("give either `path` (a local folder) or `git` (a repository) with `commit`")
        if self.git is not None and self.commit is None:
            raise ValueError("`git` needs `commit`, the full commit id to run (a branch moves)")
        if self.path is not None and self.commit is not None:
            raise ValueError("`commit` goes with `git`; a local folder is shipped as it is")
        return self


def _code_source(value: object) -> object:
    return {"path": value} if isinstance(value, str) else value


def _script_path(value: object) -> object:
    if isinstance(value, str) and not (_SCRIPT_PATH.fullmatch(value) and ".." not in value.split("/")):
        raise ValueError(
            f"{value[:80]!r} is not a relative path to a .py file (letters, digits, '_', '-', '.' and '/', no '..'), "
            "e.g. src/open_r1/grpo.py"
        )
    return value


class ServiceResources(StrictModel):
    """Resources and settings of one service of a multi-service run (generation or reward server)."""

    gpu: int | None = Field(default=None, ge=0, le=64, description="GPUs for each replica of this service.")
    cpu: CpuQuantity | None = Field(default=None, description="CPU request and limit, e.g. '16'.")
    memory: MemoryQuantity | None = Field(default=None, description="Memory request and limit, e.g. '128Gi'.")
    image: str | None = Field(default=None, description="Container image of this service.")
    model: NameText | None = Field(
        default=None, description="Model served (reward: the sequence-classification model; required to enable it)."
    )
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=64, description="vLLM tensor parallelism.")
    port: int | None = Field(default=None, ge=1024, le=65535, description="Port the service listens on.")
    args: list[ProcessText] = Field(default=[], description="Extra command-line arguments for the server.")

    _numbers_not_bools = field_validator("gpu", "tensor_parallel_size", "port", mode="before")(_not_bool)


class ClusterSpec(StrictModel):
    """cw's own fields of a config file: where and how the run is placed on the cluster."""

    image: str | None = Field(default=None, description="Trainer image; each framework has a pinned default.")
    gpu: int | None = Field(default=None, ge=0, le=64, description="GPUs per node for the trainer.")
    cpu: CpuQuantity | None = Field(default=None, description="CPU request and limit of each trainer pod.")
    memory: MemoryQuantity | None = Field(default=None, description="Memory request and limit of each trainer pod.")
    nodes: int = Field(default=1, ge=1, le=512, description="Trainer nodes (pods, one per node).")
    gpu_type: NameText | None = Field(
        default=None,
        max_length=200,
        description="GPU product the run expects, e.g. H100-80GB or NVIDIA-H200: its memory is what `cw estimate` and "
        "the pre-launch memory check compare with, and only nodes whose nvidia.com/gpu.product contains it are read. "
        "Not a scheduling constraint (use node_selector).",
    )
    gpu_memory: GpuMemorySize | None = Field(
        default=None,
        description="Memory of one GPU, e.g. 80GB, 80Gi or 141GB (a bare number is GiB), for `cw estimate` and the "
        "pre-launch memory check; wins over gpu_type and the nodes' labels (--gpu-memory wins over it).",
    )
    env: dict[str, EnvValue] = Field(
        default={}, description="Extra environment variables for every container of the run."
    )
    secrets: dict[str, DnsName | SecretRef] = Field(
        default={},
        description="Environment variable -> Secret name (or {name, key}), e.g. HF_TOKEN: hf-token.",
    )
    checkpoint_volume: DnsName | None = Field(
        default=None,
        description="PersistentVolumeClaim mounted at /checkpoints; the run writes in /checkpoints/<run> (outputs "
        "and resume). `none` states that the outputs may vanish with the pod.",
    )
    volumes: dict[DnsName, Annotated[VolumeMount, BeforeValidator(_volume_mount)]] = Field(
        default={},
        description="PersistentVolumeClaim -> mount path (or {path, read_only}) in every pod, read-only by default; "
        "e.g. datasets: /data.",
    )
    hf_cache_volume: DnsName | None = Field(
        default=None,
        description="PersistentVolumeClaim shared as the Hugging Face cache (HF_HOME=/hf-cache) by the trainer and "
        "the servers, so a model is downloaded once per cluster (ReadWriteMany when pods are on several nodes).",
    )
    node_selector: dict[str, LabelText] = Field(default={}, description="Node labels the pods must match.")
    annotations: dict[str, ProcessText] = Field(
        default={}, description="Annotations on every pod of the run (e.g. for sidecars or monitoring)."
    )
    tolerations: list[Toleration] = Field(default=[], description="Tolerations for every pod.")
    queue: DnsName | None = Field(default=None, description="Kueue LocalQueue to submit the Job to.")
    rdma: bool = Field(
        default=False,
        description="GPUDirect RDMA over InfiniBand/RoCE for the trainer pods: requests `rdma/ib: 1` and sets the "
        "NCCL/UCX variables CoreWeave documents (a variable in `env` wins).",
    )
    priority_class: DnsName | None = Field(default=None, description="PriorityClass of the pods.")
    service_account: DnsName | None = Field(default=None, description="ServiceAccount of the pods.")
    ttl_hours: float = Field(
        default=72, gt=0, le=24 * 365, description="Hours a finished Job (with status and logs) is kept."
    )
    backoff_limit: int = Field(default=2, ge=0, le=100, description="Retries of a failed trainer pod.")
    grace_period: int = Field(
        default=300,
        ge=1,
        le=24 * 3600,
        description="Seconds a trainer pod has after SIGTERM (preemption, eviction, node drain, deletion) to "
        "finish its step and save a checkpoint before it is killed (terminationGracePeriodSeconds); allow one step "
        "plus one checkpoint save.",
    )
    stall_timeout: int | None = Field(
        default=None,
        ge=10,
        le=7 * 24 * 3600,
        description="Seconds without a training step after which the trainer counts as stalled: every rank's stacks "
        "go to <run>/.cw/stacks-<time>/ and the pod restarts from the last checkpoint. Default: 5 times the "
        "slowest step so far, at least 600.",
    )
    startup_timeout: int | None = Field(
        default=None,
        ge=10,
        le=7 * 24 * 3600,
        description="Seconds from the trainer's start to its first step after which it counts as stalled (a hang in "
        "loading or NCCL set-up): stacks of every Python process go to <run>/.cw/stacks-<time>/ and the pod restarts. "
        "Default: not watched (loading and data preparation take from seconds to hours).",
    )
    eval: EvalBlock = Field(
        default=None,
        description="Evaluate the checkpoints with lm-evaluation-harness (docs/evaluation.md): {tasks: [...], "
        "metric: <task>/<metric>, limit, generation, ...}.",
    )
    jobset: Literal["auto"] | bool = Field(
        default="auto",
        description="Run as a JobSet: gang restarts of a multi-node trainer, and trainer and servers admitted by "
        "Kueue as one unit. `auto`: when the cluster serves JobSet and the run has several nodes, or servers and a "
        "`queue`; true: always (refused where JobSet is not installed); false: never.",
    )
    max_restarts: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Restarts of the whole gang of a JobSet run after a failure, each resuming from the last "
        "checkpoint; restarts after a disruption (preemption, node drain) do not count.",
    )
    shm_size: MemoryQuantity | None = Field(
        default=None, description="Size of /dev/shm (NCCL needs a large one); default: half the memory, at most 64Gi."
    )
    pull: bool = Field(default=False, description="Always pull the image (imagePullPolicy: Always).")
    files: list[ShippedName] = Field(
        default=[],
        description="Files (paths relative to the config) shipped in the ConfigMap to /etc/cw/<name>, e.g. reward "
        "functions (importable there) or templates; 1 MiB in all.",
    )
    code: Annotated[CodeSource, BeforeValidator(_code_source)] | None = Field(
        default=None,
        description="Your own code for the trainer: a local folder (`code: ./my_project`, shipped with the run) or "
        "`{git: URL, commit: SHA}`, at /cw-code in the pods and importable there (its src/ too); `install: true` "
        "pip-installs it.",
    )
    script: Annotated[str, BeforeValidator(_script_path)] | None = Field(
        default=None,
        description="Run your own training script instead of the framework's command (trl: `accelerate launch "
        "<script> --config <the mounted config>`), a path inside `code`, or next to the config without it; its own "
        "parser reads the config.",
    )
    pip: list[Requirement] = Field(
        default=[],
        description="Python requirements pip installs in every pod of the run before its command starts, e.g. "
        "a reward function's dependency; skipped offline when the image already satisfies them.",
    )
    services: dict[Literal["server", "reward"], ServiceResources] = Field(
        default={}, description="Per-service settings of multi-service types: server, reward."
    )
    gate: GateBlock = Field(
        default=None,
        description="The export gate: `cw export` refuses a checkpoint scoring worse than the base model by more "
        "than max_drop on metric (the evaluation's scores), unless --force.",
    )

    _numbers_not_bools = field_validator(
        "gpu", "nodes", "ttl_hours", "backoff_limit", "max_restarts", "grace_period", "stall_timeout",
        "startup_timeout", mode="before"
    )(_not_bool)

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        _check_variable_names(env)
        return env

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, secrets: dict[str, object]) -> dict[str, object]:
        _check_variable_names(secrets)
        return secrets

    @field_validator("node_selector", "annotations")
    @classmethod
    def _label_keys(cls, labels: dict[str, str]) -> dict[str, str]:
        for key in labels:  # a key has no location of its own in pydantic's errors: name it here
            if hidden := hidden_character(key, _HIDDEN_IN_LABEL):
                shown = key if len(key) <= 60 else key[:60] + "..."
                raise ValueError(f"the key {shown!r} holds {hidden}, {_INVISIBLE}; remove it (retype the key)")
        return labels

    @field_validator("nodes")
    @classmethod
    def _multi_node_needs_gpus(cls, nodes: int, info: ValidationInfo) -> int:
        if nodes > 1 and info.data.get("gpu") == 0:
            raise ValueError(
                f"{nodes} nodes with gpu: 0 would start {nodes} CPU-only trainers; multi-node training needs gpu >= 1"
            )
        return nodes

    @field_validator("files")
    @classmethod
    def _distinct_names(cls, files: list[str]) -> list[str]:

        names = [posixpath.basename(entry.rstrip("/")) for entry in files]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:  # one ConfigMap key each: the second would silently replace the first
            raise ValueError(f"two files are named {twice[0]!r}; each lands at /etc/cw/<name>, so rename one")
        return files

    @field_validator("volumes")
    @classmethod
    def _distinct_paths(cls, volumes: dict[str, VolumeMount]) -> dict[str, VolumeMount]:
        paths = sorted(mount.path for mount in volumes.values())
        for first, second in zip(paths, paths[1:]):
            if second == first or second.startswith(first + "/"):
                raise ValueError(f"two volumes are mounted at {first!r} and {second!r}; give each its own folder")
        return volumes

    @property
    def keeps_outputs(self) -> bool:
        """Whether the run's outputs outlive its pods (a real checkpoint volume)."""
        return self.checkpoint_volume not in (None, NO_VOLUME)

    @property
    def checkpoint_claim(self) -> str | None:
        """The PersistentVolumeClaim mounted at /checkpoints, or None for a scratch folder."""
        return self.checkpoint_volume if self.keeps_outputs else None

    def secret_refs(self) -> dict[str, SecretRef]:
        """Every secret as a full reference (name and key)."""
        refs: dict[str, SecretRef] = {}
        for variable, ref in self.secrets.items():
            if isinstance(ref, str):
                ref = SecretRef(name=ref)
            refs[variable] = SecretRef(name=ref.name, key=ref.key or variable)
        return refs


if not TYPE_CHECKING:  # each feature's block (`notify:`...) as a field of its own; the type checker sees the core
    ClusterSpec = with_feature_blocks(ClusterSpec)

CLUSTER_FIELDS: frozenset[str] = frozenset(
    alias or name for name, info in ClusterSpec.model_fields.items() for alias in (info.alias, name)
)


build_without_plugin_lookup(SecretRef, Toleration, VolumeMount, CodeSource, ServiceResources, ClusterSpec)
