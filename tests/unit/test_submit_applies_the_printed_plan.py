"""`Session.submit` applies the plan that was planned (and that `--dry-run` printed): the same
object, never rendered again. A plan made offline whose workload depends on the cluster (a
multi-node or queued run) is refused, not silently re-rendered into something else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from unit_helpers import builtin_registry

from cw_cli import api
from cw_cli.errors import ConfigError
from cw_cli.render.workload import JOBSET_API


class Discovery:
    """Stands in for Kube: serves JobSet; nothing else is read while planning."""

    namespace = "default"
    host = "fake"

    def serves(self, path: str, timeout=None) -> bool:
        return path == JOBSET_API


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model_name_or_path": "m", "dataset_name": "d", "checkpoint_volume": "none"}))
    return path


class Launches:
    """The plans handed to the cluster's launch, once armed; any rendering after that fails the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.plans: list = []

    def arm(self) -> Launches:
        import cw_cli.k8s.submit
        import cw_cli.render.plan

        def launch(kube, plan, **_):
            self.plans.append(plan)
            return cw_cli.k8s.submit.LaunchResult(created=[f"Job/{plan.run_name}"], released=True)

        def render_again(request):
            raise AssertionError(f"submit rendered {request.run_name} again")

        self.monkeypatch.setattr(cw_cli.k8s.submit, "launch", launch)
        self.monkeypatch.setattr(cw_cli.render.plan, "build_plan", render_again)
        return self


@pytest.fixture
def launches(monkeypatch) -> Launches:
    return Launches(monkeypatch)


def _session() -> api.Session:
    session = api.Session(registry=builtin_registry())
    session._kube = Discovery()  # type: ignore[assignment]
    return session


def test_submit_applies_the_planned_object_itself(config, launches):
    session = _session()
    planned = session.plan(config, "trl", "sft", nodes=2, name="gang")  # asks the cluster: a JobSet
    printed = planned.to_yaml()  # what --dry-run prints
    launches.arm()
    run = session.submit(planned)
    assert launches.plans == [planned.plan] and launches.plans[0] is planned.plan
    assert launches.plans[0].to_yaml() == printed and run.owner_kind == "JobSet"


def test_an_offline_plan_that_depends_on_the_cluster_is_refused_not_rendered_again(config, launches):
    offline = api.plan(config, "trl", "sft", nodes=2, name="gang", registry=builtin_registry())  # no connection
    assert not offline.cluster_facts and offline.plan.owner_kind == "Job"
    launches.arm()
    with pytest.raises(ConfigError, match="planned without asking the cluster") as refused:
        _session().submit(offline)
    assert launches.plans == [] and "Session.plan" in (refused.value.hint or "")


def test_an_offline_plan_that_depends_on_nothing_is_applied_as_planned(config, launches):
    offline = api.plan(config, "trl", "sft", name="plain", registry=builtin_registry())  # a Job anywhere
    launches.arm()
    run = _session().submit(offline)
    assert launches.plans == [offline.plan] and launches.plans[0] is offline.plan and run.owner_kind == "Job"
