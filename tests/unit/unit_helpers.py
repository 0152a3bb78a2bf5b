"""Shared helpers of the unit tests: build plans from plain dicts, find objects in them."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
EXPECTED = REPO / "tests" / "expected"


@lru_cache(maxsize=1)
def builtin_registry():
    """The built-in frameworks only (no user plugins from the machine running the tests)."""
    from cw_cli.frameworks.registry import FrameworkRegistry

    return FrameworkRegistry().load_all(include_plugins=False)


#: Every run must state where its outputs go; tests about something else use this volume.
TEST_VOLUME = "ckpts"


def write_config(directory: Path, data: dict[str, Any] | str, name: str = "config.yaml") -> Path:
    """Write a config (a dict or raw YAML text) into ``directory`` and return its path.

    A dict without ``checkpoint_volume`` gets :data:`TEST_VOLUME`; pass the key (``None`` to
    leave it out) to test the volume choice itself.
    """
    path = directory / name
    if isinstance(data, dict):
        data = {"checkpoint_volume": TEST_VOLUME, **data}
        if data["checkpoint_volume"] is None:
            del data["checkpoint_volume"]
    text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def load(framework: str, type_name: str, path: Path, sets: list[str] | None = None, **flags: Any):
    """``load_run_config`` for a built-in framework, flags as keyword arguments."""
    from cw_cli.config.loader import load_run_config
    from cw_cli.config.options import LaunchOptions

    loaded, training_type = builtin_registry().resolve_type(framework, type_name)
    return load_run_config(path, loaded.framework, training_type, sets or [], LaunchOptions(**flags))


def plan_for(
    framework: str,
    type_name: str,
    path: Path,
    sets: list[str] | None = None,
    run_name: str = "golden-run",
    services_only: bool = False,
    namespace: str | None = None,
    services_lifetime_s: int | None = None,
    services_timeout_s: int | None = None,
    jobset_available: bool | None = None,
    **flags: Any,
):
    """Load, validate and render a run, as ``cw <framework> <type> PATH --dry-run`` does.

    ``jobset_available`` stands for the cluster's answer (None: not asked): True or False also
    says Kueue is served, so a queued run is not refused for a missing Kueue.
    """
    from cw_cli.render.plan import RunRequest, build_plan
    from cw_cli.render.workload import JOBSET_API, KUEUE_API, ClusterFacts

    loaded, training_type = builtin_registry().resolve_type(framework, type_name)
    config = load(framework, type_name, path, sets, **flags)
    return build_plan(
        RunRequest(
            loaded,
            training_type,
            config,
            run_name,
            namespace=namespace,
            services_only=services_only,
            # --services needs a lifetime; tests about something else get one day
            services_lifetime_s=services_lifetime_s or (86400 if services_only else None),
            **({"services_timeout_s": services_timeout_s} if services_timeout_s else {}),
            facts=ClusterFacts() if jobset_available is None else ClusterFacts({JOBSET_API: jobset_available, KUEUE_API: True}),
        )
    )


def obj(plan_or_manifests, kind: str, name: str) -> dict[str, Any]:
    """The one manifest of a kind and name."""
    manifests = getattr(plan_or_manifests, "manifests", plan_or_manifests)
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, got {[(m['kind'], m['metadata']['name']) for m in manifests]}"
    return found[0]


def kinds_and_names(plan_or_manifests) -> list[tuple[str, str]]:
    manifests = getattr(plan_or_manifests, "manifests", plan_or_manifests)
    return [(m["kind"], m["metadata"]["name"]) for m in manifests]


def pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["template"]["spec"]


def container(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in pod_spec(manifest)["containers"] if c["name"] == name]
    assert len(found) == 1, f"no container {name!r} in {manifest['metadata']['name']}"
    return found[0]


def env_map(cont: dict[str, Any]) -> dict[str, Any]:
    """name -> value (or the valueFrom mapping) of a container's env."""
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in cont.get("env", [])}


def mounted_config(plan, run_name: str = "golden-run") -> dict[str, Any]:
    """The framework config as the pods read it: config.yaml (or verifiers' config.toml), parsed."""
    data = obj(plan, "ConfigMap", f"{run_name}-config")["data"]
    if "config.toml" in data:
        import tomllib

        return tomllib.loads(data["config.toml"])
    return yaml.safe_load(data["config.yaml"])


def reparse(plan) -> list[dict[str, Any]]:
    """The plan's multi-document YAML (what --dry-run prints), parsed back."""
    return [doc for doc in yaml.safe_load_all(plan.to_yaml()) if doc is not None]


def ctrl_c_as_a_terminal_sends_it() -> None:
    """``preexec_fn`` of a child that a test sends Ctrl-C: the signal's default action, even where
    the test runner was started with it ignored (a background job of a non-interactive shell is),
    so Python installs its own handler in the child."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
