"""The progress watchdog as a table of observations, and what it reads: swift's run dir as swift reported
it, checkpoint writes, and progress bars in the console output."""

import json
from pathlib import Path

import pytest

from launcher.run.evidence import attempt_run_dir
from launcher.run.watch import OutputProgress, ProgressWatch, checkpoint_signature


def watch(hang: float = 60, startup: float = 600) -> ProgressWatch:
    return ProgressWatch(Path("/nonexistent"), started=100.0, hang_timeout=hang, startup_timeout=startup)


Seen = tuple[float, int | None, int, int]  # (time, step, checkpoint bytes, output marks)


@pytest.mark.parametrize(
    ("observations", "now", "stalled"),
    [
        pytest.param([], 650, False, id="loading-within-startup-allowance"),
        pytest.param([], 701, True, id="no-progress-before-the-first-step-in-time"),
        pytest.param([(650, None, 0, 1)], 1200, False, id="a-moving-map-bar-extends-the-startup-allowance"),
        pytest.param([(650, None, 0, 1)], 1251, True, id="then-quiet-for-the-startup-allowance"),
        pytest.param([(200, 1, 0, 0)], 259, False, id="step-then-quiet-under-timeout"),
        pytest.param([(200, 1, 0, 0)], 261, True, id="step-then-quiet-over-timeout"),
        pytest.param([(200, 1, 0, 0), (250, 1, 10, 0)], 300, False, id="a-checkpoint-being-written-is-progress"),
        pytest.param([(200, 1, 0, 0), (250, 1, 0, 3)], 300, False, id="an-evaluation-bar-moving-is-progress"),
        pytest.param([(200, 1, 0, 0), (250, 2, 0, 0), (300, 2, 0, 0)], 311, True, id="same-again-is-not-progress"),
    ],
)
def test_stalled(observations: list[Seen], now: float, stalled: bool) -> None:
    w = watch()
    for at, step, size, marks in observations:
        w.observe(at, step, (1 if size else 0, size), marks)
    finding = w.stalled(now)
    assert (finding is not None) is stalled
    if finding and any(step is not None for _, step, _, _ in observations):
        assert "--hang-timeout" in finding
    elif finding:
        assert "--startup-timeout" in finding


def test_hang_timeout_0_turns_the_watchdog_off() -> None:
    w = watch(hang=0)
    w.observe(200, 1, (0, 0))
    assert w.stalled(10**9) is None


def test_startup_timeout_0_sets_no_limit_before_the_first_step() -> None:
    assert watch(startup=0).stalled(10**9) is None


# Console output as it comes through safe-sft's pipe: tqdm redraws a bar with \r, several bars interleave.
MAP = "Map:   0%|          | 0/64 [00:00<?, ? examples/s]\rMap:  50%|█████     | 32/64 [00:01<00:01, 30 examples/s]"
EVAL = "\r 25%|██▌       | 1/4 [00:00<00:00,  9.1it/s]\r 50%|█████     | 2/4 [00:00<00:00,  9.3it/s]"
COUNTER = "\rMap (num_proc=1): 3850 examples [00:09, 103.48 examples/s]\rMap (num_proc=1): 4850 examples [00:19]"
TRAIN_AGAIN = "Train:  40%|████      | 4/10 [00:02<00:03]\rTrain:  40%|████      | 4/10 [00:03<00:04]\r"


@pytest.mark.parametrize(
    ("chunks", "marks"),
    [
        pytest.param([MAP + "\n"], 2, id="a-map-bar-moving-twice"),
        pytest.param([MAP[:40], MAP[40:] + "\r"], 2, id="a-bar-split-across-two-reads"),
        pytest.param([MAP + "\r", EVAL + "\r"], 4, id="map-then-evaluation"),
        pytest.param([COUNTER], 2, id="a-bar-without-a-total"),
        pytest.param([TRAIN_AGAIN], 1, id="a-bar-redrawn-at-the-same-count-is-one-mark"),
        pytest.param(["[INFO:swift] loading the model\n", "NCCL WARN timeout 30%\n"], 0, id="log-lines-are-not-bars"),
        pytest.param(["Map:  50%|█████     | 32/6"], 0, id="an-unfinished-redraw-waits-for-its-end"),
        pytest.param(["\rMap:  50%|█████     | 32/6", "4 [00:01<00:01]"], 1, id="and-counts-once-whole"),
        pytest.param(["\rMap:  0%|   | 0/64 [00:00<?]", "\rMap:  0%|   | 0/64 [00:01<?]\r"], 1, id="no-double-count"),
    ],
)
def test_output_progress_counts_moving_bars(chunks: list[str], marks: int) -> None:
    progress = OutputProgress()
    for chunk in chunks:
        progress.feed(chunk)
    assert progress.marks == marks


