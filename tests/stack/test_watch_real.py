"""A real hang (one rank frozen by SIGSTOP), and `safe-sft report` on the run it leaves behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.stack.test_supervise_real import args_json, fault_env, last_step, report, run_dirs, safe_sft, swift_args


def test_a_sigstopped_rank_is_a_hang_and_the_next_attempt_finishes(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    own = ["--hang-timeout", "15", "--startup-timeout", "120", "--memory-sample-interval", "0.5"]
    result = safe_sft([*own, *swift_args(tiny, out, max_steps=10)], fault_env(tmp_path, "stop:4:1"), timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "hang"
    assert "no progress for 15 s" in first["failure"]["evidence"][0]
    assert second["change"]["what"] == "no change"  # the ladder: the same plan once more
    assert second["resumed_from"]["step"] == 3
    assert last_step(run_dirs(out)[-1]) == "10/10"
    # the watchdog's ddp_timeout keeps gloo's own timeout from firing first
    assert args_json(run_dirs(out)[0])["ddp_timeout"] == 240
    # every process of the hung attempt was stopped before the next began (the frozen rank included)
    frozen = [json.loads(p.read_text())["pid"] for p in (tmp_path / "ranks").glob("rank-1-*.json")]
    assert frozen and all(not Path(f"/proc/{pid}").exists() for pid in frozen)
    # what the watchdog collected first: the frozen rank by its state, the others' stacks (py-spy comes with
    # the dev extra that scripts/setup.sh installs)
    assert any(f"rank 1 (pid {pid}) is stopped" in line for line in first["diagnostics"] for pid in frozen)
    assert sum("is stopped" in line for line in result.stderr.splitlines()) == 2  # when found, and in the summary
    [stacks] = (out / "safe-sft").glob("*/attempt-1/stacks.txt")
    assert "(stopped) ===" in stacks.read_text() and "torch/distributed/" in stacks.read_text()
    # `safe-sft explain` on the hung attempt, its folder or its log, says what the run said: the SIGTERM that
    # torchrun then reports is the watchdog's, not a user's stop (hostile45report F3)
    for saved in (stacks.parent, stacks.parent / "console.log"):
        explained = subprocess.run([sys.executable, "-m", "launcher", "explain", "--json", str(saved)],
                                   capture_output=True, text=True)  # fmt: skip
        assert json.loads(explained.stdout)["kind"] == "hang", explained.stdout
    assert first["memory"]["host_peak_bytes"] > 100 * 2**20  # two torch workers at least

    # safe-sft report on this run dir: the attempts, and a plot of what the report holds
    png = tmp_path / "memory.png"
    shown = subprocess.run(
        [sys.executable, "-m", "launcher", "report", str(out), "--plot", str(png)], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "succeeded after 2 attempt(s)" in shown.stdout and "hang" in shown.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from launcher.show_report import load_report, plot_report

    data = load_report(out)
    fig = plot_report(data, tmp_path / "again.png")
    [host] = [line for line in fig.axes[0].get_lines() if line.get_label() == "host RAM"]
    samples = [u / 2**30 for a in data["attempts"] for u in a["memory"]["timeline"]["host_used_bytes"]]
    assert list(host.get_ydata()) == samples
