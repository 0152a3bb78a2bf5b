"""From the user's YAML, `--set` values and flags to a validated run config.

Precedence, lowest first: framework defaults < config file < `--set` < flags.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from cw_cli.config.model_building import OnDemand
from cw_cli.config.models import CLUSTER_FIELDS, ClusterSpec, image_problem
from cw_cli.config.options import LaunchOptions
from cw_cli.config.written_forms import WrittenForms
from cw_cli.config.yaml_source import MAX_DEPTH, KeyPath, YamlSource, load_config_file, parse_scalar
from cw_cli.errors import ConfigError
from cw_cli.types import NativeConfigRules, RunConfig, TrainingType

__all__ = ["RunConfig", "load_run_config", "parse_set"]


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """Split a ``--set key.sub=value`` into a key path and a YAML-typed value.

    Raises:
        ConfigError: No ``=``, an empty key, a key nested too deep, or a value a config may not
            hold (see :func:`~cw_cli.config.yaml_source.parse_scalar`).
    """
    key, sep, raw = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(
            [f"--set {assignment!r}: expected key=value"], hint="e.g. --set learning_rate=1e-5 or --set trl.beta=0.1"
        )
    shown = assignment if len(assignment) <= 80 else assignment[:80] + "..."
    if len(parts) > MAX_DEPTH:  # same bound as a file's nesting
        raise ConfigError([f"--set {shown!r}: the key is nested more than {MAX_DEPTH} levels deep"])
    try:
        return parts, parse_scalar(raw)
    except ValueError as exc:
        raise ConfigError([f"--set {shown!r}: {exc}"], hint="quote the value to pass it as a string") from None


def _assign(data: dict[str, Any], parts: list[str], value: Any, assignment: str) -> None:
    target = data
    for part in parts[:-1]:
        child = target.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError([f"--set {assignment!r}: `{part}` is not a mapping in the config"])
        target = child
    target[parts[-1]] = value


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated by ``override``, merging nested mappings."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _origin(key_path: tuple[Any, ...], source: YamlSource, origins: dict[str, str]) -> str:
    top = str(key_path[0]) if key_path else ""
    return origins.get(top) or source.where(key_path)


def _format_validation_error(
    error: ValidationError, source: YamlSource, origins: dict[str, str], reported: frozenset[KeyPath] = frozenset()
) -> list[str]:
    issues = []
    for item in error.errors():
        loc = tuple(part for part in item["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        if loc in reported:  # refused already, with its own fix (`gpu: 1:30`, `--set nodes=`)
            continue
        dotted = ".".join(str(part) for part in loc) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            siblings = _known_fields_at(loc[:-1])
            from difflib import get_close_matches  # only for a config with a mistake

            close = get_close_matches(str(loc[-1]), siblings, n=1)
            message = f"unknown field; did you mean `{close[0]}`?" if close else f"unknown field (known: {', '.join(siblings)})"
        issues.append(f"{_origin(loc, source, origins)}: `{dotted}`: {message}")
    return issues


def _known_fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names valid at a location, for "did you mean" on unknown keys."""
    from cw_cli.config.models import SecretRef, ServiceResources, Toleration

    nested: dict[str, type[BaseModel]] = {"services": ServiceResources, "secrets": SecretRef, "tolerations": Toleration}
    block = ClusterSpec.model_fields.get(str(loc[0])) if loc else None
    on_demand = next((m for m in (block.metadata if block else []) if isinstance(m, OnDemand)), None)
    if on_demand is not None:  # eval, notify, gate: their own model's fields
        return sorted(on_demand.model().model_fields)
    model = nested.get(str(loc[0]), ClusterSpec) if loc else ClusterSpec
    return sorted(model.model_fields)