def resolved_file(attempt_dir: Path, run_dir: Path) -> None:
    attempt_dir.mkdir(parents=True, exist_ok=True)
    data = {"output_dir": str(run_dir.parent), "run_dir": str(run_dir), "add_version": True}
    (attempt_dir / "swift-args.json").write_text(json.dumps(data))


def test_poll_reads_swifts_log_in_the_run_dir_swift_reported(tmp_path: Path) -> None:
    out = tmp_path / "output" / "Name"
    for name, step in (("v10-20260101-000000", 9), ("v11-20260102-000000", 5)):
        (out / name).mkdir(parents=True)
        (out / name / "logging.jsonl").write_text(f'{{"global_step/max_steps": "{step}/10"}}\n')
    attempt = tmp_path / "attempt-1"
    w = ProgressWatch(attempt, started=0.0, hang_timeout=60, startup_timeout=600)
    assert w.poll(10.0) is None and w.step is None  # swift has not reported its run dir yet: no guess
    resolved_file(attempt, out / "v11-20260102-000000")
    assert w.poll(20.0) is None and w.step == 5  # the reported one, though v10 has a later step
    assert attempt_run_dir(attempt) == out / "v11-20260102-000000"


def test_poll_reads_the_workers_step_log_for_a_trainer_that_keeps_none(tmp_path: Path) -> None:
    """LLaMA-Factory and a torchrun script log no `global_step/max_steps`: the worker's attempt-N/logging.jsonl
    is their step log, so a mid-run stall is judged by --hang-timeout after its step, and each step's time is
    seen (it was judged as a start-up stall, by --startup-timeout: hostile47lf F1, F2)."""
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    resolved_file(attempt, out)
    w = ProgressWatch(attempt, started=0.0, hang_timeout=20, startup_timeout=600)
    (attempt / "logging.jsonl").write_text('{"global_step/max_steps": "5/10"}\n')
    assert w.poll(10.0) is None and w.step == 5 and w.step_seen == {5: 10.0}
    finding = w.poll(40.0)
    assert finding is not None and finding.startswith("no progress for 20 s after step 5 (--hang-timeout)")


def test_poll_counts_bars_in_the_console_log(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    log = attempt / "console.log"
    log.write_text("")
    w = ProgressWatch(attempt, started=0.0, hang_timeout=60, startup_timeout=30)
    with log.open("a") as handle:
        for second in range(10, 200, 10):
            handle.write(f"Map:  {second // 2}%|█     | {second}/400 [00:01<00:01]\r")
            handle.flush()
            assert w.poll(float(second)) is None  # 190 s before the first step, but a bar keeps moving
    assert w.poll(221.0) is not None


def test_checkpoint_signature_grows_while_a_checkpoint_is_written(tmp_path: Path) -> None:
    assert checkpoint_signature(None) == (0, 0)
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    first = checkpoint_signature(tmp_path)
    (folder / "optimizer.pt").write_bytes(b"x" * 5)
    assert first == (1, 10) and checkpoint_signature(tmp_path) == (1, 15)


def test_with_add_version_false_an_attempt_reads_only_its_own_lines_of_the_shared_log(tmp_path: Path) -> None:
    """swift appends to output_dir/logging.jsonl: attempt 2's startup is not judged by attempt 1's step 4."""
    from launcher.run.evidence import last_logged_step, log_size

    log = tmp_path / "logging.jsonl"
    log.write_text('{"global_step/max_steps": "4/8"}\n')
    before = log_size(tmp_path)
    attempt = tmp_path / "safe-sft" / "attempt-2"
    resolved_file(attempt, tmp_path)
    w = ProgressWatch(attempt, started=0.0, hang_timeout=60, startup_timeout=600, output_dir=tmp_path,
                      log_bytes_before=before)  # fmt: skip
    assert w.poll(10.0) is None and w.step is None  # still loading: the startup allowance applies
    with log.open("a") as handle:
        handle.write('{"global_step/max_steps": "5/8"}\n')
    assert w.poll(20.0) is None and w.step == 5
    assert (last_logged_step(tmp_path, before), last_logged_step(tmp_path)) == (5, 5)
    assert last_logged_step(tmp_path, log_size(tmp_path)) is None
