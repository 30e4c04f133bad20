"""Wait for a condition with a deadline: the one polling loop behind every multi-node wait.

`wait_until(condition, timeout)` calls `condition()` until it returns True (then True) or `timeout`
seconds pass (then False), sleeping between calls with capped exponential backoff (at most `max_wait`,
1 s). An exception from `condition` is not retried: it propagates at once (a lost store is not something
waiting fixes). Two promises to the person at the terminal:
- `progress(seconds_left)` is called once the wait has lasted FIRST_REPORT seconds, then every
  REPORT_EVERY seconds: the caller says what it waits for, for whom and until when;
- `interrupted()` is checked after every sleep: when it returns a signal number the wait ends at once
  with WaitInterrupted, so Ctrl-C ends any wait within `max_wait` seconds plus one condition check.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from launcher.errors import SafeSftError

FIRST_REPORT = 1.0
REPORT_EVERY = 30.0


class WaitInterrupted(SafeSftError):
    """A signal (Ctrl-C, scancel) arrived while safe-sft waited: exit 128 + its number, no restart."""

    def __init__(self, signum: int, what: str) -> None:
        import signal

        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
        super().__init__(f"{name} received while waiting for {what}; stopped", "")
        self.exit_code = 128 + signum


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    *,
    first_wait: float = 0.1,
    max_wait: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    interrupted: Callable[[], int | None] = lambda: None,
    progress: Callable[[float], None] | None = None,
    what: Callable[[], str] = lambda: "a condition",
) -> bool:
    start = clock()
    deadline = start + timeout
    next_report = start + FIRST_REPORT
    wait = first_wait
    while True:
        if condition():
            return True
        now = clock()
        if now >= deadline:
            return False
        if progress is not None and now >= next_report:
            progress(deadline - now)
            next_report = now + REPORT_EVERY
        sleep(max(0.0, min(wait, max_wait, deadline - now)))
        wait = min(wait * 2, max_wait)
        signum = interrupted()
        if signum is not None:
            raise WaitInterrupted(signum, what())
