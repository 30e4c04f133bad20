"""The one polling loop behind the multi-node waits."""

from __future__ import annotations

import pytest

from launcher.run.poll import wait_until


def test_returns_true_once_the_condition_holds_backing_off_between_calls() -> None:
    answers, slept = iter([False, False, True]), []
    assert wait_until(lambda: next(answers), 60, sleep=slept.append) is True
    assert slept == pytest.approx([0.1, 0.2])


def test_backoff_is_capped() -> None:
    answers, slept = iter([False] * 8 + [True]), []
    assert wait_until(lambda: next(answers), 60, max_wait=0.5, sleep=slept.append)
    assert max(slept) == 0.5 and slept[:3] == pytest.approx([0.1, 0.2, 0.4])


def test_returns_false_after_the_timeout() -> None:
    calls = []
    assert wait_until(lambda: calls.append(1) is not None, 0.25, first_wait=0.05, max_wait=0.05) is False
    assert len(calls) >= 2


def test_an_error_in_the_condition_is_raised_at_once() -> None:
    calls = []

    def lost() -> bool:
        calls.append(1)
        raise ConnectionError("store gone")

    with pytest.raises(ConnectionError):
        wait_until(lost, 60, sleep=lambda _: None)
    assert len(calls) == 1
