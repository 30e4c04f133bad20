"""How safe-sft's own option values are read, and how a bad one is said: click types and one error line.

Contract: `Seconds` reads a duration (a finite number in a range: `inf` would overflow the --ddp_timeout
safe-sft adds, and `nan` compares false with every bound, which would turn a watchdog off unsaid).
`click_error` turns click's own usage error into safe-sft's one line plus its fix, naming the environment
variable when the bad value came from one (SAFE_SFT_<NAME>), since the user typed no option.
"""

from __future__ import annotations

import math
from typing import Any

import click
from click.core import ParameterSource

from launcher.errors import SafeSftError

YEAR = 365 * 24 * 3600.0


class Seconds(click.FloatRange):
    """A number of seconds from `low` to `high`, finite."""

    name = "seconds"

    def __init__(self, low: float, high: float) -> None:
        super().__init__(min=low, max=high)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if math.isnan(seconds):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


def click_error(err: click.ClickException, command: str) -> SafeSftError:
    """click's usage error as safe-sft's: one line naming the value (and its variable), and the fix."""
    message = err.format_message().replace("\n", " ")
    if isinstance(err, click.BadParameter) and err.ctx is not None and isinstance(err.param, click.Option):
        source = err.ctx.get_parameter_source(err.param.name or "")
        envvar = err.param.envvar if isinstance(err.param.envvar, str) else None
        if source is ParameterSource.ENVIRONMENT and envvar:
            return SafeSftError(
                f"{envvar} in the environment: {message}", f"set {envvar} to a valid value, or unset it"
            )
    return SafeSftError(message, f"see `safe-sft {command} --help`")
