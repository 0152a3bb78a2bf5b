"""The estimate reads the `server` service of `services:` by the role's one spelling (labels.SERVER):
a second spelling in estimate/native_setup.py would drift from the renderer's if the role were renamed."""

from __future__ import annotations

from test_one_vocabulary import ROLE_WORDS, _string_constants
from unit_helpers import REPO

from cw_cli import labels
from cw_cli.config.models import ClusterSpec
from cw_cli.estimate.native_setup import server_vllm


def test_native_setup_spells_no_role():
    path = REPO / "cw_cli" / "estimate" / "native_setup.py"
    assert [f"{line}: {value!r}" for line, value in _string_constants(path) if value in ROLE_WORDS] == []


def test_the_server_service_is_read_under_the_role_name():
    cluster = ClusterSpec.model_validate({"services": {labels.SERVER: {"tensor_parallel_size": 2,
                                                                      "args": ["--max-model-len", "4096"]}}})  # fmt: skip
    setup = server_vllm(cluster, {"gpu_memory_utilization": 0.8})
    assert (setup.mode, setup.tensor_parallel, setup.max_model_len) == ("server", 2, 4096)
