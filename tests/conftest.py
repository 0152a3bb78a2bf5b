"""What every test suite shares: the machine's own cluster stays out of the tests.

A CI job that runs inside a Kubernetes pod has KUBERNETES_SERVICE_HOST/PORT set and a service
account token mounted; cw (like kubectl) would then use that cluster wherever a test expects no
kubeconfig at all. Tests that mean the in-cluster path set these themselves.

The suite runs on two pytest-xdist workers (pyproject.toml's addopts), scheduled by
:func:`pytest_xdist_make_scheduler`: what keeps the CPUs busy (real training, the real node's pods)
runs in order on one worker, what mostly waits on an API server (the KWOK and Kueue clusters'
tests, one cluster each) in order on the other, and the unit tests fill both. `-n 0` runs
everything in one process.
"""

from __future__ import annotations

import pytest

#: Tests that train or run pods on the real node: CPU-bound, so never two at once. Also the unit
#: test that writes a W&B offline run: beside a training test's W&B run it read a truncated file
#: (CI, stop 50); in order with them it never meets one.
CPU_BOUND = ("tests/training/", "tests/cluster/test_the_real_node_",
             "tests/unit/test_eval_config_is_checked_before_anything_is_created.py")
#: Tests against the KWOK and Kueue clusters: mostly waiting on the API server.
API_BOUND = ("tests/cluster/",)


def worker_share(nodeid: str) -> str:
    """Which tests share a worker with ``nodeid``: a name for a group run in order, else the test itself."""
    if nodeid.startswith(CPU_BOUND):
        return "cpu-bound"
    if nodeid.startswith(API_BOUND):
        return "api-bound"
    return nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scope scheduling with :func:`worker_share` as the scope: each group goes whole to one
    worker (the two largest first, one each). Not xdist's `loadgroup`, whose marks pytest 9.2's node
    ids dropped (pytest-dev/pytest-xdist#1386): this reads only the node id."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedWorkerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_share(nodeid)

    return SharedWorkerScheduling(config, log)


@pytest.fixture(autouse=True)
def no_in_cluster_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