def load_run_config(
    path: Path,
    framework: NativeConfigRules,
    training_type: TrainingType,
    sets: list[str] | None = None,
    flags: LaunchOptions | None = None,
    source: YamlSource | None = None,
    host_env: Mapping[str, str] | None = None,
    launch: bool = True,
) -> RunConfig:
    """Read, merge and validate a run's config.

    Args:
        path: The user's YAML file.
        framework: The framework the run uses (defaults and native validation).
        training_type: The training method.
        sets: ``--set key=value`` assignments, applied in order.
        flags: Command-line flags, applied last.
        source: The config already parsed (e.g. a mapping given to :mod:`cw_cli.api`); ``path``
            then only names it and anchors its relative paths.
        host_env: The environment the trainer inherits when it runs on this machine
            (``--local``): a variable a setting needs may come from there instead of ``secrets``.
        launch: The config is read for a launch; False (an estimate) skips what only the pods
            need (the Secrets a setting needs).

    Returns:
        The validated config.

    Raises:
        ConfigError: Every problem found, each naming the file, line and field, with a fix.
    """
    source = source if source is not None else load_config_file(path)
    flags = flags or LaunchOptions()
    data, origins, written = _apply_sets(source, sets or [])
    claimed = framework.claims_native_keys(data)
    cluster_part = {key: value for key, value in data.items() if key in CLUSTER_FIELDS and key not in claimed}
    native = {key: value for key, value in data.items() if key not in CLUSTER_FIELDS or key in claimed}
    issues, reported = written.problems(cluster_part, set(flags.cluster_overrides()))
    issues += _misplaced_cluster_keys(native, claimed, framework, source, origins)
    for key_path, problem in _image_problems(cluster_part):  # before the flags: only what the config writes
        issues.append(f"{_origin(key_path, source, origins)}: `{'.'.join(key_path)}`: {problem}")
    issues += _apply_flags(cluster_part, flags, origins)
    native = deep_merge(framework.native_defaults(training_type), native)
    # A script of the user's reads the file with its own parser: cw neither renames keys for the
    # framework's command nor checks them against it.
    own_script = cluster_part.get("script") is not None and framework.script_reads_its_own_keys
    notices: list[str] = []
    if not own_script:
        native, upgraded = framework.upgrade_config(native, training_type)
        notices += upgraded
    issues += _size_from_framework(cluster_part, framework, native, training_type, path, source, origins, notices)
    if isinstance(cluster_part.get("eval"), dict):  # a verifiers run scores the environment it trains on
        from cw_cli.config.eval_environments import with_trained_environment

        cluster_part["eval"] = with_trained_environment(cluster_part["eval"], framework.trained_environment(native))
    cluster, problems = _validate_cluster(cluster_part, source, origins, frozenset(reported))
    issues += problems
    if cluster is not None:
        issues += _environment_problems(cluster, framework, native, host_env, launch, source, origins)
    if cluster is not None and cluster.eval is not None:  # task names and the metric, before anything is created
        from cw_cli.config.eval_tasks import check_eval

        issues += [f"{_origin(('eval',), source, origins)}: {p}" for p in check_eval(cluster.eval, path.parent)[0]]
    if not own_script:
        issues += _native_problems(framework.validate_config(native, training_type), source, path)
    if issues or cluster is None:
        raise ConfigError(issues, hint="fix the fields above (run `cw schema` for the full reference)")
    return RunConfig(path=path, cluster=cluster, native=native, notices=notices)


def _apply_sets(source: YamlSource, sets: list[str]) -> tuple[dict[str, Any], dict[str, str], WrittenForms]:
    """The config's data with the ``--set`` assignments applied in order, the ``--set`` behind each
    top-level key they changed, and how values were written."""
    data = copy.deepcopy(source.data)
    origins: dict[str, str] = {}
    written = WrittenForms({key: (text, source.where(key)) for key, text in source.yaml11_numbers.items()}, [])
    for assignment in sets:
        parts, value = parse_set(assignment)
        _assign(data, parts, value, assignment)
        origins[parts[0]] = f"--set {assignment}"
        written.note_set(parts, value, assignment)
    return data, origins, written


def _misplaced_cluster_keys(
    native: dict[str, Any], claimed: set[str], framework: NativeConfigRules, source: YamlSource, origins: dict[str, str]
) -> list[str]:
    """A key the framework does not know that looks like a misspelt cw field (``gpus:``)."""
    issues = []
    for key in native:
        if key in claimed or str(key) in framework.known_native_keys():
            continue
        from difflib import get_close_matches  # only for a key the framework does not know

        close = get_close_matches(str(key), CLUSTER_FIELDS, n=1, cutoff=0.75)
        if close:
            issues.append(f"{_origin((key,), source, origins)}: `{key}`: unknown field; did you mean `{close[0]}`?")
    return issues


def _apply_flags(cluster_part: dict[str, Any], flags: LaunchOptions, origins: dict[str, str]) -> list[str]:
    """Set the flags given over cw's fields; the problems of a bad ``--image``."""
    issues = []
    for name, value in flags.cluster_overrides().items():
        cluster_part[name] = value
        origins[name] = f"--{name}"
        if name == "image" and (bad_image := image_problem(value)):
            issues.append(f"--image: {bad_image}")
    return issues


def _size_from_framework(
    cluster_part: dict[str, Any],
    framework: NativeConfigRules,
    native: dict[str, Any],
    training_type: TrainingType,
    path: Path,
    source: YamlSource,
    origins: dict[str, str],
    notices: list[str],
) -> list[str]:
    """Fill cw's sizes from what the native config states, then from the framework's defaults.

    Returns:
        One issue per size the config states both ways, differently.
    """
    issues = []
    for field_path, (wanted, native_key) in framework.native_resources(native, training_type, path.parent).items():
        mismatch = _size_from_native(cluster_part, field_path, wanted, native_key, origins, notices)
        if mismatch:
            issues.append(f"{_origin(field_path, source, origins)}: {mismatch}")
    defaults = framework.resources
    for name in ("gpu", "cpu", "memory"):
        if cluster_part.get(name) is None and getattr(defaults, name) is not None:
            cluster_part[name] = getattr(defaults, name)
    return issues


