"""The `cw` executable skips the interpreter's teardown, but keeps what a normal exit promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _console(body: str, *args: str, tmp_path: Path, entry: str = "console_main") -> subprocess.CompletedProcess[str]:
    script = f"import sys\nsys.argv = ['cw', *sys.argv[1:]]\n{body}\nfrom cw_cli.cli.app import {entry}\n{entry}()\n"
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO)})  # fmt: skip


def test_output_and_the_exit_code_arrive_whole(tmp_path):
    """A dry run's YAML through a pipe, byte for byte what the normal exit (``main``) writes."""
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: m\ndataset_name: d\ncheckpoint_volume: none\n")
    args = ("trl", "sft", str(config), "--dry-run", "--name", "whole")
    fast = _console("", *args, tmp_path=tmp_path)
    normal = _console("", *args, tmp_path=tmp_path, entry="main")
    assert fast.returncode == normal.returncode == 0, fast.stderr
    assert fast.stdout == normal.stdout and fast.stdout.count("kind: ") >= 2
    refused = _console("", "trl", "sft", str(tmp_path / "missing.yaml"), "--dry-run", tmp_path=tmp_path)
    assert refused.returncode == 2 and "missing.yaml" in refused.stderr


def test_atexit_handlers_still_run(tmp_path):
    body = "import atexit\natexit.register(lambda: print('handler ran', file=sys.stderr))"
    done = _console(body, "--version", tmp_path=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("cw ")
    assert "handler ran" in done.stderr


def test_a_thread_python_would_wait_for_is_waited_for(tmp_path):
    marker = tmp_path / "finished"
    body = (
        "import threading, time, pathlib\n"
        f"threading.Thread(target=lambda: (time.sleep(0.5), pathlib.Path({str(marker)!r}).write_text('x'))).start()"
    )
    done = _console(body, "--version", tmp_path=tmp_path)
    assert done.returncode == 0 and marker.exists()


def test_the_exit_skips_the_teardown(tmp_path):
    """An object freed only by the teardown says so; the `cw` executable's exit never frees it."""
    body = (
        "class Witness:\n    def __del__(self):\n        print('torn down', file=sys.stderr)\n"
        "witness = Witness()"
    )
    assert "torn down" not in _console(body, "--version", tmp_path=tmp_path).stderr
    plain = subprocess.run([sys.executable, "-c", "import sys\n" + body],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "torn down" in plain.stderr  # the witness works: a normal exit does free it
