"""`queries.gather` runs a command's independent reads at once and behaves like running them in order."""

from __future__ import annotations

import threading
import time

import pytest

from cw_cli.errors import NotFound
from cw_cli.k8s import queries


def test_results_come_back_under_their_keys_in_the_callers_order():
    calls = {f"k{i}": (lambda i=i: i * i) for i in range(40)}
    assert list(queries.gather(calls).items()) == [(f"k{i}", i * i) for i in range(40)]


def test_the_reads_overlap():
    barrier = threading.Barrier(4, timeout=5)  # breaks (and raises) unless four run at the same time
    calls = {str(i): (lambda: barrier.wait()) for i in range(4)}
    assert sorted(queries.gather(calls).values()) == [0, 1, 2, 3]


def test_no_more_than_the_limit_run_at_once(monkeypatch):
    monkeypatch.setattr(queries, "MAX_PARALLEL_READS", 3)
    lock, running, most = threading.Lock(), [0], [0]

    def read() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    queries.gather({str(i): read for i in range(12)})
    assert most[0] == 3


def test_the_first_error_in_order_is_raised_after_all_reads_ended():
    finished = []

    def slow_ok() -> str:
        time.sleep(0.05)
        finished.append("slow")
        return "ok"

    def missing() -> None:
        raise NotFound("no such object")

    def refused() -> None:
        time.sleep(0.01)
        raise PermissionError("second error")

    with pytest.raises(NotFound, match="no such object"):
        queries.gather({"a": slow_ok, "b": missing, "c": refused})
    assert finished == ["slow"]  # no read is left running behind the error


def test_one_call_runs_in_the_callers_thread():
    assert queries.gather({"only": threading.get_ident}) == {"only": threading.get_ident()}


def test_inside_sequential_reads_everything_runs_in_the_callers_thread():
    me = threading.get_ident()
    with queries.sequential_reads():
        threads = queries.gather({str(i): threading.get_ident for i in range(5)})
    assert set(threads.values()) == {me}
    again = queries.gather({str(i): threading.get_ident for i in range(5)})  # the block has ended
    assert me not in again.values()


def test_a_read_that_gathers_again_does_not_fan_out_a_second_time():
    def outer() -> set[int]:
        mine = threading.get_ident()
        inner = queries.gather({str(i): threading.get_ident for i in range(4)})
        return set(inner.values()) | {mine}

    results = queries.gather({"a": outer, "b": outer})
    assert all(len(threads) == 1 for threads in results.values())  # each inner gather stayed on its worker
