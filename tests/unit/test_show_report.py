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


def test_the_report_file_itself_is_taken_as_well_as_its_dirs(run_dir: Path) -> None:
    (report,) = run_dir.glob("safe-sft/*/report.json")
    assert load_report(report)["_path"] == load_report(report.parent)["_path"] == load_report(run_dir)["_path"]


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


def _report_with(tmp_path: Path, mutate) -> Path:  # type: ignore[no-untyped-def]
    report = {
        "schema": 1, "outcome": "failed",
        "attempts": [attempt(1, "cuda_oom", [0.0, 5.0], {"0": [GiB, 70 * GiB]}, [GiB, 2 * GiB])],
    }  # fmt: skip
    mutate(report)
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text(json.dumps(report))
    return run


def _set(path: str, value: object):  # type: ignore[no-untyped-def]
    def mutate(report: dict) -> None:  # type: ignore[type-arg]
        *parents, last = path.split(".")
        node = report
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        pytest.param(lambda r: r.clear() or r.update({"a": 1}), "'outcome' is null, not a string", id="other-json"),
        pytest.param(_set("outcome", 3), "'outcome' is 3, not a string", id="outcome-int"),
        pytest.param(_set("attempts", {"1": {}}), "'attempts' is {\"1\": {}}, not a list", id="attempts-dict"),
        pytest.param(_set("attempts.0", "x"), "attempts[0]: not an object", id="attempt-str"),
        pytest.param(_set("attempts.0.number", "one"), "attempts[0]: 'number' is \"one\"", id="number-str"),
        pytest.param(lambda r: r["attempts"][0].pop("exit_code"), "'exit_code' is missing", id="no-exit-code"),
        pytest.param(_set("attempts.0.duration_s", "10s"), "'duration_s' is \"10s\"", id="duration-str"),
        pytest.param(_set("attempts.0.failure", "oom"), "'failure' is \"oom\"", id="failure-str"),
        pytest.param(_set("attempts.0.failure.evidence", []), "failure 'evidence' is []", id="no-evidence"),
        pytest.param(_set("attempts.0.failure.evidence", "line"), "failure 'evidence' is \"line\"", id="evidence-str"),
        pytest.param(_set("attempts.0.failure.kind", None), "failure 'kind' is null", id="kind-null"),
        pytest.param(_set("attempts.0.resumed_from", {"step": None}), "resumed_from 'step' is null", id="step-null"),
        pytest.param(_set("attempts.0.change", {"what": 1}), "change 'what'/'why'", id="change-int"),
        pytest.param(_set("attempts.0.memory.gpus", [{"index": "0"}]), "memory 'gpus'", id="gpus-index-str"),
        pytest.param(_set("attempts.0.memory.host_peak_bytes", "2G"), "memory 'host_peak_bytes'", id="host-peak"),
        pytest.param(_set("attempts.0.memory.timeline.t", ["0"]), "memory 'timeline' 't'", id="timeline-t"),
        pytest.param(_set("attempts.0.memory.timeline.gpu_used_bytes", {"x": [1]}), "'gpu_used_bytes'", id="gpu-key"),
        pytest.param(_set("attempts.0.memory.timeline", []), "memory 'timeline' is not an object", id="timeline-list"),
        # what --plot reads: each attempt's estimate, each GPU's capacity, one time per sample
        pytest.param(_set("attempts.0.estimate", "x"), "attempts[0]: 'estimate' is \"x\"", id="estimate-str"),
        pytest.param(_set("attempts.0.estimate", {"gpu_need_bytes": "64G"}), "'gpu_need_bytes' is", id="need-str"),
        pytest.param(_set("attempts.0.memory.gpus.0.total_bytes", "80G"), "memory 'gpus'", id="total-str"),
        pytest.param(_set("attempts.0.memory.timeline.t", []), "has 0 times but a series", id="timeline-short"),
    ],
)
def test_a_report_of_the_wrong_shape_is_one_line_naming_the_field(tmp_path: Path, mutate, problem: str) -> None:  # type: ignore[no-untyped-def]
    from launcher.errors import SafeSftError

    run = _report_with(tmp_path, mutate)
    with pytest.raises(SafeSftError) as err:
        load_report(run)
    assert f"{run / 'report.json'} is not a safe-sft report (schema 1): " in err.value.message
    assert problem in err.value.message and "\n" not in err.value.message


@pytest.mark.parametrize("content", [b"[1, 2]", b"\xff\xfe\x00binary", b'{"outcome": ', b"null"])
def test_a_report_that_is_not_an_object_is_one_line(tmp_path: Path, content: bytes) -> None:
    from launcher.errors import SafeSftError

    (tmp_path / "report.json").write_bytes(content)
    with pytest.raises(SafeSftError, match=r"report\.json"):
        load_report(tmp_path)


def test_reports_the_supervisor_writes_pass_the_check(tmp_path: Path) -> None:
    from launcher.run.report import report_json
    from launcher.show_report import report_problem
    from tests.unit.test_supervisor import OOM_SUMMARY, FakeProcess, supervisor

    seen: list[dict] = []  # type: ignore[type-arg]
    sup = supervisor(tmp_path, [FakeProcess(1, OOM_SUMMARY), FakeProcess(0, "")], [])
    sup.on_attempt = lambda attempts: seen.append(json.loads(json.dumps(report_json(attempts, None, ["x"]))))
    result = sup.run()
    seen.append(json.loads(json.dumps(report_json(result.attempts, result, ["x"]))))
    # as each attempt starts and ends, and at the end: 2 + 2 + 1
    assert len(seen) == 5 and seen[-1]["outcome"] == "succeeded"
    assert [report_problem(data) for data in seen] == [None] * 5


@pytest.mark.parametrize(
    ("target", "why"),
    [
        pytest.param("missing-dir/memory.png", "No such file or directory", id="missing-dir"),
        pytest.param("memory.xyz", "Format 'xyz' is not supported", id="unknown-format"),
        pytest.param("a-dir.png", "Is a directory", id="a-directory"),
    ],
)
def test_plot_to_a_path_that_cannot_be_written_is_one_line(
    run_dir: Path, tmp_path: Path, target: str, why: str
) -> None:
    from launcher.errors import SafeSftError

    (tmp_path / "a-dir.png").mkdir()
    with pytest.raises(SafeSftError) as err:
        plot_report(load_report(run_dir), tmp_path / target)
    assert err.value.message.startswith(f"--plot {tmp_path / target}: cannot write it (")
    assert why in err.value.message
