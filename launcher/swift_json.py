"""swift's reading of an option whose value is a JSON object written inline (--deepspeed, --columns).

Contract: `as_swift_repairs(text)` is the text swift parses: `text` itself where it is JSON, else what
json_repair makes of it where that is a JSON object (ms-swift 4.6, swift/utils/utils.py
json_parse_to_dict: json.loads, then json_repair.repair_json, logged as a warning and used). Users write
Python's style in shell scripts (`"{'stage': 2}"`, the quoting that survives a double-quoted string), and
swift runs it. json_repair comes with ms-swift; where it is not installed, `text` as it is. Anything that
repairs to no object stays as it was, for the caller's own error.
"""

from __future__ import annotations

import json


def as_swift_repairs(text: str) -> str:
    try:
        json.loads(text)
        return text
    except (ValueError, RecursionError):
        pass
    try:
        from json_repair import repair_json
    except ImportError:
        return text
    try:
        repaired = repair_json(text)
        parsed = json.loads(repaired) if isinstance(repaired, str) else None
    except (ValueError, RecursionError):
        return text
    return repaired if isinstance(parsed, dict) and parsed and isinstance(repaired, str) else text
