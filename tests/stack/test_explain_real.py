"""`safe-sft explain` on logs saved from real failing runs gives the kind the supervisor recorded live."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stack.test_supervise_real import fault_env, report, safe_sft, swift_args


@pytest.mark.parametrize("fault", ["oom_save:3:0", "oom_step:4:1"])
def test_explain_on_a_saved_real_log_agrees_with_the_live_classification(tiny, tmp_path: Path, fault: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    result = safe_sft(["--max-attempts", "1", *swift_args(tiny, out)], fault_env(tmp_path, fault))
    assert result.returncode == 1, result.stderr[-3000:]
    live = report(out)["attempts"][0]["failure"]
    [attempt_dir] = (out / "safe-sft").glob("*/attempt-1")
    terminal = tmp_path / "terminal.log"
    terminal.write_text(result.stdout + result.stderr)  # what a user would have saved from their terminal

    for given in (attempt_dir / "console.log", attempt_dir, terminal):
        saved = subprocess.run(
            [sys.executable, "-m", "launcher", "explain", "--json", str(given)], capture_output=True, text=True
        )
        assert saved.returncode == 0, saved.stderr
        explained = json.loads(saved.stdout)
        assert (explained["kind"], explained["rank"]) == (live["kind"], live["rank"]), given
        assert explained["kind"] == {"oom_save": "cuda_oom_save", "oom_step": "cuda_oom"}[fault.split(":")[0]]
