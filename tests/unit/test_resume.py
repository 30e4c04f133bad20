"""Full resume or weights only: who wrote the checkpoint (by its path, not by a clock) and with what."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.plan.degrade import Settings
from launcher.run.checkpoints import latest_complete
from launcher.run.resume import weights_only_reason
from tests.unit.test_checkpoints import make


def settings(deepspeed: str | None = "zero2", world: int = 2) -> Settings:
    return Settings(micro_batch=1, grad_accum=4, world_size=world, deepspeed=deepspeed)


@pytest.mark.parametrize(
    ("writer", "now", "optimizer", "reason"),
    [
        pytest.param(settings(), settings(), True, "", id="same-settings-full-resume"),
        pytest.param(settings(), settings(), False, "no optimizer state", id="save-only-model"),
        pytest.param(settings("zero2"), settings("zero3"), True, "ZeRO stage changed (zero2 -> zero3)", id="stage"),
        pytest.param(settings(world=2), settings(world=4), True, "world size changed", id="world-size"),
        pytest.param(None, settings("zero2"), True, "", id="earlier-run-same-stage"),
        pytest.param(None, settings("zero3"), True, "another ZeRO stage by an earlier run", id="earlier-run-other"),
    ],
)
def test_weights_only_reason(
    tmp_path: Path, writer: Settings | None, now: Settings, optimizer: bool, reason: str
) -> None:
    run_dir = tmp_path / "v1-20260101-000000"
    make(run_dir / "checkpoint-3", optimizer=optimizer)
    (run_dir / "args.json").write_text(json.dumps({"deepspeed": "zero2"}))
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None
    other = {tmp_path / "v2-20260101-000100" / "checkpoint-6": settings("zero3", world=8)}  # not the writer
    writers = {checkpoint.path: writer, **other} if writer else other
    found = weights_only_reason(checkpoint, now, writers)
    assert (reason in found) if reason else found == ""


def test_with_add_version_false_the_writer_is_the_attempt_that_wrote_that_checkpoint(tmp_path: Path) -> None:
    """Attempts 1 (zero2) and 2 (zero3) both write into output_dir: checkpoint-3 is attempt 1's."""
    make(tmp_path / "checkpoint-3")
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None
    writers = {tmp_path / "checkpoint-3": settings("zero2"), tmp_path / "checkpoint-5": settings("zero3")}
    assert "ZeRO stage changed (zero2 -> zero3)" in weights_only_reason(checkpoint, settings("zero3"), writers)
