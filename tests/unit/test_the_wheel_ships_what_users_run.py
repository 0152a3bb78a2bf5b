"""The wheel ships what an installed cw reads at run time, and not the maintainers' scripts.

`cw cluster up` / `cw cluster build` read tools/versions.env (the pinned versions name the cached
binaries) and build what is missing with tools/build.sh from the Go modules in tools/: without
them an installed cw cannot start the test cluster the README starts with. tools/*_keys.py only
regenerate lists that ship inside cw_cli, so they stay out (docs/architecture.md, "What the
wheel ships").
"""

from __future__ import annotations

import re

from unit_helpers import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TOOLS = REPO / "tools"


def _shipped() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"])


def _under(path: str, shipped: dict[str, str]) -> bool:
    return any(path == source or path.startswith(source.rstrip("/") + "/") for source in shipped)


def test_what_the_test_cluster_reads_from_tools_ships_under_cw_cli_tools():
    shipped = _shipped()
    modules = sorted(p.parent.name for p in TOOLS.glob("*/go.mod"))
    build = (TOOLS / "build.sh").read_text(encoding="utf-8")
    assert set(modules) <= set(re.findall(r"\b(k8s|etcd|kwok|kueue|jobset|pause|coredns)\b", build))  # build.sh builds each
    for path in ["tools/versions.env", "tools/build.sh", *(f"tools/{m}/go.mod" for m in modules)]:
        assert _under(path, shipped), path
    assert all(target.startswith("cw_cli/tools/") for source, target in shipped.items() if source.startswith("tools"))
    assert shipped["kubeconfigs"] == "cw_cli/kubeconfigs"


def test_the_maintainers_scripts_in_tools_do_not_ship():
    shipped = _shipped()
    scripts = sorted(p.relative_to(REPO).as_posix() for p in TOOLS.glob("*.py"))
    assert scripts  # trl_keys.py, axolotl_keys.py
    assert [s for s in scripts if _under(s, shipped)] == []
