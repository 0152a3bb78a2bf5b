"""From a run's config to its memory estimate: what `cw estimate` and the pre-launch check run.

:func:`estimate_run` ties three readers together, each pure apart from reading local files (and,
only when asked, one hub download):

- the framework's own ``training_setup`` (any
  :class:`~cw_cli.estimate.describes_training.DescribesTraining`: every built-in in its
  package, e.g. ``cw_cli/frameworks/trl/setup.py``, and any plugin that implements it) reads its
  config and cw's cluster fields into a :class:`~cw_cli.estimate.native_setup.RunSetup`: a
  :class:`~cw_cli.estimate.memory.TrainingSetup` and an optional
  :class:`~cw_cli.estimate.vllm.VllmSetup` (the built-ins' mapping is documented in docs/estimate.md).
- :func:`~cw_cli.estimate.model_config.find_model_config` locates the model's ``config.json``:
  a local folder, the Hugging Face cache, and the hub only when allowed and online.
- :func:`~cw_cli.estimate.gpu_memory.resolve_gpu_memory` picks one GPU's memory: the
  ``--gpu-memory`` flag, the ``gpu_memory``/``gpu_type`` fields, else the GPU nodes' labels (a
  callable that lists them; none in a dry run).

The result is a :class:`RunEstimate` (with suggestions in the framework's own keys, its
:class:`~cw_cli.estimate.words.ConfigWords`: :mod:`~cw_cli.estimate.suggested_changes`), which
never raises for a run it cannot estimate (a framework without a training setup, a model not found, an unknown
architecture): it says why in ``skipped`` and ``notes`` instead. Nothing here knows a framework
by name, prints or talks to a cluster itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field
from msgspec.structs import asdict, replace

from cw_cli.config.local_files import check_shippable
from cw_cli.config.options import EstimateOptions
from cw_cli.errors import ConfigError
from cw_cli.estimate.gpu_memory import GpuChoice, given_gpu_memory, resolve_gpu_memory
from cw_cli.estimate.model_config import check_model_config, find_model_config
from cw_cli.estimate.suggested_changes import applies, config_changes
from cw_cli.labels import TRAINER, VLLM
from cw_cli.types import TrainingType

if TYPE_CHECKING:  # types only: a launch whose model is not found here never loads the memory model
    from cw_cli.config.models import ClusterSpec
    from cw_cli.estimate.describes_training import DescribesTraining
    from cw_cli.estimate.fit import Suggestion, Verdict
    from cw_cli.estimate.memory import Estimate, TrainingSetup
    from cw_cli.estimate.native_setup import RunSetup
    from cw_cli.estimate.vllm import VllmSetup
    from cw_cli.estimate.words import ConfigWords

GIB = 1024**3
#: A refusal fires only when a run clearly cannot fit: past the estimate's error band
#: (docs/estimate.md, "What was compared, and how close").
REFUSAL_HEADROOM = -0.15
#: Keys of :meth:`RunEstimate.to_dict` (``-o json``), in order; scripts may rely on them.
JSON_KEYS = (
    "framework", "type", "model", "model_config", "estimated", "skipped",
    "model_type", "parameters", "active_parameters", "trainable_parameters", "counting",
    "gpu_memory_bytes", "gpu_product", "gpu_memory_source",
    "trainer", "vllm", "verdict", "suggestions", "setup", "vllm_setup", "notes", "unmodelled",
)  # fmt: skip
#: Keys of ``verdict`` and of each item of ``verdict.roles`` and ``suggestions``.
VERDICT_KEYS = ("fits", "clearly_too_big", "refusal_headroom", "worst_ratio", "roles")
ROLE_KEYS = ("role", "fits", "required_bytes", "available_bytes", "ratio", "reason")
SUGGESTION_KEYS = ("key", "description", "changes", "per_gpu_bytes", "ratio")


class RunEstimate(Struct, frozen=True):
    """A run's memory estimate with its verdict, or why there is none.

    Attributes:
        framework: The framework.
        training_type: The training type.
        model: The model the config names.
        model_config: Where its config.json was read (None when not found).
        setup: The trainer's setup read from the config (None when not read).
        vllm_setup: The vLLM engine's setup, if any.
        estimate: The per-GPU breakdown (None when skipped).
        gpu: One GPU's memory and where it came from.
        verdict: The fit at 0 headroom (None without an estimate or a GPU size).
        refusal: The fit within the estimate's error band (``REFUSAL_HEADROOM``); a launch is
            refused when this does not fit.
        suggestions: Changes that make the run fit, each re-estimated.
        changes: For each suggestion, what to write in the config (same order).
        roles: The roles checked (``("vllm",)`` for a servers-only run).
        notes: Assumptions, and why anything is unknown.
        skipped: Why there is no estimate (None when there is one).
        unmodelled: Settings of the run the memory model does not count: the estimate is
            shown, but it never refuses a launch.
    """

    framework: str
    training_type: str
    model: str | None
    model_config: str | None = None
    setup: TrainingSetup | None = None
    vllm_setup: VllmSetup | None = None
    estimate: Estimate | None = None
    gpu: GpuChoice = field(default_factory=lambda: GpuChoice(None, None))
    verdict: Verdict | None = None
    refusal: Verdict | None = None
    suggestions: tuple[Suggestion, ...] = ()
    changes: tuple[tuple[str, ...], ...] = ()
    roles: tuple[str, ...] = (TRAINER, VLLM)
    notes: tuple[str, ...] = ()
    skipped: str | None = None
    unmodelled: tuple[str, ...] = ()

    @property
    def clearly_too_big(self) -> bool:
        """Whether a checked role needs more than its GPU even within the error band (never
        when the run has a setting the model does not count: a check that refuses a run its
        authors trained is worse than none)."""
        if self.refusal is None or self.unmodelled:
            return False
        return any(not r.fits for r in self.refusal.roles if r.role in self.roles)

    @property
    def fits(self) -> bool | None:
        """Whether every checked role fits (None when unknown)."""
        if self.verdict is None:
            return None
        return all(r.fits for r in self.verdict.roles if r.role in self.roles)

    def summary(self) -> str:
        """One line: what each role needs per GPU against the GPU, or why there is no estimate."""
        if self.estimate is None:
            return f"memory estimate skipped: {self.skipped}"
        gpu = self.gpu.memory
        parts = []
        for role, need in self._needs():
            text = f"{_ROLE_NAMES.get(role, role)} {need / GIB:.1f} GiB"
            if gpu is not None:
                text += f" ({need / gpu.bytes:.0%})"
            parts.append(text)
        where = f" of {gpu.bytes / GIB:.1f} GiB per GPU" if gpu else " per GPU (GPU memory unknown)"
        if self.unmodelled and self.fits is False:
            verdict = f": does not fit by this count, which leaves out {'; '.join(self.unmodelled)} (never refused for that)"
        else:
            verdict = "" if self.fits is None else ": fits" if self.fits else (
                ": does not fit" + (" (clearly)" if self.clearly_too_big else " (within the estimate's error band)"))
            if self.unmodelled:
                verdict += f" (not counted: {'; '.join(self.unmodelled)})"
        return f"memory estimate: {', '.join(parts)}{where}{verdict}"

    def _needs(self) -> list[tuple[str, int]]:
        assert self.estimate is not None
        if self.verdict is not None:
            return [(r.role, r.required_bytes) for r in self.verdict.roles if r.role in self.roles]
        needs = []
        if TRAINER in self.roles:
            needs.append((TRAINER, self.estimate.trainer.per_gpu_bytes))
        if self.estimate.vllm is not None and VLLM in self.roles:
            needs.append((VLLM, self.estimate.vllm.min_per_gpu_bytes))
        return needs

    def to_dict(self) -> dict[str, Any]:
        """The ``-o json`` form: :data:`JSON_KEYS`, each always present (null when unknown)."""
        est = self.estimate.to_dict() if self.estimate is not None else {}
        gpu = self.gpu.memory
        verdict = None
        if self.verdict is not None and self.refusal is not None:
            verdict = {
                "fits": bool(self.fits),
                "clearly_too_big": self.clearly_too_big,
                "refusal_headroom": REFUSAL_HEADROOM,
                "worst_ratio": max(r.ratio for r in self.verdict.roles if r.role in self.roles),
                "roles": [
                    {"role": r.role, "fits": r.fits, "required_bytes": r.required_bytes,
                     "available_bytes": r.available_bytes, "ratio": r.ratio, "reason": r.reason}
                    for r in self.verdict.roles if r.role in self.roles
                ],
            }  # fmt: skip
        data = {
            "framework": self.framework,
            "type": self.training_type,
            "model": self.model,
            "model_config": self.model_config,
            "estimated": self.estimate is not None,
            "skipped": self.skipped,
            "model_type": est.get("model_type"),
            "parameters": est.get("parameters"),
            "active_parameters": est.get("active_parameters"),
            "trainable_parameters": est.get("trainable_parameters"),
            "counting": est.get("counting"),
            "gpu_memory_bytes": gpu.bytes if gpu else None,
            "gpu_product": gpu.product if gpu else None,
            "gpu_memory_source": self.gpu.source,
            "trainer": est.get("trainer") if TRAINER in self.roles else None,
            "vllm": est.get("vllm"),
            "verdict": verdict,
            "suggestions": [
                {"key": s.key, "description": s.description, "changes": list(c), "per_gpu_bytes": s.per_gpu_bytes,
                 "ratio": s.ratio}
                for s, c in zip(self.suggestions, self.changes)
            ],
            "setup": _setup_dict(self.setup),
            "vllm_setup": asdict(self.vllm_setup) if self.vllm_setup is not None else None,
            "notes": list(self.notes),
            "unmodelled": list(self.unmodelled),
        }  # fmt: skip
        return {key: data[key] for key in JSON_KEYS}


_ROLE_NAMES = {TRAINER: "trainer", VLLM: "vLLM"}


def _setup_dict(setup: TrainingSetup | None) -> dict[str, Any] | None:
    if setup is None:
        return None
    data = asdict(setup)
    if not isinstance(setup.lora_targets, str):
        data["lora_targets"] = list(setup.lora_targets)
    return data


def _check_listed_files(cluster: ClusterSpec, base_dir: Path | None) -> None:
    """Refuse the ``files:`` a launch would refuse (missing, a folder, a FIFO, /proc/kmsg, over
    1 MiB), from their metadata alone.

    Raises:
        ConfigError: One line per file, as a launch says it.
    """
    problems = []
    for relative in cluster.files:
        try:
            check_shippable((base_dir or Path.cwd()) / Path(relative).expanduser(), "`files`")
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(problems)


def estimate_run(
    framework: DescribesTraining,
    training_type: str | TrainingType,
    native: Mapping[str, Any],
    cluster: ClusterSpec,
    base_dir: Path | None = None,
    options: EstimateOptions | None = None,
    *,
    nodes: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
    services_only: bool = False,
    cache_dirs: Iterable[Path] | None = None,
) -> RunEstimate:
    """Estimate a run as configured: setup, model config, GPU memory, verdict and suggestions.

    Never raises for a run it cannot estimate: ``skipped`` says why (a framework that gives no
    training setup, a trainer without GPUs, a model whose config.json is not found, an unknown architecture
    without ``allow_meta_device``). A config.json no model could have is refused instead
    (:func:`~cw_cli.estimate.model_config.check_model_config`).

    Args:
        framework: The framework (``PlannedRun.request.framework``): it reads its own config.
        training_type: ``sft``, ``dpo``, ``grpo``... (a :class:`~cw_cli.types.TrainingType` too).
        native: The framework's own config.
        cluster: cw's cluster fields.
        base_dir: The config's folder (local model folders, DeepSpeed / Accelerate files).
        options: How to estimate (:class:`~cw_cli.config.options.EstimateOptions`: ``gpu_memory``,
            ``hub``, ``suggest``, ``allow_meta_device``; the launch path disallows the meta device).
        nodes: Lists the cluster's nodes; asked only when the estimate exists and no GPU size
            was given (None: never).
        services_only: Only the servers run (``--services``): only the vLLM role is checked.
        cache_dirs: Hugging Face caches to search (default :func:`hf_cache_dirs`).

    Raises:
        ValueError: ``gpu_memory`` is not a memory size.
        ConfigError: The model's config.json is a device or FIFO, too large or deep, or has a
            dimension no model has (``num_hidden_layers: 1e12``, zero heads, a list).
    """
    how = options or EstimateOptions()
    kind = TrainingType(getattr(training_type, "value", training_type))
    _check_listed_files(cluster, base_dir)  # what a launch refuses, an estimate refuses
    base = RunEstimate(framework.name, kind.value, None, roles=(VLLM,) if services_only else (TRAINER, VLLM))
    given_gpu_memory(how.gpu_memory)  # a bad flag fails before anything else
    try:
        base, config = _model_config(framework, native, cluster, base_dir, how.hub, cache_dirs, base)
        base, read = _training_setup(framework, kind, native, cluster, base_dir, config, how, base)
        if services_only and read.vllm is None:
            raise _Skipped(replace(base, skipped="the run has no vLLM server to estimate", notes=read.notes))
        return _judged(base, config, read, resolve_gpu_memory(how.gpu_memory, cluster, nodes), framework.words,
                       suggest=how.suggest, services_only=services_only)  # fmt: skip
    except _Skipped as skipped:
        return skipped.estimate


class _Skipped(Exception):
    """No estimate: ``estimate`` says why (``skipped``)."""

    def __init__(self, estimate: RunEstimate) -> None:
        super().__init__(estimate.skipped)
        self.estimate = estimate


def _model_config(
    framework: DescribesTraining, native: Mapping[str, Any], cluster: ClusterSpec, base_dir: Path | None, hub: bool,
    cache_dirs: Iterable[Path] | None, base: RunEstimate,
) -> tuple[RunEstimate, dict[str, Any]]:  # fmt: skip
    """The model's config.json, after the cheap refusals (a launch whose model is not here pays
    for a few stat() calls only).

    Raises:
        _Skipped: No training setup, no GPU, no model, or its config.json is not found.
    """
    if not framework.describes_training:
        raise _Skipped(replace(base, skipped=f"no estimate for framework {framework.name!r}: it describes no training "
                               "setup (a plugin may: docs/plugins.md)"))  # fmt: skip
    key = framework.model_key
    model = native.get(key)
    model = str(model) if isinstance(model, (str, Path)) and str(model) else None
    base = replace(base, model=model)
    if (cluster.gpu or 0) == 0:
        raise _Skipped(replace(base, skipped="the trainer has no GPU (gpu: 0)"))
    if model is None:
        raise _Skipped(replace(base, skipped=f"the config names no model (`{key}`)"))
    revision_key = framework.model_revision_key
    revision = native.get(revision_key) if revision_key else None
    lookup = find_model_config(model, base_dir, hub=hub, revision=str(revision) if revision else None,
                               cache_dirs=cache_dirs)  # fmt: skip
    if lookup.config is None:
        raise _Skipped(replace(base, skipped=lookup.note))
    check_model_config(lookup.config, lookup.source or model)  # a hostile one: refused, never sized
    return replace(base, model_config=lookup.source), lookup.config


def _training_setup(
    framework: DescribesTraining, kind: TrainingType, native: Mapping[str, Any], cluster: ClusterSpec,
    base_dir: Path | None, config: dict[str, Any], how: EstimateOptions, base: RunEstimate,
) -> tuple[RunEstimate, RunSetup]:  # fmt: skip
    """The framework's reading of its config (most of the work: only now that there is a model to count).

    Raises:
        _Skipped: An architecture without a formula (and no meta device), or no setup given.
    """
    from cw_cli.estimate.params import SUPPORTED_MODEL_TYPES

    # The family alone: building it here would raise outside the estimate's skip for a missing field.
    if str(config.get("model_type", "")) not in SUPPORTED_MODEL_TYPES and not how.allow_meta_device:
        raise _Skipped(replace(base, skipped=f"model_type {config.get('model_type')!r} has no formula in cw; `cw "
                               "estimate` counts it with transformers on the meta device"))  # fmt: skip
    read = framework.training_setup(native, kind, cluster, base_dir, config)  # dtype: auto, PEFT's default targets
    if read is None:
        raise _Skipped(replace(base, skipped=f"no estimate for framework {framework.name!r}: it gave no training "
                               f"setup for `{kind.value}`"))  # fmt: skip
    return replace(base, setup=read.setup, vllm_setup=read.vllm, unmodelled=read.unmodelled), read


def _judged(
    base: RunEstimate, config: dict[str, Any], read: RunSetup, gpu: GpuChoice, words: ConfigWords | None, *,
    suggest: bool, services_only: bool,
) -> RunEstimate:  # fmt: skip
    """The estimate, its verdict against one GPU's memory and, when it does not fit, the changes that would."""
    from cw_cli.estimate.fit import fits, suggestions
    from cw_cli.estimate.memory import estimate_memory
    from cw_cli.estimate.params import UnknownArchitectureError

    memory = gpu.memory.bytes if gpu.memory else None
    try:
        estimate = estimate_memory(config, read.setup, read.vllm, memory)
    except (UnknownArchitectureError, ValueError) as exc:
        return replace(base, gpu=gpu, skipped=f"cannot estimate {base.model}: {exc}", notes=read.notes + gpu.notes)
    base = replace(base, estimate=estimate, gpu=gpu, notes=read.notes + estimate.notes + gpu.notes)
    if memory is None:
        return base
    base = replace(base, verdict=fits(estimate, memory), refusal=fits(estimate, memory, headroom=REFUSAL_HEADROOM))
    if suggest and not base.fits:
        kind = base.training_type
        written = [(s, config_changes(words, kind, read.setup, read.vllm, s))
                   for s in suggestions(config, read.setup, memory, read.vllm) if applies(s, services_only)]
        found = [(s, c) for s, c in written if c is not None]  # a change the framework cannot make: dropped
        base = replace(base, suggestions=tuple(s for s, _ in found), changes=tuple(tuple(c) for _, c in found))
    return base
