"""`safe-sft report` on a synthetic report: the table, and a plot whose lines are the report's data,
checked against values worked out by hand from that report."""

import json
from pathlib import Path

import pytest

from launcher.show_report import load_report, plot_levels, plot_report, plot_series, render_report

GiB = 2**30


def attempt(number: int, failure: str | None, t: list[float], gpu: dict[str, list[int]], host: list[int]) -> dict:  # type: ignore[type-arg]
    return {
        "number": number, "duration_s": 10.0, "exit_code": 1 if failure else 0, "last_step": 3 * number,
        "resumed_from": {"step": 3} if number > 1 else None,
        "change": {"what": "per_device_train_batch_size 2 -> 1", "why": "less"} if number > 1 else None,
        "failure": {"kind": failure, "evidence": ["torch.OutOfMemoryError: CUDA out of memory"]} if failure else None,
        "memory": {
            "gpus": [{"index": int(i), "peak_bytes": max(v), "total_bytes": 80 * GiB} for i, v in gpu.items()],
            "host_peak_bytes": max(host), "imbalance": None,
            "timeline": {"t": t, "gpu_used_bytes": gpu, "host_used_bytes": host},
        },
    }  # fmt: skip


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    report = {
        "schema": 1, "outcome": "succeeded", "give_up_reason": None,
        "attempts": [
            {**attempt(1, "cuda_oom", [0.0, 5.0], {"0": [GiB, 70 * GiB], "1": [GiB, 60 * GiB]}, [GiB, 2 * GiB]),
             "estimate": {"strategy": "zero2", "gpu_need_bytes": 64 * GiB}},
            attempt(2, None, [0.0, 5.0], {"0": [GiB, 40 * GiB], "1": [GiB, 35 * GiB]}, [GiB, GiB]),
        ],
    }  # fmt: skip
    run = tmp_path / "out" / "safe-sft" / "20260101-000000"
    run.mkdir(parents=True)
    (run / "report.json").write_text(json.dumps(report))
    return tmp_path / "out"


def test_table_lists_every_attempt(run_dir: Path) -> None:
    text = render_report(load_report(run_dir))
    assert "succeeded after 2 attempt(s)" in text
    assert "cuda_oom" in text and "3->6" in text and "GPU0 70.0 GiB" in text


def test_plot_has_one_line_per_gpu_and_the_reports_data(run_dir: Path, tmp_path: Path) -> None:
    data = load_report(run_dir)
    png = tmp_path / "memory.png"
    fig = plot_report(data, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = [line for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]  # "_": markers
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in drawn}
    assert set(lines) == {"GPU 0", "GPU 1", "host RAM"}
    assert lines["GPU 0"] == ([0.0, 5.0, 10.0, 15.0], [1.0, 70.0, 1.0, 40.0])
    assert lines == {k: (list(x), list(y)) for k, (x, y) in plot_series(data).items()}


def test_a_running_report_whose_safe_sft_is_gone_says_so(tmp_path: Path) -> None:
    import os
    import socket
    import subprocess
    import sys

    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    process = {"pid": gone, "host": socket.gethostname(), "started": "2026-11-23T04:00:00+00:00"}
    data = {"_path": "r.json", "schema": 1, "outcome": "running", "process": process, "attempts": []}
    text = render_report(data)
    assert f"safe-sft pid {gone} on {socket.gethostname()}" in text and "is gone: the run was killed" in text
    alive = render_report({**data, "process": {**process, "pid": os.getpid()}})
    assert "is gone" not in alive and f"pid {os.getpid()}" in alive
    elsewhere = render_report({**data, "process": {**process, "host": "another-host"}})
    assert "on another host: not checked" in elsewhere


def test_a_report_that_cannot_be_written_is_one_line_naming_it(tmp_path: Path) -> None:
    from launcher.run.report import save_report

    blocker = tmp_path / "file"
    blocker.write_text("x")
    reason = save_report(blocker / "report.json", {"schema": 1})
    assert reason is not None and reason.startswith(f"cannot write the report {blocker / 'report.json'}: ")
    assert "free)" in reason and "\n" not in reason
    assert save_report(tmp_path / "report.json", {"schema": 1}) is None
    assert json.loads((tmp_path / "report.json").read_text()) == {"schema": 1}


def test_plot_draws_the_estimate_and_the_capacity_as_levels(run_dir: Path, tmp_path: Path) -> None:
    data = load_report(run_dir)
    assert plot_levels(data) == [("estimate #1", 0.0, 10.0, 64.0), ("GPU capacity", 0.0, 20.0, 80.0)]
    fig = plot_report(data, tmp_path / "memory.png")
    drawn = {c.get_label(): c.get_segments() for c in fig.axes[0].collections}
    assert [list(map(list, s)) for s in drawn["estimate #1"]] == [[[0.0, 64.0], [10.0, 64.0]]]
    assert [list(map(list, s)) for s in drawn["GPU capacity"]] == [[[0.0, 80.0], [20.0, 80.0]]]
