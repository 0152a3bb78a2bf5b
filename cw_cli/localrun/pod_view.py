"""The rendered trainer pod as this machine sees it (for ``cw <fw> <type> CONFIG --local``).

Pure reading of a plan's manifests: the trainer's container and owner, the ConfigMap files
mounted into it, a local folder for every mount (``/checkpoints`` first of all) and those mount
paths rewritten wherever they appear, the container's environment with ``$(VAR)`` expanded the way
the kubelet does, its command, and the framework config with a local run's overrides.
:mod:`cw_cli.localrun.runner` writes and runs what this computes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from cw_cli.labels import COMPLETION_INDEX_ANNOTATION, TRAINER

TRAINER_CONTAINER = TRAINER
CONFIG_MOUNT = "/etc/cw"
CHECKPOINT_MOUNT = "/checkpoints"
CONFIG_KEY = "config.yaml"
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
_SKIP_MOUNTS = ("/dev/shm",)
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class LocalRunError(RuntimeError):
    """The manifests cannot be run locally (no trainer, multi-node, missing ConfigMap...)."""


def find_trainer(manifests: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trainer Job and its ``trainer`` container.

    Raises:
        LocalRunError: No Job has a container named ``trainer``.
    """
    from cw_cli.render.workload import OWNERS

    for manifest in manifests:
        owner = OWNERS.get(str(manifest.get("kind")))  # the trainer's owner (a --local plan's is a Job)
        template = owner.trainer_template(dict(manifest)) if owner is not None else None
        for container in ((template or {}).get("spec") or {}).get("containers", []):
            if container.get("name") == TRAINER_CONTAINER:
                return dict(manifest), dict(container)
    raise LocalRunError("the manifests have no Job with a container named 'trainer' (was it rendered with --services?)")


def pod_spec(job: Mapping[str, Any]) -> dict[str, Any]:
    return dict(job.get("spec", {}).get("template", {}).get("spec", {}))


def find_configmaps(manifests: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """ConfigMaps of the plan by name."""
    return {m["metadata"]["name"]: dict(m) for m in manifests if m.get("kind") == "ConfigMap"}


def volume_sources(job: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The Job's pod volumes by name."""
    return {v["name"]: dict(v) for v in pod_spec(job).get("volumes", [])}


def configmap_files(configmap: Mapping[str, Any], items: list[Mapping[str, str]] | None = None) -> dict[str, str | bytes]:
    """The files a ConfigMap volume shows: path in the mount -> text (``data``) or bytes (``binaryData``).

    With ``items`` only the listed keys appear, each at its ``path`` (as the kubelet projects them).
    """
    import base64

    by_key: dict[str, str | bytes] = dict(configmap.get("data") or {})
    by_key.update({key: base64.b64decode(value) for key, value in (configmap.get("binaryData") or {}).items()})
    if not items:
        return by_key
    return {item["path"]: by_key[item["key"]] for item in items if item["key"] in by_key}


def mount_table(
    job: Mapping[str, Any],
    container: Mapping[str, Any],
    manifests: Iterable[Mapping[str, Any]],
    config_dir: Path,
    checkpoint_dir: Path,
    scratch_dir: Path,
) -> tuple[dict[str, Path], dict[str, str | bytes]]:
    """Local folder per container mount path, and the ConfigMap files to write.

    ConfigMap volumes map to ``config_dir``, ``/checkpoints`` to ``checkpoint_dir``, any other
    mount to a folder under ``scratch_dir``; ``/dev/shm`` is left alone.

    Returns:
        (mount path -> local folder, path under the ConfigMap mount -> text or bytes).

    Raises:
        LocalRunError: A mounted ConfigMap is not among the manifests.
    """
    volumes = volume_sources(job)
    configmaps = find_configmaps(manifests)
    mounts: dict[str, Path] = {}
    files: dict[str, str | bytes] = {}
    for mount in container.get("volumeMounts", []):
        path = mount["mountPath"].rstrip("/") or "/"
        if path in _SKIP_MOUNTS:
            continue
        volume = volumes.get(mount["name"], {})
        if "configMap" in volume:
            name = volume["configMap"].get("name")
            if name not in configmaps:
                raise LocalRunError(f"ConfigMap {name!r} mounted at {path} is not in the manifests")
            files.update(configmap_files(configmaps[name], volume["configMap"].get("items")))
            mounts[path] = config_dir
        elif path == CHECKPOINT_MOUNT:
            mounts[path] = checkpoint_dir
        else:
            mounts[path] = scratch_dir / path.strip("/").replace("/", "_")
    if CONFIG_MOUNT not in mounts and len(configmaps) == 1:
        # A plan whose Job does not mount the ConfigMap still has one: use it at /etc/cw.
        files.update(configmap_files(next(iter(configmaps.values()))))
        mounts[CONFIG_MOUNT] = config_dir
    mounts.setdefault(CHECKPOINT_MOUNT, checkpoint_dir)
    return mounts, files


def map_paths(text: str, mounts: Mapping[str, os.PathLike | str]) -> str:
    """Replace container mount paths in ``text`` by their local folders.

    Only whole path prefixes are replaced: ``/checkpoints/run`` and ``"/checkpoints"`` map,
    ``/data/checkpoints`` and ``/checkpointsX`` do not.
    """
    for mount in sorted(mounts, key=len, reverse=True):
        pattern = re.compile(r"(?<![\w./-])" + re.escape(mount) + r"(?=/|$|[\s'\",:;\]}\)=])", re.MULTILINE)
        text = pattern.sub(str(mounts[mount]).replace("\\", "\\\\"), text)  # a literal replacement
    return text


def expand_vars(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known variables are replaced, unknown references are
    kept verbatim, ``$$`` is an escaped ``$``."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR_REF.sub(repl, value)


def container_env(
    container: Mapping[str, Any],
    host_env: Mapping[str, str] | None = None,
    completion_index: int = 0,
) -> tuple[dict[str, str], list[str]]:
    """The container's environment as the kubelet would build it, minus the cluster.

    Literal values are expanded against the variables defined before them. ``secretKeyRef``
    values come from ``host_env`` under the same variable name when set there; the Job
    completion index (node rank) is ``completion_index``; other ``valueFrom`` sources are
    skipped.

    Returns:
        (environment, names of variables that could not be resolved).
    """
    host_env = os.environ if host_env is None else host_env
    env: dict[str, str] = {}
    missing: list[str] = []
    for item in container.get("env", []) or []:
        name = item["name"]
        if "value" in item:
            env[name] = expand_vars(str(item.get("value") or ""), env)
            continue
        source = item.get("valueFrom") or {}
        field_path = (source.get("fieldRef") or {}).get("fieldPath")
        if field_path == COMPLETION_INDEX_FIELD:
            env[name] = str(completion_index)
        elif name in host_env:
            env[name] = host_env[name]
        else:
            missing.append(name)
    return env, missing


def container_command(container: Mapping[str, Any]) -> list[str]:
    """``command`` followed by ``args``."""
    command = [str(c) for c in container.get("command") or []]
    command += [str(a) for a in container.get("args") or []]
    if not command:
        raise LocalRunError("the trainer container has no command (image entrypoints cannot be run locally)")
    return command


def apply_overrides(config_text: str, overrides: Mapping[str, Any]) -> str:
    """Top-level keys of a YAML config replaced (``None`` removes a key)."""
    if not overrides:
        return config_text
    data = yaml.safe_load(config_text) or {}
    if not isinstance(data, dict):
        raise LocalRunError("config.yaml is not a YAML mapping; cannot apply overrides")
    for key, value in overrides.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
