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


class FakeTime:
    """A clock that moves only when the loop sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> float:
        return self.now


def test_progress_after_a_second_then_every_30_seconds_until_the_deadline() -> None:
    fake, said = FakeTime(), []
    done = wait_until(
        lambda: False, 100, sleep=fake.sleep, clock=fake.clock, progress=lambda left: said.append(round(left))
    )
    assert done is False and fake.now == pytest.approx(1100.0)
    assert said == [98, 68, 38, 8]  # 1.5 s in (the first sleeps add up to that), then every 30 s


def test_a_quick_wait_says_nothing() -> None:
    fake, said, answers = FakeTime(), [], iter([False, False, True])
    assert wait_until(lambda: next(answers), 100, sleep=fake.sleep, clock=fake.clock, progress=said.append)
    assert said == []


def test_a_signal_ends_the_wait_within_a_second() -> None:
    from launcher.run.poll import WaitInterrupted

    fake = FakeTime()
    signals: list[int] = []
    sent_at = []

    def condition() -> bool:
        if fake.now >= 1050.0 and not signals:
            signals.append(2)  # Ctrl-C, 50 s into a 300 s wait
            sent_at.append(fake.now)
        return False

    with pytest.raises(WaitInterrupted) as err:
        wait_until(
            condition, 300, sleep=fake.sleep, clock=fake.clock,
            interrupted=lambda: signals[-1] if signals else None, what=lambda: "node 1's report",
        )  # fmt: skip
    assert fake.now - sent_at[0] <= 1.0
    assert err.value.exit_code == 130
    assert err.value.message == "SIGINT received while waiting for node 1's report; stopped"
