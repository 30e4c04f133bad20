"""Which checkpoint a resume uses: the newest complete one, across swift's versioned run dirs."""

import time
from pathlib import Path

from launcher.run.checkpoints import latest_complete, snapshot


def make(path: Path, *, state: bool = True, weights: str | None = "model.safetensors", optimizer: bool = True) -> Path:
    path.mkdir(parents=True)
    if state:
        (path / "trainer_state.json").write_text("{}")
    if weights:
        (path / weights).write_text("w")
    if optimizer:
        (path / "optimizer.pt").write_text("o")
    return path


def test_latest_complete_skips_half_written(tmp_path: Path) -> None:
    make(tmp_path / "v0-20260101-000000" / "checkpoint-3")
    make(tmp_path / "v0-20260101-000000" / "checkpoint-6", state=False)  # killed mid-save
    make(tmp_path / "v1-20260101-010000" / "checkpoint-9", weights=None)  # weights never written
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.step == 3
    assert sorted(p.name for p in skipped) == ["checkpoint-6", "checkpoint-9"]


def test_newer_version_dir_and_optimizer_state(tmp_path: Path) -> None:
    make(tmp_path / "v0-a" / "checkpoint-3")
    make(tmp_path / "v1-b" / "checkpoint-6", optimizer=False)
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None
    assert (checkpoint.step, checkpoint.has_optimizer_state) == (6, False)


def test_deepspeed_layout_and_adapters(tmp_path: Path) -> None:
    ds = make(tmp_path / "checkpoint-4", weights=None, optimizer=False)
    (ds / "global_step4").mkdir()
    (ds / "global_step4" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt").write_text("x")
    (ds / "latest").write_text("global_step4")
    make(tmp_path / "checkpoint-2", weights="adapter_model.safetensors")
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None
    assert (checkpoint.step, checkpoint.has_optimizer_state) == (4, True)


def test_nothing_there(tmp_path: Path) -> None:
    assert latest_complete(tmp_path / "missing") == (None, [])


def test_reads_only(tmp_path: Path) -> None:
    make(tmp_path / "checkpoint-1", state=False)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    latest_complete(tmp_path)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_zero_stage_of_names_and_configs() -> None:
    from launcher.run.checkpoints import zero_stage

    assert [
        zero_stage(v) for v in ("zero2", "zero3_offload", None, '{"zero_optimization": {"stage": 3}}', "x.json")
    ] == [2, 3, None, 3, None]


def test_an_earlier_runs_checkpoints_are_left_out_after_a_snapshot(tmp_path: Path) -> None:
    """Reusing an output dir: the last run's checkpoint-8 is not where this run resumes."""
    make(tmp_path / "v0-earlier" / "checkpoint-8")
    make(tmp_path / "v0-earlier" / "checkpoint-9", state=False)
    before = snapshot(tmp_path)
    make(tmp_path / "v1-this-run" / "checkpoint-3")
    checkpoint, skipped = latest_complete(tmp_path, before=before)
    assert checkpoint is not None and checkpoint.path == tmp_path / "v1-this-run" / "checkpoint-3"
    assert skipped == []  # an earlier run's half-written checkpoint is not this run's to report
    assert latest_complete(tmp_path)[0].step == 8  # type: ignore[union-attr]  # without the snapshot


def test_a_snapshot_still_allows_where_this_run_started_and_what_it_rewrote(tmp_path: Path) -> None:
    started = make(tmp_path / "v0-earlier" / "checkpoint-4")
    rewritten = make(tmp_path / "checkpoint-2")
    before = snapshot(tmp_path)
    assert latest_complete(tmp_path, before=before) == (None, [])
    checkpoint, _ = latest_complete(tmp_path, before=before, also=started)
    assert checkpoint is not None and checkpoint.path == started
    time.sleep(0.01)
    (rewritten / "trainer_state.json").write_text('{"global_step": 2}')  # --add_version false: same name
    checkpoint, _ = latest_complete(tmp_path, before=before)
    assert checkpoint is not None and checkpoint.path == rewritten


def test_checkpoint_problem_passes_a_complete_checkpoint_and_names_what_is_wrong(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from launcher.run.checkpoints import checkpoint_problem

    good = tmp_path / "checkpoint-3"
    good.mkdir()
    (good / "trainer_state.json").write_text('{"global_step": 3}')
    (good / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    assert checkpoint_problem(good) is None
    assert checkpoint_problem(tmp_path / "nowhere") == "does not exist"
    (good / "trainer_state.json").write_text('{"global_st')
    assert (checkpoint_problem(good) or "").startswith("has an unreadable trainer_state.json")
    (good / "trainer_state.json").unlink()
    assert "not a complete checkpoint" in (checkpoint_problem(good) or "")
