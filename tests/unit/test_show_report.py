"""`safe-sft report` on a synthetic report: the table, and a plot whose lines are the report's data,
checked against values worked out by hand from that report."""

import json
from dataclasses import replace
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


def test_an_attempt_that_started_over_shows_step_0_and_why(run_dir: Path) -> None:
    data = load_report(run_dir)
    why = "it saved out/v2-x/checkpoint-3 (step 3), not after step 3: it trained from step 0"
    data["attempts"][1]["resumed_from"]["started_over"] = why
    text = render_report(data)
    assert "0->6" in text and "3->6" not in text
    assert f"attempt 2 did not resume from step 3: {why}" in text


def test_a_checkpoint_an_attempt_could_not_load_is_named(run_dir: Path) -> None:
    data = load_report(run_dir)
    data["attempts"][1]["set_aside_checkpoint"] = {"path": "out/v0-x/checkpoint-6", "why": "it failed loading"}
    assert "  attempt 2 set aside out/v0-x/checkpoint-6 (left where it is): it failed loading" in render_report(data)


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


def test_a_report_whose_records_folder_was_removed_is_written_there_again(tmp_path: Path) -> None:
    """Someone cleaned up <output_dir>/safe-sft while the run lasted (hostile42sig F1): the report still lands."""
    from launcher.run.report import save_report

    report = tmp_path / "safe-sft" / "20261128-221736" / "report.json"
    assert save_report(report, {"schema": 1, "outcome": "failed"}) is None
    assert json.loads(report.read_text())["outcome"] == "failed"


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
        pytest.param(_set("outcome", "exploded"), "'outcome' is \"exploded\", not one of running, ", id="outcome-word"),
        # another version's report, or none's: read as schema 1, it had printed as one
        *(
            pytest.param(_set("schema", v), f"'schema' is {shown}, where this safe-sft reads 1", id=f"schema-{shown}")
            for v, shown in ((2, "2"), ("1", '"1"'), (None, "null"), (True, "true"))
        ),
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
        # what the table reads beside: the work lost, a notice's checkpoint, the process that writes it
        pytest.param(_set("attempts.0.lost", "abc"), "attempts[0]: 'lost' is \"abc\"", id="lost-str"),
        pytest.param(_set("attempts.0.lost", {"steps": 1}), "lost 'seconds' is null", id="lost-no-seconds"),
        pytest.param(
            _set("attempts.0.lost", {"steps": 1, "seconds": 2, "reload_seconds": None}),
            "lost 'reload_seconds' is null",
            id="lost-reload-null",
        ),
        pytest.param(_set("lost_work", [1]), "'lost_work' is [1], not an object", id="lost-work-list"),
        pytest.param(
            _set("lost_work", {"failures": 1, "steps": 2, "seconds": 3, "gpu_hours": "x"}),
            "lost_work 'gpu_hours' is \"x\"",
            id="gpu-hours-str",
        ),
        pytest.param(_set("attempts.0.preempted", "yes"), "'preempted' is \"yes\"", id="preempted-str"),
        pytest.param(_set("attempts.0.predicted_need_bytes", "lots"), "'predicted_need_bytes'", id="predicted-str"),
        pytest.param(_set("process", {"pid": 10**30, "host": "h"}), "process 'pid' is", id="pid-huge"),
        pytest.param(_set("process", {"pid": -1, "host": "h"}), "process 'pid' is -1", id="pid-negative"),
        pytest.param(_set("give_up_reason", 3), "'give_up_reason' is 3", id="give-up-int"),
        pytest.param(
            _set("attempts.0.set_aside_checkpoint", {"path": 3}),
            "set_aside_checkpoint 'path' is 3",
            id="set-aside-path-int",
        ),
        # numbers Python can neither draw nor format
        pytest.param(_set("attempts.0.memory.host_peak_bytes", 10**400), "'host_peak_bytes'", id="host-peak-huge"),
        pytest.param(_set("attempts.0.estimate", {"gpu_need_bytes": 10**400}), "'gpu_need_bytes'", id="need-huge"),
        pytest.param(_set("attempts.0.memory.timeline.gpu_used_bytes", {"²": [1, 2]}), "'gpu_used_bytes'", id="key-²"),
        pytest.param(_set("attempts.0.number", True), "'number' is true", id="number-bool"),
        pytest.param(_set("attempts.0.duration_s", 1e308), "'duration_s' is 1e+308", id="duration-past-any-run"),
        pytest.param(
            _set("attempts.0.memory.timeline.t", [0, 1.7e308]),
            "'t' holds 1.7e+308, a time no run",
            id="time-past-any-run",
        ),
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
        pytest.param("a-dir.png", "Is a directory", id="a-directory"),
        # the partial file's removal fails as its write did: a traceback before
        pytest.param("a-file/memory.png", "Not a directory", id="under-a-file"),
    ],
)
def test_plot_to_a_path_that_cannot_be_written_is_one_line(
    run_dir: Path, tmp_path: Path, target: str, why: str
) -> None:
    from launcher.errors import SafeSftError

    (tmp_path / "a-dir.png").mkdir()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SafeSftError) as err:
        plot_report(load_report(run_dir), tmp_path / target)
    assert err.value.message.startswith(f"--plot {tmp_path / target}: cannot write it (")
    assert why in err.value.message


