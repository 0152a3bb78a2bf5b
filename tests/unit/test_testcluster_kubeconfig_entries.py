"""`cw cluster up` merges its context into the user's kubeconfig and `down` takes it out again.

The context is `cw-test` ("local" means this machine without a cluster, `--local`); it was
`cw-local` before, so `down` also removes entries of that name, and nothing else.
"""

from __future__ import annotations

import yaml

from cw_cli.testcluster.kubeconfig import CONTEXT, LEGACY_CONTEXT, merge_user_kubeconfig, remove_from_user_kubeconfig


def test_up_adds_the_test_context_and_down_removes_it_and_the_earlier_name_only(tmp_path):
    pem = tmp_path / "x.pem"
    pem.write_bytes(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    path = tmp_path / "config"
    other = {"name": "prod", "cluster": {"server": "https://prod:6443"}}
    legacy = {"name": LEGACY_CONTEXT, "cluster": {"server": "https://127.0.0.1:1"}}
    path.write_text(yaml.safe_dump({"clusters": [other, legacy], "contexts": [
        {"name": "prod", "context": {"cluster": "prod", "user": "me"}},
        {"name": LEGACY_CONTEXT, "context": {"cluster": LEGACY_CONTEXT, "user": LEGACY_CONTEXT}}],
        "users": [], "current-context": LEGACY_CONTEXT}))  # fmt: skip
    merge_user_kubeconfig(path, "https://127.0.0.1:6443", pem, pem, pem)
    merged = yaml.safe_load(path.read_text())
    assert CONTEXT == "cw-test" and merged["current-context"] == CONTEXT
    assert {c["name"] for c in merged["contexts"]} == {"prod", LEGACY_CONTEXT, CONTEXT}
    assert remove_from_user_kubeconfig(path) is True
    left = yaml.safe_load(path.read_text())
    assert [c["name"] for c in left["contexts"]] == ["prod"] and [c["name"] for c in left["clusters"]] == ["prod"]
    assert left["current-context"] == ""
    assert remove_from_user_kubeconfig(path) is False  # nothing of cw's left
