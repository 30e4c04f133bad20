"""`safe-sft report` on a synthetic report: the table, and a plot whose lines are the report's data,
checked against values worked out by hand from that report."""

import json
from pathlib import Path

import pytest

from launcher.show_report import load_report, plot_report, render_report

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
            attempt(1, "cuda_oom", [0.0, 5.0], {"0": [GiB, 70 * GiB], "1": [GiB, 60 * GiB]}, [GiB, 2 * GiB]),
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
    # by hand from the report above: attempt 2's samples start where attempt 1 ended (10 s), in GiB
    assert lines == {
        "GPU 0": ([0.0, 5.0, 10.0, 15.0], [1.0, 70.0, 1.0, 40.0]),
        "GPU 1": ([0.0, 5.0, 10.0, 15.0], [1.0, 60.0, 1.0, 35.0]),
        "host RAM": ([0.0, 5.0, 10.0, 15.0], [1.0, 2.0, 1.0, 1.0]),
    }
    # the failure is marked where attempt 1 ended, with its kind
    markers = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("_")]
    assert [list(m.get_xdata()) for m in markers] == [[10.0, 10.0]]
    assert [t.get_text() for t in fig.axes[0].texts] == ["#1 cuda_oom"]