@pytest.mark.parametrize(
    ("content", "why"),
    [
        pytest.param('{"outcome": "failed", "attempts": [], "x": NaN}', "NaN is not a JSON number", id="nan"),
        pytest.param('{"outcome": "failed", "attempts": [], "x": Infinity}', "Infinity", id="infinity"),
        pytest.param("[" * 200_000 + "]" * 200_000, "nested too deeply", id="nested"),
    ],
)
def test_a_report_that_is_not_strict_json_is_one_line(tmp_path: Path, content: str, why: str) -> None:
    from launcher.errors import SafeSftError

    (tmp_path / "report.json").write_text(content)
    with pytest.raises(SafeSftError) as err:
        load_report(tmp_path)
    assert why in err.value.message and "still writing" not in err.value.hint


def test_a_path_that_is_not_there_is_named_so(tmp_path: Path) -> None:
    from launcher.errors import SafeSftError

    with pytest.raises(SafeSftError) as err:
        load_report(tmp_path / "nowhere")
    assert err.value.message == f"{tmp_path / 'nowhere'} does not exist"


@pytest.mark.parametrize("name", ["memory", "memory.xyz", "memory.pgf", ""])
def test_plot_to_a_name_that_is_no_picture_is_refused_before_writing(run_dir: Path, tmp_path: Path, name: str) -> None:
    from launcher.errors import SafeSftError

    before = sorted(tmp_path.iterdir())
    with pytest.raises(SafeSftError, match="not a picture's file name"):
        plot_report(load_report(run_dir), tmp_path / name if name else Path(name))
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize(("name", "magic"), [("m.pdf", b"%PDF"), ("m.svg", b"<?xml"), ("m.JPG", b"\xff\xd8")])
def test_plot_writes_the_format_its_suffix_names(run_dir: Path, tmp_path: Path, name: str, magic: bytes) -> None:
    plot_report(load_report(run_dir), tmp_path / name)
    assert (tmp_path / name).read_bytes().startswith(magic)


