"""Bytes for people, as the plan's tables show them."""

import pytest

from launcher.units import fmt_bytes


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (None, "unknown"), (5, "5 B"), (3 << 30, "3.0 GiB"), (5 << 40, "5.0 TiB"), (7 << 50, "7.0 PiB"),
        # a batch of 10**23 samples: no machine's, in a width a table column holds (it ran the columns together)
        (10**50, "8.9e+34 PiB"),
    ],
)  # fmt: skip
def test_fmt_bytes(n: int | None, shown: str) -> None:
    assert fmt_bytes(n) == shown
