"""PYTHONWARNINGS read as Python reads it (launcher.plan.python_env): where it makes a DeprecationWarning an
error, importing ms-swift stops every rank (tests/unit/test_classify.py reads the traceback it leaves)."""

from __future__ import annotations

import pytest

from launcher.plan.python_env import raised_deprecations


@pytest.mark.parametrize(
    ("setting", "raised"),
    [
        ("error", True),
        ("e", True),  # Python takes any prefix of an action
        ("error::DeprecationWarning", True),
        ("default,error", True),  # the later entry is the one Python applies first
        ("error,ignore::DeprecationWarning", False),
        ("error,default", False),
        ("error::ResourceWarning", False),
        ("error::UserWarning", False),
        ("error:some message", False),  # limited to one message
        ("error:::mypackage", False),  # limited to one module
        ("ignore", False),
        ("", False),
        ("nonsense", False),
    ],
)
def test_pythonwarnings_that_makes_a_deprecation_an_error_is_named(setting: str, raised: bool) -> None:
    found = raised_deprecations({"PYTHONWARNINGS": setting})
    assert (found is not None) is raised
    if found is not None:
        assert found.startswith(f"PYTHONWARNINGS={setting} makes a DeprecationWarning an error")