def test_a_plot_that_fails_to_write_leaves_the_file_that_was_there(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from matplotlib.figure import Figure

    from launcher.errors import SafeSftError

    def full_disk(self: Figure, path: Path, **kwargs: object) -> None:
        Path(path).write_bytes(b"\x89PNG half")  # what a write cut short by a full disk leaves
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "memory.png"
    target.write_bytes(b"the user's own picture")
    monkeypatch.setattr(Figure, "savefig", full_disk)
    with pytest.raises(SafeSftError, match=r"cannot write it \(No space left on device\)"):
        plot_report(load_report(run_dir), target)
    assert target.read_bytes() == b"the user's own picture"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.png", "out"]  # no partial file left


def test_a_plot_onto_a_symlink_replaces_the_link_not_its_target(run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "notes.eps"
    target.write_bytes(b"someone's drawing")
    (tmp_path / "memory.png").symlink_to(target)
    plot_report(load_report(run_dir), tmp_path / "memory.png")
    assert target.read_bytes() == b"someone's drawing"
    assert not (tmp_path / "memory.png").is_symlink()
    assert (tmp_path / "memory.png").read_bytes()[:4] == b"\x89PNG"


def test_a_run_without_memory_samples_is_not_drawn_as_an_empty_picture(tmp_path: Path) -> None:
    from launcher.errors import SafeSftError

    run = _report_with(tmp_path, _set("attempts.0.memory", None))
    with pytest.raises(SafeSftError, match="recorded no memory samples"):
        plot_report(load_report(run), tmp_path / "memory.png")
    assert not (tmp_path / "memory.png").exists()


def test_a_running_report_keeps_a_reserve_beside_it_and_the_final_one_gives_it_up(tmp_path: Path) -> None:
    from launcher.run.report import MIN_RESERVE_BYTES, reserve_path, save_report

    report = tmp_path / "report.json"
    assert save_report(report, {"schema": 1, "outcome": "running", "attempts": []}) is None
    assert reserve_path(report).stat().st_size == MIN_RESERVE_BYTES
    big = {"schema": 1, "outcome": "running", "attempts": [], "notes": "x" * MIN_RESERVE_BYTES}
    assert save_report(report, big) is None
    assert reserve_path(report).stat().st_size >= 2 * report.stat().st_size  # room to write it beside the old one
    assert save_report(report, {"schema": 1, "outcome": "failed", "attempts": []}) is None
    assert not reserve_path(report).exists() and json.loads(report.read_text())["outcome"] == "failed"


def test_a_symlink_that_leads_nowhere_and_a_fifo_are_named_so(tmp_path: Path) -> None:
    import os

    from launcher.errors import SafeSftError

    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo")
    for name, said in (("loop", "is a symlink that leads nowhere"), ("fifo", "is neither a file nor a folder")):
        with pytest.raises(SafeSftError) as err:
            load_report(tmp_path / name)
        assert err.value.message.startswith(f"{tmp_path / name} {said}")


def test_the_summary_names_no_report_that_could_not_be_written(tmp_path: Path) -> None:
    """A disk that filled during the run: the summary ended `report: <path>` for a report never written."""
    from launcher.run.records import RunResult
    from launcher.run.report import summary

    result = RunResult("failed", [], 1, "the disk is full")
    path = tmp_path / "report.json"
    assert f"  report: {path}" in summary(result, path).splitlines()
    why = f"cannot write the report {path}: No space left on device ({tmp_path} has 0 B free)"
    lines = summary(result, path, unsaved=why).splitlines()
    assert f"  report: not written: {why}" in lines and f"  report: {path}" not in lines


@pytest.mark.parametrize(("outcome", "word"), [("interrupted", "stopped"), ("failed", "gave up")])
def test_the_reason_is_worded_as_the_runs_own_summary_words_it(run_dir: Path, outcome: str, word: str) -> None:
    data = load_report(run_dir)
    data["outcome"], data["give_up_reason"] = outcome, "a reason"
    assert render_report(data).splitlines()[-1] == f"  {word}: a reason"


@pytest.mark.parametrize("key", ["failure", "last_step", "lost.back_to_step"])
def test_a_key_the_report_may_leave_out_reads_as_null(tmp_path: Path, key: str) -> None:
    """A hand-trimmed report, or one of a version that did not write them: shown, plotted, never a KeyError."""

    def drop(report: dict) -> None:  # type: ignore[type-arg]
        first = report["attempts"][0]
        first["lost"] = {"steps": 3, "seconds": 4.0, "reload_seconds": 0, "back_to_step": 2}
        *parents, last = key.split(".")
        del (first[parents[0]] if parents else first)[last]

    data = load_report(_report_with(tmp_path, drop))
    text = render_report(data)
    assert text.startswith(f"{data['_path']}: failed after 1 attempt(s)")
    plot_report(data, tmp_path / "memory.png")
    assert (tmp_path / "memory.png").stat().st_size > 0


def test_a_folder_that_cannot_be_searched_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.errors import SafeSftError

    def denied(self: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_file", denied)
    with pytest.raises(SafeSftError) as err:
        load_report(tmp_path)
    assert err.value.message == f"cannot read {tmp_path}: Permission denied"


def test_the_trainers_run_dir_the_summary_prints_finds_its_report(tmp_path: Path) -> None:
    """The summary's `run dir:` is swift's v<N>-<time>; `safe-sft report` had refused it (hostile42res F5)."""
    from launcher.errors import SafeSftError
    from launcher.show_report import find_report

    swift_runs = [tmp_path / "v0-20261128-100000", tmp_path / "v1-20261128-110000"]
    for number, swift_run in enumerate(swift_runs):
        swift_run.mkdir()
        ours = tmp_path / "safe-sft" / f"2026112{number}" / "report.json"
        ours.parent.mkdir(parents=True)
        ours.write_text(json.dumps({"final_run_dir": str(swift_run), "attempts": [{"run_dir": str(swift_run)}]}))
    assert find_report(swift_runs[0]) == tmp_path / "safe-sft" / "20261120" / "report.json"
    assert find_report(swift_runs[1]) == tmp_path / "safe-sft" / "20261121" / "report.json"
    elsewhere = tmp_path / "v2-20261128-120000"
    elsewhere.mkdir()
    with pytest.raises(SafeSftError, match=r"no safe-sft report\.json under"):
        find_report(elsewhere)


def test_the_summary_says_where_each_attempt_went_on_from() -> None:
    """One resumed attempt is a line of its own, not a `ladder:` block with nothing changed; a retry with no
    checkpoint before it says it trained from step 0."""
    from launcher.model import Failure, FailureKind
    from launcher.plan.degrade import Settings
    from launcher.plan.settings import Resume
    from launcher.run.records import AttemptRecord, RunResult
    from launcher.run.report import summary

    def record(number: int, resumed: int | None, failed: bool = False, change: str | None = None) -> AttemptRecord:
        resume = Resume(f"out/v1/checkpoint-{resumed}", resumed, False) if resumed is not None else None
        failure = Failure(FailureKind.CUDA_OOM, ("CUDA out of memory",), 1, 1) if failed else None
        return AttemptRecord(
            number, Settings(2, 2, 2), [], {}, "", "", change=change, resumed_from=resume, failure=failure
        )

    alone = summary(RunResult("succeeded", [record(1, 6)], 0), Path("r.json")).splitlines()
    assert "  attempt 1: resumed from step 6" in alone and "  ladder:" not in alone
    fresh = summary(RunResult("succeeded", [record(1, None)], 0), Path("r.json")).splitlines()
    assert not any(line.startswith("  attempt") or line == "  ladder:" for line in fresh)
    two = [record(1, None, failed=True), record(2, None, change="no change")]
    lines = summary(RunResult("succeeded", two, 0), Path("r.json")).splitlines()
    retry = "    attempt 2: no change; from step 0 (no complete checkpoint before it) -> finished"
    assert lines.index("  ladder:") == lines.index(retry) - 1


def test_a_run_that_did_not_finish_names_the_checkpoint_a_rerun_goes_on_from() -> None:
    """A give-up had named only the last attempt's run dir, which held no checkpoint (the work was in the one
    its attempts resumed from); an interrupt before swift named its run dir named nothing (hostile45report F6)."""
    from launcher.model import Failure, FailureKind
    from launcher.plan.degrade import Settings
    from launcher.plan.settings import Resume
    from launcher.run.records import AttemptRecord, RunResult
    from launcher.run.report import report_json, summary

    oom = Failure(FailureKind.CUDA_OOM, ("CUDA out of memory",), 1, 1)
    first = AttemptRecord(1, Settings(2, 2, 2), [], {}, "", "", failure=oom, last_step=3, saved_step=2,
                          checkpoints_written=["out/v0/checkpoint-2"])  # fmt: skip
    resumed = Resume("out/v0/checkpoint-2", 2, False)
    second = AttemptRecord(2, Settings(1, 4, 2), [], {}, "", "", failure=oom, resumed_from=resumed, last_step=3)
    gave_up = RunResult("failed", [first, second], 1, "--max-attempts 2 reached")
    said = "  go on: rerun with --resume-latest; it resumes from out/v0/checkpoint-2 (step 2)"
    assert said in summary(gave_up, Path("r.json")).splitlines()
    assert report_json(gave_up.attempts, gave_up, [])["go_on_from"] == "out/v0/checkpoint-2"
    stopped = RunResult("interrupted", [first], 130)  # stopped before a second attempt
    assert said in summary(stopped, Path("r.json")).splitlines()
    bare = AttemptRecord(1, Settings(2, 2, 2), [], {}, "", "", failure=oom, last_step=1)
    lines = summary(RunResult("failed", [bare], 1, "x"), Path("r.json")).splitlines()
    assert "  no complete checkpoint was saved: a rerun starts from step 0" in lines
    # after an error a rerun meets again, a rerun starts over only once it is fixed (hostile47lf F12)
    refused = Failure(FailureKind.USER_ERROR, ("ValueError: Output directory already exists",), 0, 1)
    lines = summary(RunResult("failed", [replace(bare, failure=refused)], 1, "x"), Path("r.json")).splitlines()
    assert "  no complete checkpoint was saved: a rerun, once the error above is fixed, starts from step 0" in lines
    finished = RunResult("succeeded", [first, replace(second, failure=None)], 0)
    assert not any("go on" in line for line in summary(finished, Path("r.json")).splitlines())
    assert report_json(finished.attempts, finished, [])["go_on_from"] is None


def test_a_run_that_ended_in_a_versioned_dir_says_the_output_dirs_last_checkpoint_is_not_its_final_one(
    tmp_path: Path,
) -> None:
    """--add_version false: an attempt went to a versioned dir rather than save over a half-written checkpoint-4,
    and swift's output_dir/last-checkpoint still named that one: nothing said so (hostile45report F1)."""
    from launcher.plan.degrade import Settings
    from launcher.run.records import AttemptRecord, RunResult
    from launcher.run.report import summary

    out = tmp_path / "out"
    (out / "checkpoint-4").mkdir(parents=True)
    (out / "last-checkpoint").symlink_to("checkpoint-4")
    final = AttemptRecord(2, Settings(1, 4, 2), [], {}, "", "", run_dir=str(out / "v0-20261129-090101"),
                          versioned_because=f"it would save over {out / 'checkpoint-4'}")  # fmt: skip
    lines = summary(RunResult("succeeded", [final], 0), Path("r.json")).splitlines()
    assert (
        f"  note: {out / 'last-checkpoint'} and {out / 'args.json'} are an earlier attempt's or run's, not this "
        f"run's final ones: load its model from {out / 'v0-20261129-090101'}"
    ) in lines
    (out / "last-checkpoint").unlink()
    assert not any("last-checkpoint" in line for line in summary(RunResult("succeeded", [final], 0), Path("r"))
                   .splitlines())  # fmt: skip


def test_a_killed_run_shows_its_last_logged_step_and_an_output_dir_names_its_other_runs(tmp_path: Path) -> None:
    """A SIGKILLed run's report had shown step "-" although it had logged 4 steps, and `report OUTPUT_DIR`
    showed only the rerun after it (hostile42res F6)."""
    import os
    import socket
    import subprocess
    import sys

    from launcher.show_report import other_runs

    out = tmp_path / "od"
    killed, rerun = out / "safe-sft" / "20261128-225309-1", out / "safe-sft" / "20261128-225342-2"
    swift_dir = out / "v0-20261128-225310"
    swift_dir.mkdir(parents=True)
    steps = [{"loss": 1.0, "global_step/max_steps": f"{n}/6"} for n in (1, 2, 3, 4)]
    (swift_dir / "logging.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    (killed / "attempt-1").mkdir(parents=True)
    resolved = {"output_dir": str(out), "run_dir": str(swift_dir)}
    (killed / "attempt-1" / "swift-args.json").write_text(json.dumps(resolved))
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    process = {"pid": gone, "host": socket.gethostname(), "started": "2026-11-28T22:53:09+00:00"}
    under_way = attempt(1, None, [0.0], {}, [0])
    under_way.update(last_step=None, exit_code=None, duration_s=None, log=str(killed / "attempt-1" / "console.log"))
    data = {"schema": 1, "outcome": "running", "process": process, "attempts": [under_way]}
    (killed / "report.json").write_text(json.dumps(data))
    text = render_report({**data, "_path": str(killed / "report.json")})
    assert "  attempt 1 had logged step 4 when it was killed" in text
    row = next(line for line in text.splitlines() if line.startswith("   1 "))
    assert row.split()[4] == "4"  # the table's step: the same 4, not "-" (hostile45report F12)
    rerun.mkdir(parents=True)
    finished = {"schema": 1, "outcome": "succeeded", "process": {**process, "pid": os.getpid()}, "attempts": []}
    (rerun / "report.json").write_text(json.dumps(finished))
    os.utime(killed / "report.json", (1, 1))  # the older of the two
    line = other_runs(out, rerun / "report.json")
    assert line == (
        f"  1 earlier run(s) in {out / 'safe-sft'}: {killed.name} (killed); "
        f"`safe-sft report {out / 'safe-sft'}/<run>` shows one"
    )
    assert other_runs(rerun, rerun / "report.json") is None  # a run dir given: that run alone


def test_another_nodes_record_of_the_same_run_is_named_as_that_not_as_an_earlier_run(tmp_path: Path) -> None:
    """A 2-node job's output dir holds each node's record: node 0's report listed node 1's as an "earlier run
    (killed)" (hostile46mn F6). A record that trained in the same run dir is the same run's."""
    import os

    from launcher.show_report import other_runs

    records = tmp_path / "out" / "safe-sft"
    run_dir = str(tmp_path / "out" / "v1-20261129-130918")
    older = {"schema": 1, "outcome": "failed", "attempts": [], "final_run_dir": str(tmp_path / "out" / "v0-x")}
    for name, final in (
        ("20261129-120000-1", older),
        ("20261129-130917-2-node0", None),
        ("20261129-130917-3-node1", None),
    ):
        (records / name).mkdir(parents=True)
        data = final or {"schema": 1, "outcome": "succeeded", "attempts": [], "final_run_dir": run_dir}
        (records / name / "report.json").write_text(json.dumps(data))
    os.utime(records / "20261129-120000-1" / "report.json", (1, 1))
    line = other_runs(tmp_path / "out", records / "20261129-130917-2-node0" / "report.json")
    assert line == (
        "  the other node(s) of this run: 20261129-130917-3-node1 (succeeded)\n"
        f"  1 earlier run(s) in {records}: 20261129-120000-1 (failed); `safe-sft report {records}/<run>` shows one"
    )


def test_a_weights_only_resume_is_said_under_the_table(run_dir: Path) -> None:
    """`safe-sft report` showed a weights-only resume as `3->6` alone, where the console had said the optimizer
    and the schedule started over (hostile46mn F6)."""
    data = load_report(run_dir)
    data["attempts"][1]["resumed_from"].update(weights_only=True, why_weights_only="the world size changed (2 -> 1)")
    assert (
        "  attempt 2 resumed step 3's weights only (the world size changed (2 -> 1)): the optimizer and the "
        "learning-rate schedule started over" in render_report(data)
    )
    data["attempts"][1]["resumed_from"]["weights_only"] = False
    assert "weights only" not in render_report(data)
