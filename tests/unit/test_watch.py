"""The progress watchdog as a table of (time, step, checkpoints) observations."""

from pathlib import Path

import pytest

from launcher.run.evidence import newest_run_dir, run_dir_names
from launcher.run.watch import ProgressWatch


def watch() -> ProgressWatch:
    return ProgressWatch(Path("/nonexistent"), frozenset(), started=100.0, hang_timeout=60, startup_timeout=600)


@pytest.mark.parametrize(
    ("observations", "now", "stalled"),
    [
        pytest.param([], 650, False, id="loading-within-startup-allowance"),
        pytest.param([], 701, True, id="no-first-step-in-time"),
        pytest.param([(200, 1, 0)], 259, False, id="step-then-quiet-under-timeout"),
        pytest.param([(200, 1, 0)], 261, True, id="step-then-quiet-over-timeout"),
        pytest.param([(200, 1, 0), (250, 1, 1)], 300, False, id="a-new-checkpoint-is-progress"),
        pytest.param([(200, 1, 0), (250, 2, 0), (300, 2, 0)], 311, True, id="same-step-again-is-not-progress"),
    ],
)
def test_stalled(observations: list[tuple[float, int, int]], now: float, stalled: bool) -> None:
    w = watch()
    for at, step, checkpoints in observations:
        w.observe(at, step, checkpoints)
    finding = w.stalled(now)
    assert (finding is not None) is stalled
    if finding and observations:
        assert "--hang-timeout" in finding
    elif finding:
        assert "--startup-timeout" in finding


def test_poll_reads_swifts_log_in_the_run_dir_this_attempt_made(tmp_path: Path) -> None:
    earlier = tmp_path / "v10-20260101-000000"  # an earlier run's, with a later step and a higher number
    earlier.mkdir()
    (earlier / "logging.jsonl").write_text('{"global_step/max_steps": "9/10"}\n')
    existing = run_dir_names(tmp_path)
    for name, step in (("v11-20260102-000000", 5), ("v12-20260102-000100", 7)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "logging.jsonl").write_text(f'{{"global_step/max_steps": "{step}/10"}}\n')
    w = ProgressWatch(tmp_path, existing, started=0.0, hang_timeout=60, startup_timeout=600)
    assert w.poll(10.0) is None
    assert w.step == 7  # the newest new run dir, chosen by its version number, not by a clock
    assert newest_run_dir(tmp_path, existing) == tmp_path / "v12-20260102-000100"


def test_with_add_version_false_an_attempt_reads_only_its_own_lines_of_the_shared_log(tmp_path: Path) -> None:
    """swift appends to output_dir/logging.jsonl: attempt 2's startup is not judged by attempt 1's step 4."""
    from launcher.run.evidence import last_logged_step, log_size

    log = tmp_path / "logging.jsonl"
    log.write_text('{"global_step/max_steps": "4/8"}\n')
    before = log_size(tmp_path)
    w = ProgressWatch(tmp_path, frozenset(), started=0.0, hang_timeout=60, startup_timeout=600,
                      log_bytes_before=before)  # fmt: skip
    assert w.poll(10.0) is None and w.step is None  # still loading: the startup allowance applies
    assert newest_run_dir(tmp_path, frozenset(), before) is None
    with log.open("a") as handle:
        handle.write('{"global_step/max_steps": "5/8"}\n')
    assert w.poll(20.0) is None and w.step == 5
    assert newest_run_dir(tmp_path, frozenset(), before) == tmp_path
    assert (last_logged_step(tmp_path, before), last_logged_step(tmp_path)) == (5, 5)
    assert last_logged_step(tmp_path, log_size(tmp_path)) is None
