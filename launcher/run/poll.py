"""Wait for a condition with a deadline: the one polling loop, shared by the multi-node waits.

`wait_until(condition, timeout)` calls `condition()` until it returns True (then True) or `timeout`
seconds pass (then False), sleeping between calls with capped exponential backoff. An exception from
`condition` is not retried: it propagates at once (a lost store is not something waiting fixes).
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    *,
    first_wait: float = 0.1,
    max_wait: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    # Imported here: tenacity takes ~35 ms to import, and only runs over several nodes ever wait.
    from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_exponential

    retrying = Retrying(
        retry=retry_if_result(lambda done: not done),
        stop=stop_after_delay(timeout),
        wait=wait_exponential(multiplier=first_wait, max=max_wait),
        sleep=sleep,
    )
    try:
        return bool(retrying(condition))
    except RetryError:
        return False
