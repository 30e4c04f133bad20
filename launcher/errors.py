"""The one user-facing exception: a bad value or an unmet condition, with the fix.

The CLI catches `SafeSftError` once and prints `error: <message>` and `fix: <hint>`; anything else that
escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

import os

# What safe-sft exits with (docs/exit-codes.md), beside a training run's own 0 and 128 + a signal's number.
EXIT_TRAINING_FAILED = 1
EXIT_USAGE = 2
EXIT_NOTHING_FITS = 3
EXIT_LOST_NODE = 4


class SafeSftError(Exception):
    """A problem the user can fix: `message` names the bad value, `hint` says what to do.

    `exit_code` is what safe-sft exits with (docs/exit-codes.md): 2, bad input, unless a subclass says
    otherwise (a lost node: 4; a signal during a wait: 128 + its number).
    """

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (fix: {self.hint})" if self.hint else self.message


def not_permitted(message: str, path: object) -> SafeSftError:
    """`message` about a file or folder this user may not read or enter, with the one fix for it."""
    return SafeSftError(
        message,
        f"check the permissions of {path} and the folders above it (`namei -l {path}`), or run as a "
        "user who may use it",
    )


def folder_unreadable(path: object, err: OSError, hint: str) -> SafeSftError:
    """A folder that cannot be listed or searched, in one line: the entry that failed is named where it is not
    the folder itself (Python 3.11's `is_file()` raises on EACCES, for another user's run dir)."""
    inside = err.filename and str(err.filename) != str(path)
    # a folder this user may not search fails on the first entry looked for in it (its console.log): the
    # folder is what to name then
    where = f" {err.filename}" if inside and os.access(str(path), os.R_OK | os.X_OK) else ""
    return SafeSftError(f"cannot read {path}:{where} {err.strerror or err}", hint)
