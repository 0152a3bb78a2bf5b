"""A name is checked whole: a trailing newline is refused, as the API server would refuse it.

Python's ``$`` also matches just before a final newline, so a pattern written ``^...$`` and used
with ``match`` accepted ``"data\\n"``. Such a value passed validation and only failed at the API
server, halfway through a submit (or, in a label selector, was sent as it was).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cw_cli.client.connection import ClusterTarget, connect
from cw_cli.config.models import ClusterSpec
from cw_cli.errors import ConfigError
from cw_cli.k8s.queries import run_selector, sweep_runs
from cw_cli.render.naming import validate_run_name

#: Each config field that holds a name, as a config would write it, given a value.
NAMED_FIELDS = {
    "queue": lambda name: {"queue": name},
    "checkpoint_volume": lambda name: {"checkpoint_volume": name},
    "hf_cache_volume": lambda name: {"hf_cache_volume": name},
    "priority_class": lambda name: {"priority_class": name},
    "service_account": lambda name: {"service_account": name},
    "a secret's name": lambda name: {"secrets": {"HF_TOKEN": name}},
    "a volume's claim": lambda name: {"volumes": {name: "/data"}},
    "an environment variable's name": lambda name: {"env": {name.upper(): "1"}},
    "a shipped file's name": lambda name: {"files": [name.replace("data", "reward.py")]},
}


@pytest.mark.parametrize("field", NAMED_FIELDS)
def test_a_config_name_with_a_trailing_newline_is_refused(field):
    ClusterSpec.model_validate(NAMED_FIELDS[field]("data"))  # the same name, whole, is valid
    with pytest.raises(ValidationError):
        ClusterSpec.model_validate(NAMED_FIELDS[field]("data\n"))


def test_a_run_name_with_a_trailing_newline_is_refused():
    assert validate_run_name("my-run") == "my-run"
    with pytest.raises(ConfigError):
        validate_run_name("my-run\n")


def test_a_run_or_sweep_selector_is_never_built_from_a_name_with_a_newline():
    assert run_selector("my-run").endswith("=my-run")
    with pytest.raises(ConfigError):
        run_selector("my-run\n")
    with pytest.raises(ConfigError):  # refused before any read: no cluster is needed to see it
        sweep_runs(None, "lr-sweep\n")  # type: ignore[arg-type]


def test_a_namespace_with_a_trailing_newline_is_refused(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    assert connect(ClusterTarget(kubeconfig=str(kubeconfig), namespace="team-a")).namespace == "team-a"
    with pytest.raises(ConfigError):
        connect(ClusterTarget(kubeconfig=str(kubeconfig), namespace="team-a\n"))
