"""Inputs that used to hang cw end at once with one line: a kernel pseudo-file named as a file to
ship (/proc/kmsg blocks on read), a lifetime or timeout of a million years, a plugin that loops
at import (cw names it, and Ctrl-C stops it with 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from unit_helpers import CONFIGS, ctrl_c_as_a_terminal_sends_it, plan_for, write_config

from cw_cli.errors import ConfigError

BASE = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "trl-lib/Capybara"}


@pytest.mark.parametrize(
    "extra",
    [{"files": ["/proc/kmsg"]}, {"chat_template_path": "/proc/kmsg"}, {"files": ["/proc/self/status"]},
     {"code": "/sys/kernel"}],
)  # fmt: skip
def test_a_kernel_pseudo_file_is_refused_without_reading_it(tmp_path, extra):
    if not os.path.exists("/proc/kmsg"):
        pytest.skip("no /proc here")
    with pytest.raises(ConfigError) as caught:
        plan_for("trl", "sft", write_config(tmp_path, {**BASE, **extra}))
    assert "of the operating system" in "\n".join(caught.value.issues)


def test_a_file_that_would_block_is_never_waited_for(tmp_path):
    from cw_cli.render.shipped_files import read_without_waiting

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer that never writes: a read would wait forever
    try:
        with pytest.raises(ValueError, match="has no data to read now"):
            read_without_waiting(fifo, "`files`")
    finally:
        os.close(writer)


def _cw(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cw_cli", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)  # fmt: skip


@pytest.mark.parametrize(
    "flags,expected",
    [(["--services", "--ttl", "99999999999999h"], "--ttl '99999999999999h' is longer than a year"),
     (["--services", "--ttl", "1e400h"], "expected a duration such as 90m"),
     (["--timeout", "1e300"], "at most a year"),
     (["--timeout", "nan"], "expected a positive number of seconds")],
)  # fmt: skip
def test_durations_beyond_a_year_are_refused(flags, expected):
    done = _cw("trl", "grpo", str(CONFIGS / "trl-grpo.yaml"), "--dry-run", *flags)
    assert done.returncode == 2 and expected in done.stderr, done.stderr


def test_a_plugin_that_loops_at_import_is_named_and_ctrl_c_stops_cw(tmp_path):
    (tmp_path / "plugins" / "looper").mkdir(parents=True)
    (tmp_path / "plugins" / "looper" / "__init__.py").write_text("while True:\n    pass\n")
    child = subprocess.Popen([sys.executable, "-m", "cw_cli", "frameworks"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "CW_PLUGINS_DIR": str(tmp_path / "plugins")},
                             preexec_fn=ctrl_c_as_a_terminal_sends_it)  # fmt: skip
    try:
        first = child.stderr.readline()  # the note comes once loading has taken SLOW_PLUGIN_S
        assert "loading the plugin" in first and "looper" in first and "CW_DISABLE_PLUGINS=1" in first
        child.send_signal(signal.SIGINT)
        _, rest = child.communicate(timeout=20)
    finally:
        child.kill()
    assert child.returncode == 130
    assert rest.strip().splitlines() == [
        f"error: interrupted while loading the plugin {tmp_path / 'plugins' / 'looper'}; CW_DISABLE_PLUGINS=1 starts cw "
        "without plugins"
    ]


def test_cw_without_plugins_skips_the_looping_one(tmp_path):
    (tmp_path / "plugins" / "looper").mkdir(parents=True)
    (tmp_path / "plugins" / "looper" / "__init__.py").write_text("while True:\n    pass\n")
    done = _cw("frameworks", env={"CW_PLUGINS_DIR": str(tmp_path / "plugins"), "CW_DISABLE_PLUGINS": "1"})
    assert done.returncode == 0 and "trl" in done.stdout
