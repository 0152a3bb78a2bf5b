"""The config models' empty lists and dicts are plain defaults: each instance must get its own."""

from __future__ import annotations

import pytest

from cw_cli.config.models import ClusterSpec, ServiceResources


def _mutable_fields(model: type) -> list[str]:
    return [name for name, info in model.model_fields.items() if isinstance(info.default, (list, dict))]


@pytest.mark.parametrize("model", [ClusterSpec, ServiceResources])
def test_changing_one_instances_empty_default_leaves_the_next_instance_empty(model):
    names = _mutable_fields(model)
    assert names, f"{model.__name__} has no list or dict default left to check"
    first = model()
    for name in names:
        value = getattr(first, name)
        assert value is not model.model_fields[name].default
        if isinstance(value, list):
            value.append("x")
        else:
            value["x"] = "x"
    second = model()
    for name in names:
        assert getattr(second, name) == type(getattr(second, name))(), name
        assert model.model_fields[name].default in ([], {}), name


def test_the_cluster_specs_empty_defaults_cover_its_collections():
    # Every list or dict field of the cluster fields starts empty.
    assert set(_mutable_fields(ClusterSpec)) == {
        "env", "secrets", "volumes", "node_selector", "annotations", "tolerations", "files", "pip", "services",
    }  # fmt: skip
