"""A LLaMA-Factory key an earlier version took is refused with what to write now (launcher.backends.
llamafactory_args.EARLIER_KEYS), held to the installed version's own argument table and to the keys real
users were refused (tests/data/swift_argv_errors/llamafactory_cases.jsonl, from public issues)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from launcher.backends import llamafactory_args
from launcher.backends.llamafactory_args import EARLIER_KEYS, _table, check_llamafactory_values, table_versions
from launcher.errors import SafeSftError

KINDS = _table()[1]
CASES_FILE = Path(__file__).resolve().parents[1] / "data" / "swift_argv_errors" / "llamafactory_cases.jsonl"
CASES = [json.loads(line) for line in CASES_FILE.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(("old", "now"), sorted(EARLIER_KEYS.items()))
def test_an_earlier_key_is_gone_and_its_successor_is_there(old: str, now: str) -> None:
    assert old not in KINDS and now.split()[0] in KINDS


def _refused_keys(error: str) -> list[str]:
    """The keys or options of LLaMA-Factory's `... not used by the HfArgumentParser: [...]` error."""
    found = re.search(r"HfArgumentParser: (\[[^\]]*\])", error)
    if not found:
        return []
    return [token.removeprefix("--") for token in ast.literal_eval(found.group(1)) if not token[:1].isdigit()]


def test_real_users_earlier_keys_are_named_with_their_successor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llamafactory_args, "installed_versions", table_versions)  # as where it is installed
    named = set()
    for case in CASES:
        for key in _refused_keys(case["error"]):
            if key in EARLIER_KEYS:
                with pytest.raises(SafeSftError) as err:
                    check_llamafactory_values({key: "x"}, {key: "config.yaml"})
                assert f"write {EARLIER_KEYS[key]}" in err.value.hint, case["url"]
                named.add(key)
    assert named == {"checkpoint_dir", "max_source_length", "max_target_length", "evaluation_strategy"}
