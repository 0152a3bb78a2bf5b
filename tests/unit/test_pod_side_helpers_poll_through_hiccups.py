"""The pod-side helpers' shared loop (cw_pod_api.poll, shipped beside the keepers): an API hiccup
is said and the round tried again, never the end of the helper; `--once` answers 0 or 3."""

from __future__ import annotations

import sys
import urllib.error

import pytest

from cw_cli.frameworks.runtime_files import RUNTIME_DIR

sys.path.insert(0, str(RUNTIME_DIR))
import cw_pod_api  # noqa: E402


def test_a_hiccup_is_said_and_the_round_tried_again_until_done():
    answers = iter([urllib.error.URLError("refused"), ValueError("not JSON"), False, True])
    said: list[str] = []

    def one_round() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert cw_pod_api.poll(one_round, 0, once=False, say=said.append) == 0
    assert said == ["cannot check yet: <urlopen error refused>", "cannot check yet: not JSON"]


def test_once_answers_done_or_not_yet():
    assert cw_pod_api.poll(lambda: True, 0, once=True, say=print) == 0
    assert cw_pod_api.poll(lambda: False, 0, once=True, say=print) == cw_pod_api.NOT_YET == 3
    with pytest.raises(ZeroDivisionError):  # a bug in the helper is no API hiccup: the container says so and restarts
        cw_pod_api.poll(lambda: 1 / 0 > 0, 0, once=True, say=print)
