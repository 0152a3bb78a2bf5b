"""A non-editable install ships every template and pod-side file (the predecessor lost subfolders)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_contains_every_template_and_runtime_file(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    wheel = next(tmp_path.glob("cw_cli-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"cw_cli/kubeconfigs/{path.relative_to(ROOT / 'kubeconfigs').as_posix()}"
        for path in (ROOT / "kubeconfigs").rglob("*")
        if path.is_file()
    }
    expected |= {f"cw_cli/runtime/{path.name}" for path in (ROOT / "cw_cli" / "runtime").glob("*.py")}
    # The frameworks' key lists (read at validation) and the optional Kueue and JobSet builder modules.
    expected |= {"cw_cli/frameworks/trl/trl_keys.json", "cw_cli/frameworks/axolotl/axolotl_keys.txt",
                 "cw_cli/tools/kueue/go.mod", "cw_cli/tools/kueue/go.sum", "cw_cli/tools/versions.env",
                 "cw_cli/tools/jobset/go.mod", "cw_cli/tools/jobset/go.sum", "cw_cli/tools/jobset/tools.go"}  # fmt: skip
    assert any(name.startswith("cw_cli/kubeconfigs/common/") for name in expected)
    missing = sorted(expected - names)
    assert not missing, f"missing from the wheel: {missing}"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "cw = cw_cli.cli.app:console_main" in zipfile.ZipFile(wheel).read(entry_points).decode()
