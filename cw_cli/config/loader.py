"""From the user's YAML, `--set` values and flags to a validated run config.

Precedence, lowest first: framework defaults < config file < `--set` < flags.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cw_cli.config.models import CLUSTER_FIELDS, ClusterSpec
from cw_cli.config.yaml_source import YamlSource, load_yaml_config, parse_scalar
from cw_cli.errors import ConfigError
from cw_cli.frameworks.base import BaseTrainingFramework, TrainingType


@dataclass(frozen=True)
class FlagOverrides:
    """Command-line flags that override the config's cluster fields (None = not given)."""

    gpu: int | None = None
    cpu: str | None = None
    memory: str | None = None
    image: str | None = None
    nodes: int | None = None
    pull: bool | None = None

    def given(self) -> dict[str, Any]:
        """The flags the user actually passed."""
        return {name: value for name, value in self.__dict__.items() if value is not None}


@dataclass
class RunConfig:
    """A validated config: cw's cluster fields and the framework's native config.

    Attributes:
        path: The config file.
        cluster: Cluster fields with defaults, `--set` and flags applied.
        native: The framework's own config, cluster fields removed.
    """

    path: Path
    cluster: ClusterSpec
    native: dict[str, Any] = field(default_factory=dict)


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """Split a ``--set key.sub=value`` into a key path and a YAML-typed value.

    Raises:
        ConfigError: No ``=`` or an empty key.
    """
    key, sep, raw = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(
            [f"--set {assignment!r}: expected key=value"], hint="e.g. --set learning_rate=1e-5 or --set trl.beta=0.1"
        )
    return parts, parse_scalar(raw)


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


def _format_validation_error(error: ValidationError, source: YamlSource, origins: dict[str, str]) -> list[str]:
    issues = []
    for item in error.errors():
        loc = tuple(part for part in item["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        dotted = ".".join(str(part) for part in loc) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            siblings = _known_fields_at(loc[:-1])
            close = get_close_matches(str(loc[-1]), siblings, n=1)
            message = f"unknown field; did you mean `{close[0]}`?" if close else f"unknown field (known: {', '.join(siblings)})"
        issues.append(f"{_origin(loc, source, origins)}: `{dotted}`: {message}")
    return issues


def _known_fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names valid at a location, for "did you mean" on unknown keys."""
    from cw_cli.config.models import SecretRef, ServiceResources, Toleration

    nested = {"services": ServiceResources, "secrets": SecretRef, "tolerations": Toleration}
    model = nested.get(str(loc[0]), ClusterSpec) if loc else ClusterSpec
    return sorted(model.model_fields)


def load_run_config(
    path: Path,
    framework: BaseTrainingFramework,
    training_type: TrainingType,
    sets: list[str] | None = None,
    flags: FlagOverrides | None = None,
) -> RunConfig:
    """Read, merge and validate a run's config.

    Args:
        path: The user's YAML file.
        framework: The framework the run uses (defaults and native validation).
        training_type: The training method.
        sets: ``--set key=value`` assignments, applied in order.
        flags: Command-line flags, applied last.

    Returns:
        The validated config.

    Raises:
        ConfigError: Every problem found, each naming the file, line and field, with a fix.
    """
    source = load_yaml_config(path)
    data = copy.deepcopy(source.data)
    origins: dict[str, str] = {}
    for assignment in sets or []:
        parts, value = parse_set(assignment)
        _assign(data, parts, value, assignment)
        origins[parts[0]] = f"--set {assignment}"

    cluster_part = {key: value for key, value in data.items() if key in CLUSTER_FIELDS}
    native = {key: value for key, value in data.items() if key not in CLUSTER_FIELDS}
    issues: list[str] = []
    for key in native:
        close = get_close_matches(str(key), CLUSTER_FIELDS, n=1, cutoff=0.75)
        if close and str(key) not in framework.known_native_keys():
            issues.append(f"{_origin((key,), source, origins)}: `{key}`: unknown field; did you mean `{close[0]}`?")

    for name, value in (flags or FlagOverrides()).given().items():
        cluster_part[name] = value
        origins[name] = f"--{name}"
    defaults = framework.resources
    for name in ("gpu", "cpu", "memory"):
        if cluster_part.get(name) is None and getattr(defaults, name) is not None:
            cluster_part[name] = getattr(defaults, name)

    cluster: ClusterSpec | None = None
    try:
        cluster = ClusterSpec.model_validate(cluster_part)
    except ValidationError as exc:
        issues.extend(_format_validation_error(exc, source, origins))

    native = deep_merge(framework.native_defaults(training_type), native)
    for problem in framework.validate_config(native, training_type):
        # Messages name their field in backticks; point at that key's line when the file has it.
        named = re.search(r"`([A-Za-z_][\w.]*)", problem)
        key_path = tuple(named.group(1).split(".")) if named else ()
        issues.append(f"{source.where(key_path) if key_path else path}: {problem}")
    if issues or cluster is None:
        raise ConfigError(issues, hint="fix the fields above (run `cw schema` for the full reference)")
    return RunConfig(path=path, cluster=cluster, native=native)
