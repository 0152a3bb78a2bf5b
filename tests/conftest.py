"""What every test suite shares: the machine's own cluster stays out of the tests.

A CI job that runs inside a Kubernetes pod has KUBERNETES_SERVICE_HOST/PORT set and a service
account token mounted; cw (like kubectl) would then use that cluster wherever a test expects no
kubeconfig at all. Tests that mean the in-cluster path set these themselves.

The suite runs on two pytest-xdist workers (pyproject.toml's addopts): what keeps the CPUs busy
(real training, the real node's pods) runs in order on one worker, what mostly waits on an API
server (the KWOK and Kueue clusters' tests) in order on the other, and the unit tests fill both.
`-n 0` runs everything in one process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
#: Tests that train or run pods on the real node: CPU-bound, so never two at once.
CPU_BOUND_GROUP = "cpu-bound"
#: Tests against the KWOK and Kueue clusters: mostly waiting on the API server, one cluster each.
API_BOUND_GROUP = "api-bound"


def _suite_of(item: pytest.Item) -> str:
    try:
        relative = Path(str(item.fspath)).resolve().relative_to(_HERE)
    except (OSError, ValueError):
        return ""
    return relative.parts[0] if len(relative.parts) > 1 else ""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each training and cluster test in its xdist group (see the module's docstring)."""
    for item in items:
        suite = _suite_of(item)
        if suite == "training" or "real_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(CPU_BOUND_GROUP))
        elif suite == "cluster":
            item.add_marker(pytest.mark.xdist_group(API_BOUND_GROUP))


@pytest.fixture(autouse=True)
def no_in_cluster_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
