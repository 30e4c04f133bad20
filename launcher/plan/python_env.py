"""Python's own settings in the environment the training processes start with, where swift cannot run.

Contract: pure. `raised_deprecations(env)` is a warning line where PYTHONWARNINGS makes a
DeprecationWarning an error in every process (`error`, or any prefix of it Python takes, `e`, for no
category, Warning or DeprecationWarning, limited to no message and no module), unless a later entry,
which Python puts first, says otherwise for it: importing ms-swift 4.6 shows one (its ring attention's
`torch.jit.script`, deprecated by torch), which then stops every rank before it trains. Python reads the
variable as it starts, so the swift config's ENV block, set later, does not count.
"""

from __future__ import annotations

from collections.abc import Mapping

ACTIONS = ("default", "always", "all", "ignore", "module", "once", "error")  # Python's order for a prefix
COVERS_DEPRECATION = ("", "Warning", "DeprecationWarning", "builtins.Warning", "builtins.DeprecationWarning")


def raised_deprecations(env: Mapping[str, str]) -> str | None:
    setting = env.get("PYTHONWARNINGS", "")
    for entry in reversed([part.strip() for part in setting.split(",") if part.strip()]):
        fields = [*entry.split(":"), "", "", "", ""][:5]
        action, message, category, module = (field.strip() for field in fields[:4])
        if message or module or category not in COVERS_DEPRECATION:
            continue  # limited to some warnings: swift's may not be among them
        chosen = next((a for a in ACTIONS if action and a.startswith(action)), None)
        if chosen is None:
            continue  # Python ignores an entry it cannot read, with a warning of its own
        if chosen != "error":
            return None
        return (
            f"PYTHONWARNINGS={setting} makes a DeprecationWarning an error: importing ms-swift shows one "
            "(torch.jit.script is deprecated), so every rank stops before it trains (unset PYTHONWARNINGS, "
            "or add ignore::DeprecationWarning after it)"
        )
    return None
