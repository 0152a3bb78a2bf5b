"""Ctrl-C while cw waits on a whole run ends cw within a second, with exit code 130 and its one
line, even when the main thread cannot act on the signal (here: it has the signal blocked, as a
thread stuck in a call that never returns on a signal would leave it)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest
from unit_helpers import ctrl_c_as_a_terminal_sends_it

_WAITER = textwrap.dedent(
    """
    import signal, sys, time
    from cw_cli.cli.interrupts import interrupt_within

    def interrupt(signum, frame):  # what cw's launch does with SIGTERM and SIGHUP
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    with interrupt_within(1.0, "error: stopped waiting; run 'r' goes on in the cluster"):
        if sys.argv[1] == "stuck":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # the main thread cannot act
        print("waiting", flush=True)
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            print("main thread acted", file=sys.stderr, flush=True)
            raise SystemExit(130)
    """
)


def _interrupt(mode: str, sig: int) -> tuple[int, str, float]:
    child = subprocess.Popen([sys.executable, "-c", _WAITER, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=ctrl_c_as_a_terminal_sends_it)  # fmt: skip
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(0.5)  # into time.sleep: a signal that came earlier would find the main thread running bytecode
    started = time.monotonic()
    child.send_signal(sig)
    try:
        _, stderr = child.communicate(timeout=20)
    finally:
        child.kill()
    return child.returncode, stderr, time.monotonic() - started


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_main_thread_that_cannot_act_is_ended_by_the_watchdog(sig):
    code, stderr, _ = _interrupt("stuck", sig)
    assert code == 130 and stderr.strip() == "error: stopped waiting; run 'r' goes on in the cluster"


def test_the_main_thread_acts_first_when_it_can():
    code, stderr, _ = _interrupt("free", signal.SIGINT)
    assert code == 130 and stderr.strip() == "main thread acted"


def test_outside_the_watch_nothing_is_left_behind():
    from cw_cli.cli.interrupts import interrupt_within

    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    with interrupt_within(1.0, "x"):
        pass
    assert signal.set_wakeup_fd(before) == before  # the previous wakeup fd is back
