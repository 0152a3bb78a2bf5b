"""What every test suite shares: the machine's own cluster stays out of the tests.

A CI job that runs inside a Kubernetes pod has KUBERNETES_SERVICE_HOST/PORT set and a service
account token mounted; cw (like kubectl) would then use that cluster wherever a test expects no
kubeconfig at all. Tests that mean the in-cluster path set these themselves.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_in_cluster_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