def _validate_cluster(
    cluster_part: dict[str, Any], source: YamlSource, origins: dict[str, str], reported: frozenset[KeyPath]
) -> tuple[ClusterSpec | None, list[str]]:
    """cw's fields as a :class:`ClusterSpec`, or None and the problems (``reported``: refused already)."""
    try:
        return ClusterSpec.model_validate(cluster_part), []
    except ValidationError as exc:
        return None, _format_validation_error(exc, source, origins, reported)


def _environment_problems(
    cluster: ClusterSpec,
    framework: NativeConfigRules,
    native: dict[str, Any],
    host_env: Mapping[str, str] | None,
    launch: bool,
    source: YamlSource,
    origins: dict[str, str],
) -> list[str]:
    """:func:`_environment_conflicts`, each at the line of the field to change."""
    conflicts = _environment_conflicts(cluster, framework, native, host_env, launch)
    return [f"{_origin((key,), source, origins)}: {problem}" for key, problem in conflicts]


def _native_problems(problems: list[str], source: YamlSource, path: Path) -> list[str]:
    """The framework's own problems with its config, each at its key's line when the file has it."""
    issues = []
    for problem in problems:
        # Messages name their field in backticks; point at that key's line when the file has it.
        named = re.search(r"`([A-Za-z_][\w.]*)", problem)
        key_path = tuple(named.group(1).split(".")) if named else ()
        issues.append(f"{source.where(key_path) if key_path else path}: {problem}")
    return issues


def _image_problems(cluster_part: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """(key path, problem) for each ``image:`` the config itself writes (trainer and services)."""
    found: list[tuple[tuple[str, ...], Any]] = [(("image",), cluster_part.get("image"))]
    services = cluster_part.get("services")
    if isinstance(services, dict):
        found += [
            (("services", str(role), "image"), spec.get("image"))
            for role, spec in services.items()
            if isinstance(spec, dict)
        ]
    return [(key_path, problem) for key_path, value in found if (problem := image_problem(value))]


def _size_from_native(
    cluster_part: dict[str, Any],
    field_path: tuple[str, ...],
    wanted: int,
    native_key: str,
    origins: dict[str, str],
    notices: list[str],
) -> str | None:
    """Take a size the native config states, unless a cw field or flag sets it (returns a conflict)."""
    node = cluster_part
    for key in field_path[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            return None  # malformed; the model's validation reports it
        node = child
    current = node.get(field_path[-1])
    dotted = ".".join(field_path)
    if current is None:
        node[field_path[-1]] = wanted
        return None
    if current == wanted:
        return None
    origin = origins.get(field_path[0], "")
    if origin.startswith("--"):
        notices.append(f"{origin} sets {dotted} to {current}, over the config's `{native_key}: {wanted}`")
        return None
    return (
        f"`{dotted}: {current}` disagrees with the framework's own `{native_key}: {wanted}`; remove `{dotted}` "
        f"(cw sizes the pod from `{native_key}`) or make them equal (a flag such as --gpu overrides both)"
    )


#: Variables cw or the scheduler owns in every pod.
_RESERVED_ENV = {
    "CUDA_VISIBLE_DEVICES": "the GPUs a pod sees are the ones Kubernetes gives it; set `gpu` (or --gpu) instead",
    "NVIDIA_VISIBLE_DEVICES": "the GPUs a pod sees are the ones Kubernetes gives it; set `gpu` (or --gpu) instead",
}


def _environment_conflicts(
    cluster: ClusterSpec,
    framework: NativeConfigRules,
    native: dict[str, Any],
    host_env: Mapping[str, str] | None = None,
    launch: bool = True,
) -> list[tuple[str, str]]:
    """(cw field, problem) for environment settings that cannot work in the pods (or, with
    ``host_env``, in the local process that inherits that environment)."""
    problems = []
    for variable, why in _RESERVED_ENV.items():
        if variable in cluster.env:
            problems.append(("env", f"`env.{variable}`: {why}"))
    if cluster.hf_cache_volume and "HF_HOME" in cluster.env:
        problems.append(("env", "`env.HF_HOME` and `hf_cache_volume` both set the Hugging Face cache; keep one"))
    available = set(cluster.secrets) | set(cluster.env) | {name for name, value in (host_env or {}).items() if value}
    for variable, setting in (framework.secrets_needed(native) if launch else {}).items():
        if variable in available or (variable == "HF_TOKEN" and "HUGGING_FACE_HUB_TOKEN" in available):
            continue
        if host_env is not None:
            problem = (f"`{setting}` needs {variable}, and neither your environment nor `secrets` has it; "
                       f"export {variable} before `--local`, or drop the setting")  # fmt: skip
        else:
            problem = (f"`{setting}` needs {variable} in the pods, and `secrets` has none; add "
                       f"`secrets: {{{variable}: <Secret name>}}`, or drop the setting")  # fmt: skip
        problems.append(("secrets", problem))
    return problems
