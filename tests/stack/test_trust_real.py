"""Trust under faults, on the real stack: one run per output dir, a killed run's report, a full disk.

Real safe-sft processes training the tiny model (swift sft + torchrun, 2 processes, gloo, on the CPU),
real signals, and a real tmpfs of a few hundred KiB as the output dir's disk.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.stack.test_supervise_real import _alive, fault_env, last_step, report, run_dirs, safe_sft, swift_args


def _start(tiny, out: Path, tmp: Path) -> tuple[subprocess.Popen[str], list[int]]:  # type: ignore[no-untyped-def]
    """A long safe-sft run, returned once its ranks train (their pids recorded by the fault plugin)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "--grace-period", "10",
         *swift_args(tiny, out, max_steps=100000, save_steps=100000)],
        env=fault_env(tmp), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ranks = list((tmp / "ranks").glob("rank-*.json"))
        logs = list(out.glob("v*/logging.jsonl"))
        if len(ranks) == 2 and logs and logs[0].stat().st_size > 0:
            return proc, [json.loads(r.read_text())["pid"] for r in ranks]
        time.sleep(0.5)
    proc.kill()
    pytest.fail("training never started")


def test_a_second_run_in_the_same_output_dir_is_refused_and_a_killed_runs_report_and_lock(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    # an earlier run's report in the same output dir: `safe-sft report` must never show it for this run
    earlier = out / "safe-sft" / "20200101-000000-000000"
    earlier.mkdir(parents=True)
    (earlier / "report.json").write_text(json.dumps({"schema": 1, "outcome": "succeeded", "attempts": []}))
    os.utime(earlier / "report.json", (1577836800, 1577836800))

    first, ranks = _start(tiny, out, tmp_path)
    try:
        started = time.monotonic()
        second = safe_sft(swift_args(tiny, out, max_steps=2), fault_env(tmp_path / "second"), timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert time.monotonic() - started < 60
        error = next(line for line in second.stderr.splitlines() if line.startswith("safe-sft: error:"))
        assert str(out) in error and f"pid {first.pid} on " in error and "started 20" in error
        assert "Traceback" not in second.stderr
        assert not (tmp_path / "second" / "ranks").exists()  # it trained nothing
        assert first.poll() is None  # the first run goes on

        # SIGKILL safe-sft mid-run: its report shows this run, running, never the earlier run's outcome
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    deadline = time.monotonic() + 15
    while _alive(ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    shown = subprocess.run(
        [sys.executable, "-m", "launcher", "report", str(out)], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    headline = shown.stdout.splitlines()[0]
    assert "20200101" not in headline and ": running after" in headline, shown.stdout
    assert f"pid {first.pid}" in shown.stdout and "is gone" in shown.stdout
    as_json = json.loads(
        subprocess.run(
            [sys.executable, "-m", "launcher", "report", "--json", str(out)], capture_output=True, text=True
        ).stdout
    )
    assert (as_json["outcome"], as_json["process"]["pid"]) == ("running", first.pid)
    [in_flight] = as_json["attempts"]  # the attempt it was killed in, as it stood: under way
    assert (in_flight["number"], in_flight["exit_code"], in_flight["ended"]) == (1, None, None)

    # the killed run's lock is stale: the next run takes it over with a warning, and trains
    third = safe_sft(swift_args(tiny, out, max_steps=2), fault_env(tmp_path / "third"))
    assert third.returncode == 0, third.stderr[-3000:]
    warning = next(line for line in third.stderr.splitlines() if "took over the lock" in line)
    assert f"pid {first.pid}" in warning and str(out) in warning
    reports = sorted((out / "safe-sft").glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    assert json.loads(reports[-1].read_text())["outcome"] == "succeeded"
    assert json.loads((out / "safe-sft" / "lock").read_text() or "null") is None  # released: no record left


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real tmpfs of 1200 KiB: room for swift's first files, not for a checkpoint of the tiny model."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.fail(f"CANNOT RUN: mounting a tmpfs needs root: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_ends_with_disk_full_a_summary_and_no_traceback_of_safe_sft(tiny, small_disk: Path) -> None:  # type: ignore[no-untyped-def]
    out = small_disk / "out"
    result = safe_sft(swift_args(tiny, out), fault_env(small_disk.parent))
    assert result.returncode == 1, result.stderr[-3000:]
    summary = result.stderr[result.stderr.index("safe-sft: failed after 1 attempt(s)") :]
    assert "disk_full" in summary
    gave_up = next(line for line in summary.splitlines() if "gave up:" in line)
    assert f"{out} has " in gave_up and " free" in gave_up  # names the dir and its free space
    assert "launcher/cli.py" not in result.stderr and "launcher/run/" not in result.stderr  # no safe-sft traceback
    [report_path] = (out / "safe-sft").glob("*/report.json")
    # the final state is recorded on the full disk: the reserve kept beside the report was given up for it
    data = json.loads(report_path.read_text())
    assert (data["outcome"], data["root_cause"]["kind"], data["attempts"][0]["exit_code"]) == ("failed", "disk_full", 1)
    assert "No space left on device" in data["root_cause"]["evidence"][0]  # the system's words, not torch's
    assert not (report_path.parent / "report.reserve").exists()


def test_a_file_size_limit_that_stops_a_save_is_named_not_called_a_full_disk(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`ulimit -f 700` (KiB) on a disk with room: the save fails as on a full disk, and the summary had told
    the user to free space, in the line that said the disk had 75 GiB free."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (700 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    out = tmp_path / "out"
    result = safe_sft(swift_args(tiny, out), fault_env(tmp_path), preexec_fn=limited)
    assert result.returncode == 1, result.stderr[-3000:]
    gave_up = next(line for line in result.stderr.splitlines() if "gave up:" in line)
    assert "a file-size limit: ulimit -f allows files of 700.0 KiB" in gave_up, gave_up
    assert "(ulimit -f unlimited)" in gave_up and "free space" not in gave_up


def test_a_truncated_newest_checkpoint_is_skipped_and_the_older_good_one_resumed(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """At step 7 rank 0 cuts checkpoint-6's weights in half (as a full disk leaves them), then an OOM."""
    out = tmp_path / "out"
    result = safe_sft(swift_args(tiny, out), fault_env(tmp_path, "corrupt_oom:7:0"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "cuda_oom"
    [run_dir, *_] = sorted(out.glob("v*-*"))
    cut = run_dir / "checkpoint-6"
    assert second["resumed_from"]["checkpoint"] == str(run_dir / "checkpoint-3")
    assert second["skipped_incomplete_checkpoints"] == [str(cut)]
    assert "model.safetensors" in second["skipped_why"][str(cut)] and "truncated" in second["skipped_why"][str(cut)]
    assert f"skipped unreadable checkpoint {cut}" in result.stderr
    assert (cut / "model.safetensors").stat().st_size > 0  # left as it was: never deleted or rewritten
    last = sorted(out.glob("v*-*"), key=lambda p: int(p.name[1:].split("-")[0]))[-1]
    assert json.loads((last / "logging.jsonl").read_text().splitlines()[-2]).get("global_step/max_steps") == "8/8"


def test_a_complete_checkpoint_that_fails_to_load_is_set_aside_and_the_one_before_resumed(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """At step 7 rank 0 leaves checkpoint-6 complete but unloadable (another model's optimizer state), then an
    OOM. Attempt 2 dies loading checkpoint-6; attempt 3 goes on from checkpoint-3 with the same settings."""
    out = tmp_path / "out"
    result = safe_sft(swift_args(tiny, out), fault_env(tmp_path, "unloadable_oom:7:0"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second, third = report(out)["attempts"]
    assert (first["failure"]["kind"], second["resumed_from"]["step"], third["resumed_from"]["step"]) == (
        "cuda_oom",
        6,
        3,
    )
    aside = second["set_aside_checkpoint"]
    assert aside["path"] == second["resumed_from"]["checkpoint"] and "parameter groups" in aside["why"]
    assert third["change"]["what"] == "no change" and third["settings"] == second["settings"]
    assert Path(aside["path"], "optimizer.pt").is_file()  # set aside, never deleted or renamed
    assert last_step(run_dirs(out)[-1]) == "8/8"


def _tree(root: Path) -> dict[str, str]:
    """Every path under root (safe-sft's own folder left out) -> 'dir', 'file' or the symlink's target."""
    tree = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if rel == "safe-sft" or rel.startswith("safe-sft/"):
            continue
        tree[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else ("dir" if path.is_dir() else "file")
    return tree


# args.json keys that differ from plain swift on purpose, each with its reason (checked below, not ignored);
# paths are compared with the supervised run's output dir put back to the plain run's
EXPECTED_DIFFERENCES = {
    "resume_from_checkpoint",  # the final attempt resumed from checkpoint-3
    "per_device_train_batch_size", "gradient_accumulation_steps",  # the OOM rung: 2x2 -> 1x4, same global batch
    "ddp_timeout",  # safe-sft's watchdog, not a collective's timeout, notices a stalled rank
}  # fmt: skip


def _same_dir(value: object, ours: Path, theirs: Path) -> object:
    return value.replace(str(ours), str(theirs)) if isinstance(value, str) else value


def _fields(text: str) -> dict[str, str]:
    """`TrainingArguments(a=1, b=[1, 2], ...)` (swift's `training_args` in args.json) as a dict of texts."""
    inner = text[text.index("(") + 1 : text.rindex(")")]
    return dict(part.split("=", 1) for part in re.split(r", (?=\w+=)", inner))


def test_with_add_version_false_a_resumed_run_leaves_the_layout_plain_swift_leaves(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A CUDA OOM at step 4 and a resume, against plain `swift sft` with the same arguments, file by file."""
    supervised, plain = tmp_path / "supervised", tmp_path / "plain"
    result = safe_sft(swift_args(tiny, supervised, add_version="false"), fault_env(tmp_path / "s", "oom_step:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    swift = str(Path(sys.executable).parent / "swift")
    done = subprocess.run(
        [swift, "sft", *swift_args(tiny, plain, add_version="false")],
        env=fault_env(tmp_path / "p"), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    assert _tree(supervised) == _tree(plain)  # the same names, the same last-checkpoint link
    assert _tree(supervised)["last-checkpoint"] == "-> checkpoint-8"
    assert sorted(p.name for p in supervised.iterdir()) == ["args.json", "checkpoint-3", "checkpoint-6",
                                                            "checkpoint-8", "last-checkpoint", "logging.jsonl",
                                                            "safe-sft"]  # fmt: skip

    # args.json describes the final model: the resumed attempt's arguments
    ours, theirs = (json.loads((d / "args.json").read_text()) for d in (supervised, plain))
    assert sorted(ours) == sorted(theirs)
    differing = {key for key in ours if _same_dir(ours[key], supervised, plain) != theirs[key]}
    assert differing - EXPECTED_DIFFERENCES == {"training_args"}, {k: (ours[k], theirs[k]) for k in differing}
    inner_ours, inner_theirs = (_fields(str(_same_dir(a["training_args"], supervised, plain))) for a in (ours, theirs))
    assert sorted(inner_ours) == sorted(inner_theirs)
    inner_differing = {key for key in inner_ours if inner_ours[key] != inner_theirs[key]}
    assert inner_differing - EXPECTED_DIFFERENCES == set(), inner_differing
    assert ours["resume_from_checkpoint"] == str(supervised / "checkpoint-3")
    assert (ours["per_device_train_batch_size"], ours["gradient_accumulation_steps"]) == (1, 4)
    assert ours["output_dir"] == str(supervised)
    for checkpoint in ("checkpoint-6", "checkpoint-8"):
        saved = json.loads((supervised / checkpoint / "args.json").read_text())
        assert saved["per_device_train_batch_size"] == 1  # written by the resumed attempt

    data = json.loads(next((supervised / "safe-sft").glob("*/report.json")).read_text())
    assert len(data["attempts"]) == 2 and data["final_run_dir"] == str(supervised)
    assert data["attempts"][1]["versioned_because"] is None
    assert f"run dir: {supervised}" in result.stderr

    # logging.jsonl: swift appends; its last lines are the final model's, as in the plain run
    def final(run: Path) -> dict:  # type: ignore[type-arg]
        return json.loads((run / "logging.jsonl").read_text().splitlines()[-1])  # type: ignore[no-any-return]

    assert final(supervised)["global_step"] == final(plain)["global_step"] == 8
    assert final(supervised)["last_model_checkpoint"] == str(supervised / "checkpoint-8")


def _digests(out: Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.glob("checkpoint-*/**/*"))
        if p.is_file()
    }


def test_resume_latest_with_only_incomplete_checkpoints_and_add_version_false_saves_over_none(
    tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Every checkpoint of an earlier --add_version false run cut short (a full disk, a copy that stopped):
    --resume-latest finds none complete and starts from step 0. It trained into output_dir itself and
    rewrote the very checkpoints it had just said it skipped; now that attempt gets a versioned dir."""
    out = tmp_path / "out"
    first = safe_sft(swift_args(tiny, out, add_version="false", max_steps=6), fault_env(tmp_path / "a"))
    assert first.returncode == 0, first.stderr[-3000:]
    for weights in out.glob("checkpoint-*/model.safetensors"):
        with weights.open("r+b") as handle:
            handle.truncate(weights.stat().st_size // 2)
    before = _digests(out)
    assert {Path(name).parts[0] for name in before} == {"checkpoint-3", "checkpoint-6"}

    again = safe_sft(
        ["--resume-latest", *swift_args(tiny, out, add_version="false", max_steps=6)], fault_env(tmp_path / "b")
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipped unreadable checkpoint" in again.stderr
    assert "--add_version true for this attempt: it would save over" in again.stderr
    assert _digests(out) == before  # not one byte of the skipped checkpoints changed
    [versioned] = list(out.glob("v*-*"))
    assert (versioned / "checkpoint-6" / "trainer_state.json").is_file()  # the run itself trained to the end


def test_an_add_version_false_rerun_that_saves_none_of_the_old_steps_writes_in_place_as_swift_does(
    tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A rerun from step 0 beside an earlier run's checkpoint-2 that saves only checkpoint-3 cannot write over
    it: plain swift writes checkpoint-3 into the dir, last-checkpoint and args.json then describe it. safe-sft
    had sent it to a versioned dir, "it would save over checkpoint-2"."""
    out = tmp_path / "out"
    first = safe_sft(swift_args(tiny, out, add_version="false", max_steps=2, save_steps=2), fault_env(tmp_path / "a"))
    assert first.returncode == 0, first.stderr[-3000:]
    before = _digests(out)
    again = safe_sft(swift_args(tiny, out, add_version="false", max_steps=3, save_steps=3), fault_env(tmp_path / "b"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "would save over" not in again.stderr and not list(out.glob("v*-*"))
    assert (out / "checkpoint-3" / "trainer_state.json").is_file()
    assert (out / "last-checkpoint").resolve() == (out / "checkpoint-3").resolve()
    after = _digests(out)
    assert before and {name: after[name] for name in before} == before  # checkpoint-2, not one byte changed


def test_resuming_in_place_from_the_users_own_checkpoint_with_add_version_false(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`--add_version false --resume_from_checkpoint out/checkpoint-6`, as plain swift resumes in place: the
    run writes checkpoint-9 beside the others, touches none of them, and the report records where it began."""
    out = tmp_path / "out"
    first = safe_sft(swift_args(tiny, out, add_version="false", max_steps=6), fault_env(tmp_path / "a"))
    assert first.returncode == 0, first.stderr[-3000:]
    before = _digests(out)
    own = out / "checkpoint-6"
    again = safe_sft(
        swift_args(tiny, out, add_version="false", max_steps=9, resume_from_checkpoint=own), fault_env(tmp_path / "b")
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert not list(out.glob("v*-*"))  # in place, as plain swift writes it
    assert {k: v for k, v in _digests(out).items() if not k.startswith("checkpoint-9")} == before
    assert (out / "checkpoint-9" / "trainer_state.json").is_file()
    [path] = sorted((out / "safe-sft").glob("*/report.json"))[-1:]
    attempt = json.loads(path.read_text())["attempts"][0]
    assert (attempt["resumed_from"]["checkpoint"], attempt["resumed_from"]["step"]) == (str(own), 6)
