"""Run and survive, on the real stack: swift sft + torchrun (2 processes, gloo) + DeepSpeed, on the CPU.

Faults come from tests/stack/plugins/faults.py, loaded into every rank with --external_plugins. The
training processes run WITHOUT PYTHONUNBUFFERED: their stdout is block-buffered, as it is for every user
whose output goes through safe-sft's pipes, so late or lost lines are what the classifier sees.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.stack.conftest import plain_run_finished

PLUGIN = Path(__file__).resolve().parent / "plugins" / "faults.py"
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")


def swift_args(tiny: dict[str, object], out: Path, **overrides: object) -> list[str]:
    args: dict[str, object] = {
        "model": tiny["model"], "model_type": "qwen2", "template": "qwen", "check_model": "false",
        "use_cpu": "true", "fp16": "false", "report_to": "none", "dataset": tiny["dataset"],
        "tuner_type": "full", "logging_steps": 1, "save_steps": 3, "max_steps": 8,
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "dataloader_num_workers": 0,
        "external_plugins": PLUGIN, "callbacks": "safe_sft_fault", "output_dir": out,
    }  # fmt: skip
    args.update(overrides)
    return [item for key, value in args.items() for item in (f"--{key}", str(value))]


def fault_env(tmp: Path, fault: str | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "NPROC_PER_NODE": "2",
        "SAFE_SFT_FAULT_ONCE": str(tmp / "fault-fired"),
        "SAFE_SFT_FAULT_RECORD": str(tmp / "ranks"),
    }
    env.pop("PYTHONUNBUFFERED", None)  # block-buffered stdout, as users get it through safe-sft's pipes
    if fault:
        env["SAFE_SFT_FAULT"] = fault
    return env


def safe_sft(args: list[str], env: dict[str, str], timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "launcher", "--grace-period", "10", *args],
        env=env, capture_output=True, text=True, timeout=timeout, **kw,
    )  # fmt: skip


def report(out: Path) -> dict:  # type: ignore[type-arg]
    [path] = glob.glob(str(out / "safe-sft" / "*" / "report.json"))
    return json.loads(Path(path).read_text())  # type: ignore[no-any-return]


def run_dirs(out: Path) -> list[Path]:
    return sorted(out.glob("v*-*"), key=lambda p: int(p.name[1:].split("-")[0]))


def args_json(run_dir: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((run_dir / "args.json").read_text())  # type: ignore[no-any-return]


def last_step(run_dir: Path) -> str:
    lines = (run_dir / "logging.jsonl").read_text().splitlines()
    return [json.loads(line)["global_step/max_steps"] for line in lines if "global_step/max_steps" in line][-1]


def trained_samples(records: Path) -> dict[int, list[str]]:
    """Per optimizer step, the samples the finished model was trained on, over all ranks.

    A step that a later attempt redid (after resuming from an earlier checkpoint) counts as redone:
    the files are read in the order they were last written, so a later attempt's record wins.
    """
    per_step: dict[int, dict[str, list[str]]] = {}
    for path in sorted(records.glob("samples-rank-*.jsonl"), key=lambda p: p.stat().st_mtime_ns):
        rank = path.name.split("-")[2]
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            per_step.setdefault(entry["step"], {})[rank] = entry["samples"]
    return {step: sorted(key for keys in ranks.values() for key in keys) for step, ranks in per_step.items()}


_REFERENCES: dict[tuple[tuple[str, str], ...], dict[int, list[str]]] = {}


def reference_samples(tiny, tmp: Path, env: dict[str, str], **overrides: object) -> dict[int, list[str]]:  # type: ignore[no-untyped-def]
    """What plain `swift sft` trains on, step by step, with the same arguments and no failure."""
    key = tuple(sorted((k, str(v)) for k, v in overrides.items()))
    if key not in _REFERENCES:
        records = tmp / "reference-records"
        swift = str(Path(sys.executable).parent / "swift")
        plain = {k: v for k, v in env.items() if k != "SAFE_SFT_FAULT"} | {"SAFE_SFT_FAULT_RECORD": str(records)}
        out = Path(str(overrides.pop("output_dir", tmp / "reference-out")))
        done = subprocess.run(
            [swift, "sft", *swift_args(tiny, out, **overrides)], env=plain, capture_output=True, text=True, timeout=600
        )
        # what a rank that died at its interpreter's exit trained on is still the reference (plain_run_finished)
        assert plain_run_finished(done, out, 8), done.stderr[-3000:]
        _REFERENCES[key] = trained_samples(records)
    return _REFERENCES[key]


def assert_no_sample_lost_or_repeated(tiny, tmp: Path, env: dict[str, str], **overrides: object) -> None:  # type: ignore[no-untyped-def]
    """The supervised run, failure and resume included, trained on exactly what `swift sft` alone does."""
    reference = reference_samples(tiny, tmp, env, **overrides)
    assert sorted(reference) == list(range(1, 9))
    assert trained_samples(tmp / "ranks") == reference


def test_a_cuda_oom_on_rank1_halves_micro_batch_and_resumes(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)

    def low_memlock() -> None:  # the children must get the hard limit back from safe-sft
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (min(64 * 1024, hard), hard))

    # an earlier, finished run of plain swift sft in the same output dir: its checkpoint-8 is not this
    # run's to resume from; what it trained on is the reference for the samples check below
    reference_samples(tiny, tmp_path, fault_env(tmp_path), output_dir=out)
    result = safe_sft(swift_args(tiny, out), fault_env(tmp_path, "oom_step:4:1"), preexec_fn=low_memlock)
    assert result.returncode == 0, result.stderr[-3000:]
    data = report(out)
    assert data["outcome"] == "succeeded"
    first, second = data["attempts"]
    assert (first["failure"]["kind"], first["failure"]["rank"]) == ("cuda_oom", 1)
    earlier, original_dir, resumed_dir = run_dirs(out)
    assert Path(second["resumed_from"]["checkpoint"]) == original_dir / "checkpoint-3"
    assert second["resumed_from"]["step"] == 3 and second["resumed_from"]["weights_only"] is False
    assert (earlier / "checkpoint-8").is_dir()  # there, complete, and not taken

    # What swift itself ran with in the resumed attempt: half the micro-batch, the same global batch
    resumed, original = args_json(resumed_dir), args_json(original_dir)
    assert (resumed["per_device_train_batch_size"], resumed["gradient_accumulation_steps"]) == (1, 4)
    assert (original["per_device_train_batch_size"], original["gradient_accumulation_steps"]) == (2, 2)
    assert resumed["resume_from_checkpoint"] == str(original_dir / "checkpoint-3")
    assert last_step(resumed_dir) == "8/8"
    assert_no_sample_lost_or_repeated(tiny, tmp_path, fault_env(tmp_path), output_dir=out)
    # the terminal summary: root cause first, then the ladder, then the report
    tail = result.stderr[result.stderr.index("safe-sft: succeeded") :]
    assert tail.index("root cause") < tail.index("ladder") < tail.index("report:")
    # every rank ran with the hard memlock limit that safe-sft raised the soft limit to
    for record in (tmp_path / "ranks").glob("rank-*.json"):
        limits = json.loads(record.read_text())
        assert limits["memlock_soft"] == limits["memlock_hard"] == hard


def _cgroup_v1_writable() -> bool:
    return os.access(CGROUP_MEMORY, os.W_OK) and (CGROUP_MEMORY / "memory.limit_in_bytes").exists()


def _remove_test_cgroup(marker: Path) -> None:
    """The memory cgroup a fault made (its path in `marker`), once its last process has left it."""
    if not marker.exists():
        return
    group = Path(marker.read_text())
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)


def test_b_real_kernel_oom_kill_is_host_oom(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if not _cgroup_v1_writable():
        pytest.fail("CANNOT RUN: a real kernel OOM kill needs a writable cgroup v1 memory controller (run as root)")
    out = tmp_path / "out"
    try:
        result = safe_sft(swift_args(tiny, out), fault_env(tmp_path, "host_oom:4:1"))
        assert result.returncode == 0, result.stderr[-3000:]
        first = report(out)["attempts"][0]["failure"]
        assert (first["kind"], first["rank"], first["exit_code"]) == ("host_oom", 1, -9)
        # counted in this run's own memory cgroup (the rank's cgroup is below it), with its file
        assert any("in this run's memory cgroup" in line and "memory.oom_control" in line for line in first["evidence"])
    finally:
        _remove_test_cgroup(tmp_path / "ranks" / "oom-cgroup")


def test_b2_a_neighbours_kernel_oom_kill_does_not_make_a_ranks_sigkill_a_host_oom(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A real OOM kill in a memory cgroup outside the run's (a neighbouring container), then a SIGKILL of rank 1
    from outside: the host-wide /proc/vmstat count moved, this run's cgroup's did not. The rank was killed, not
    OOM-killed: the same settings once more (hostile47env F2: it was a firm host_oom, and pinning went off)."""
    if not _cgroup_v1_writable():
        pytest.fail("CANNOT RUN: a real kernel OOM kill needs a writable cgroup v1 memory controller (run as root)")
    out = tmp_path / "out"
    try:
        result = safe_sft(swift_args(tiny, out), fault_env(tmp_path, "neighbour_oom_kill:4:1"))
        assert result.returncode == 0, result.stderr[-3000:]
        first, second = report(out)["attempts"]
        assert (first["failure"]["kind"], first["failure"]["rank"], first["failure"]["exit_code"]) == ("killed", 1, -9)
        assert not any("OOM killer ran" in line for line in first["failure"]["evidence"])
        assert second["settings"] == first["settings"]  # the same settings once more
    finally:
        _remove_test_cgroup(tmp_path / "ranks" / "neighbour-cgroup")


def test_b3_a_full_dev_shm_is_warned_of_then_read_from_the_hang_it_causes_and_fixed_by_no_workers(
    tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A real 64 KiB /dev/shm (a private mount namespace) and 2 DataLoader workers per rank: the plan warns with
    the fix; the DataLoader's semaphores (or its workers' batches) do not fit, and the ENOSPC, which names no
    path, is read as the shm failure it is (it was a full disk, given up on), as is the hang that a worker
    dying of it leaves (a communication hang, retried unchanged for an hour each: hostile47env F1, whose
    classification the unit tier holds). Its rung, no workers, trains to the end."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], check=False).returncode:
        pytest.fail("CANNOT RUN: a real small /dev/shm needs `unshare -m` (util-linux, run as root)")
    out = tmp_path / "out"
    mount = 'mount -t tmpfs -o size=64k tmpfs /dev/shm && exec "$@"'
    args = swift_args(tiny, out, dataloader_num_workers=2)
    command = [sys.executable, "-m", "launcher", "--grace-period", "10", "--startup-timeout", "45", *args]
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", mount, "sh", *command],
        env=fault_env(tmp_path), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "/dev/shm is 64.0 KiB: 2 dataloader worker(s) per rank pass each batch through it" in result.stderr
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "shm", first["failure"]
    said = ("No space left on device", "unable to allocate shared memory")
    assert any(words in line for line in first["failure"]["evidence"] for words in said), first["failure"]
    assert second["settings"]["dataloader_num_workers"] == 0
    assert last_step(run_dirs(out)[-1]) == "8/8"


def test_c_and_g_oom_while_saving_then_save_only_model_skipping_the_half_written_checkpoint(
    tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    result = safe_sft(swift_args(tiny, out), fault_env(tmp_path, "oom_save:6:0"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "cuda_oom_save"
    assert second["settings"]["save_only_model"] is True
    assert second["resumed_from"]["step"] == 3
    half_written = run_dirs(out)[0] / "checkpoint-6"
    assert str(half_written) in second["skipped_incomplete_checkpoints"]
    assert half_written.is_dir() and not (half_written / "trainer_state.json").exists()  # left, not deleted
    assert args_json(run_dirs(out)[-1])["save_only_model"] is True
    assert last_step(run_dirs(out)[-1]) == "8/8"
    assert_no_sample_lost_or_repeated(tiny, tmp_path, fault_env(tmp_path))


def test_d_oom_under_zero2_with_micro_batch_1_moves_to_zero3_resuming_weights(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    env = fault_env(tmp_path, "oom_step:4:1")
    result = safe_sft(swift_args(tiny, out, per_device_train_batch_size=1, deepspeed="zero2"), env)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "cuda_oom"
    assert (first["settings"]["deepspeed"], second["settings"]["deepspeed"]) == ("zero2", "zero3")
    assert second["resumed_from"]["weights_only"] is True
    resumed = args_json(run_dirs(out)[-1])
    assert resumed["deepspeed"]["zero_optimization"]["stage"] == 3
    assert resumed["resume_only_model"] is True
    assert last_step(run_dirs(out)[-1]) == "8/8"
    assert_no_sample_lost_or_repeated(tiny, tmp_path, env, per_device_train_batch_size=1, deepspeed="zero2")


def test_a_resume_on_fewer_processes_keeps_the_global_batch_and_trains_every_sample_once(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A 2-process run stopped after checkpoint-3, resumed with --resume-latest on 1 process (the same argv): the
    trainer skips the steps' data as batches of this run's global batch, so at half the checkpoint's it trained
    samples twice (hostile46mn F1). safe-sft passes the accumulation that keeps it, and steps 1-8 train exactly
    the samples plain swift sft trains on 2 processes."""
    out = tmp_path / "out"
    first = {**fault_env(tmp_path, "oom_step:5:0"), "SAFE_SFT_FAULT_RECORD": str(tmp_path / "ranks-a")}
    stopped = safe_sft(["--max-attempts", "1", *swift_args(tiny, out)], first)
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    second = {**fault_env(tmp_path), "NPROC_PER_NODE": "1", "SAFE_SFT_FAULT_RECORD": str(tmp_path / "ranks-b")}
    resumed = safe_sft(["--resume-latest", *swift_args(tiny, out)], second)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "change: gradient_accumulation_steps 2 -> 4 (keep the checkpoint's global batch 8 on 1 process(es)" in (
        resumed.stderr
    )
    assert args_json(run_dirs(out)[-1])["gradient_accumulation_steps"] == 4
    before, after = trained_samples(tmp_path / "ranks-a"), trained_samples(tmp_path / "ranks-b")
    assert sorted(after) == list(range(4, 9))  # resumed from checkpoint-3
    combined = {step: before[step] for step in (1, 2, 3)} | after
    assert combined == reference_samples(tiny, tmp_path, fault_env(tmp_path))


def test_d2_the_users_ignore_data_skip_never_makes_a_retry_start_over(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--ignore_data_skip true, micro-batch 1: the OOM moves the run to ZeRO-2 and resumes checkpoint-3's
    weights only. With the user's flag kept, swift took that for "start afresh from these weights": it trained
    from step 0 into the same dir (--add_version false) and saved over checkpoint-3, the one it resumed from."""
    out = tmp_path / "out"
    knobs = {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "add_version": "false",
             "ignore_data_skip": "true"}  # fmt: skip
    env = fault_env(tmp_path, "oom_step:4:1")
    result = safe_sft(swift_args(tiny, out, **knobs), env)
    assert result.returncode == 0, result.stderr[-3000:]
    second = report(out)["attempts"][1]
    assert (second["settings"]["deepspeed"], second["resumed_from"]["step"]) == ("zero2", 3)
    assert second["resumed_from"]["weights_only"] is True and second["resumed_from"]["started_over"] is None
    assert args_json(out)["ignore_data_skip"] is False
    assert last_step(out) == "8/8"
    assert_no_sample_lost_or_repeated(tiny, tmp_path, env, **knobs)


def test_j_guided_ladder_moves_two_knobs_from_the_oom_messages_figure(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The OOM message says the GPU had 3 GiB. The estimate for the failed settings (micro-batch 2, no
    checkpointing, max_length 131072: logits, activations and the 2 GiB fitted CUDA context dominate) is
    6.06 GiB, so it proves nothing above the prior (x0.7): room 0.9 x 3 / 0.7 = 3.86 GiB of estimate.
    Micro-batch 1 alone (4.17) or checkpointing alone (4.84) do not fit, so today's ladder needs two
    attempts (micro-batch, then checkpointing); micro-batch 1 with checkpointing (3.56) fits, and the guided
    ladder takes both at once. (The figures follow the constants in launcher/plan/estimate.py: with 1.75 GiB
    and 16 % they were 5.87, 3.95, 4.64 and 3.34, and the card 2.75 GiB.)"""
    out = tmp_path / "out"
    knobs = {"gradient_checkpointing": "false", "max_length": 131072}
    capacity_gib = 3.0
    env = {**fault_env(tmp_path, "oom_step:4:1"), "SAFE_SFT_FAULT_OOM_GIB": str(capacity_gib)}
    result = safe_sft(swift_args(tiny, out, **knobs), env)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "cuda_oom"
    assert second["change"]["what"].count(";") == 1, second["change"]
    assert (second["settings"]["per_device_train_batch_size"], second["settings"]["gradient_checkpointing"]) == (
        1,
        True,
    )
    assert second["settings"]["gradient_accumulation_steps"] == 4  # the global batch kept
    assert 0 < second["predicted_need_bytes"] <= 0.9 * capacity_gib * (1 << 30)
    resumed = args_json(run_dirs(out)[-1])
    assert (resumed["per_device_train_batch_size"], resumed["gradient_checkpointing"]) == (1, True)
    assert last_step(run_dirs(out)[-1]) == "8/8"
    data = report(out)
    lost = data["attempts"][0]["lost"]
    # step 4 died before swift logged it: no logged step past checkpoint-3 is lost, the time is
    assert (lost["back_to_step"], lost["steps"]) == (3, 0)
    assert lost["seconds"] >= lost["reload_seconds"] > 0
    assert data["lost_work"]["seconds"] == lost["seconds"] and data["lost_work"]["gpu_hours"] is None
    assert_no_sample_lost_or_repeated(tiny, tmp_path, fault_env(tmp_path), **knobs)


def user_deepspeed_file(tmp: Path, zero_keys: dict[str, object] | None = None, **top: object) -> tuple[Path, str]:
    """A user's own ZeRO-2 config, as people write them: some literal values, some of their own tuning."""
    zero = {"stage": 2, "overlap_comm": False, "allgather_bucket_size": 50000000, **(zero_keys or {})}
    config = {"zero_optimization": zero, "train_micro_batch_size_per_gpu": "auto", **top}
    path = tmp / "my_ds.json"
    text = json.dumps({**config, "steps_per_print": 1000}, indent=1)
    path.write_text(text)
    return path, text


def test_i_users_inline_config_in_pythons_quotes_runs_as_swift_repairs_it(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The quoting a double-quoted shell string leaves: swift repairs it (json_repair) and trains; safe-sft
    reads it the same way, and the ladder's copy keeps the user's own tuning."""
    out = tmp_path / "out"
    zero = "{'stage': 2, 'allgather_bucket_size': 50000000}"
    inline = f"{{'zero_optimization': {zero}, 'train_micro_batch_size_per_gpu': 'auto'}}"
    result = safe_sft(swift_args(tiny, out, deepspeed=inline), fault_env(tmp_path, "oom_step:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "cuda_oom" and second["settings"]["per_device_train_batch_size"] == 1
    assert first["command"][first["command"].index("--deepspeed") + 1] == inline  # swift's to repair, as given
    used = args_json(run_dirs(out)[-1])["deepspeed"]
    assert used["zero_optimization"]["allgather_bucket_size"] == 50000000
    assert last_step(run_dirs(out)[-1]) == "8/8"


def test_i_users_own_config_with_literal_batch_sizes_survives_a_halved_micro_batch(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """transformers refuses a DeepSpeed batch size that disagrees with the arguments: the copy says "auto"."""
    out = tmp_path / "out"
    user_file, user_text = user_deepspeed_file(
        tmp_path, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=2
    )
    result = safe_sft(swift_args(tiny, out, deepspeed=user_file), fault_env(tmp_path, "oom_step:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "cuda_oom" and first["deepspeed_config_written"] is None
    assert first["command"][first["command"].index("--deepspeed") + 1] == str(user_file)
    copy = Path(second["deepspeed_config_written"])
    assert copy.parent == out / "safe-sft" and copy.name.startswith("my_ds-zero2-")
    assert second["command"][second["command"].index("--deepspeed") + 1] == str(copy)
    resumed = args_json(run_dirs(out)[-1])
    assert (resumed["per_device_train_batch_size"], resumed["gradient_accumulation_steps"]) == (1, 4)
    used = resumed["deepspeed"]
    assert (used["train_micro_batch_size_per_gpu"], used["gradient_accumulation_steps"]) == ("auto", "auto")
    assert used["zero_optimization"]["allgather_bucket_size"] == 50000000 and used["steps_per_print"] == 1000
    assert last_step(run_dirs(out)[-1]) == "8/8"
    assert user_file.read_text() == user_text  # never rewritten


def test_i_the_plan_names_the_copy_the_first_attempt_passes_for_a_users_literal_batch(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A user's config whose micro-batch 4 contradicts the run's 2: the plan had shown the user's file while
    the run passed a copy."""
    out = tmp_path / "out"
    user_file, _ = user_deepspeed_file(tmp_path, train_micro_batch_size_per_gpu=4)
    args = swift_args(tiny, out, deepspeed=user_file, max_steps=2, save_steps=2)
    env = fault_env(tmp_path)
    planned = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert planned.returncode == 0, planned.stderr[-2000:]
    plan = json.loads(planned.stdout)
    assert plan["command"][plan["command"].index("--deepspeed") + 1] == plan["deepspeed_arg"]
    assert any('the run passes a copy that says "auto" there' in note for note in plan["notes"])
    result = safe_sft(args, env)
    assert result.returncode == 0, result.stderr[-3000:]
    [first] = report(out)["attempts"]
    assert first["deepspeed_config_written"] == plan["deepspeed_arg"]


@pytest.mark.parametrize(
    "zero_keys",
    [
        pytest.param({}, id="plain"),
        # axolotl's and LLaVA's configs write DeepSpeed's field name, not its stage3_ alias: beside our
        # template's alias, DeepSpeed refused the zero3 copy in every rank ("Extra inputs are not permitted")
        pytest.param({"gather_16bit_weights_on_model_save": True, "max_live_parameters": 100000000}, id="field-names"),
    ],
)
def test_i_users_own_zero2_config_moves_to_zero3_keeping_its_settings(tiny, tmp_path: Path, zero_keys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    user_file, user_text = user_deepspeed_file(tmp_path, zero_keys)
    env = fault_env(tmp_path, "oom_step:4:1")
    result = safe_sft(swift_args(tiny, out, per_device_train_batch_size=1, deepspeed=user_file), env)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert (first["settings"]["deepspeed"], second["settings"]["deepspeed"]) == ("zero2", "zero3")
    assert second["change"]["what"] == "deepspeed zero2 -> zero3"
    assert second["resumed_from"]["weights_only"] is True
    used = args_json(run_dirs(out)[-1])["deepspeed"]
    assert used["zero_optimization"]["stage"] == 3
    gather = "gather_16bit_weights_on_model_save" if zero_keys else "stage3_gather_16bit_weights_on_model_save"
    assert used["zero_optimization"][gather] is True  # the user's spelling, else our zero3.json's
    assert used["zero_optimization"]["allgather_bucket_size"] == 50000000 and used["steps_per_print"] == 1000
    if zero_keys:
        assert used["zero_optimization"]["max_live_parameters"] == 100000000
        assert "stage3_max_live_parameters" not in used["zero_optimization"]
    assert last_step(run_dirs(out)[-1]) == "8/8"
    assert user_file.read_text() == user_text


def test_e_dataset_swift_cannot_read_stops_after_one_attempt(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Rows whose layout swift cannot map pass the plan (its preprocessors are many): swift says what is
    wrong, in one attempt, named the user's."""
    out = tmp_path / "out"
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"unknown_column": 1}\n' * 20)
    start = time.monotonic()
    result = safe_sft(swift_args(tiny, out, dataset=broken), fault_env(tmp_path))
    assert time.monotonic() - start < 60
    assert result.returncode == 1
    data = report(out)
    assert len(data["attempts"]) == 1
    assert data["attempts"][0]["failure"]["kind"] == "user_error"


def test_e_a_line_that_is_not_json_fails_plain_swift_and_stops_safe_sft_before_it_starts(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One line of a JSON Lines file that does not parse, among good rows: plain `swift sft` stops on the
    whole file after the model has loaded, naming neither file nor line; safe-sft names the line first."""
    rows = Path(str(tiny["dataset"])).read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    bad = '{"messages": [{"role": "user", "content": "x"}]} trailing'
    broken.write_text("\n".join([*rows[:5], bad, *rows[5:]]) + "\n")
    plain = _plain_swift(tiny, tmp_path, broken)
    assert plain.returncode != 0
    said = plain.stdout + plain.stderr
    assert "JSON parse error" in said and "DatasetGenerationError: An error occurred while generating" in said
    error = f"has a line that is not a JSON object: {bad!r} (Extra data at character 50)"
    _stops_before_anything_starts(tiny, tmp_path, broken, error)


def test_e_a_line_of_json_that_is_no_object_fails_plain_swift_and_stops_safe_sft_before_it_starts(
    tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A line that parses but is an array among object rows: swift's loader stops on the whole file there."""
    rows = Path(str(tiny["dataset"])).read_text().splitlines()
    broken = tmp_path / "array_row.jsonl"
    broken.write_text("\n".join([*rows[:5], "[1, 2, 3]", *rows[5:]]) + "\n")
    plain = _plain_swift(tiny, tmp_path, broken)
    assert plain.returncode != 0
    said = plain.stdout + plain.stderr
    assert "JSON parse error: Column() changed from object to" in said and "TypeError: 'str' object is not a" in said
    _stops_before_anything_starts(
        tiny, tmp_path, broken, "has a line that is not a JSON object: '[1, 2, 3]' (a JSON array, not an object)"
    )


def test_e_an_extension_no_loader_has_fails_swift_and_stops_safe_sft_first(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`train.JSONL`: swift names the datasets loader by the extension as written, finds none, looks `JSONL`
    up on the hub once the model has loaded, and stops (offline here, so at once)."""
    dataset = tmp_path / "train.JSONL"
    dataset.write_text(Path(str(tiny["dataset"])).read_text())
    plain = _plain_swift(tiny, tmp_path, dataset, offline=True)
    assert plain.returncode != 0 and "model_info" in plain.stdout + plain.stderr
    assert "'JSONL'" in plain.stderr.splitlines()[-1], plain.stderr[-2000:]
    _stops_before_anything_starts(
        tiny, tmp_path, dataset, ": swift loads a file with the datasets loader its extension names, as written, and "
        "its extension 'JSONL' names none (it looks that up on the hub once the model has loaded, and stops)",
    )  # fmt: skip


def _plain_swift(tiny, tmp_path: Path, dataset: Path, offline: bool = False) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    """Plain `swift sft` (one process) on this dataset, for what it does with it; `offline`: the hubs
    unreached (a lookup fails at once, not after its timeouts)."""
    swift = Path(sys.executable).with_name("swift")
    env = {k: v for k, v in os.environ.items() if k != "NPROC_PER_NODE"}
    if offline:
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", MODELSCOPE_OFFLINE="1", USE_HF="1")
    return subprocess.run(
        [str(swift), "sft", *swift_args(tiny, tmp_path / "plain", dataset=dataset)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _stops_before_anything_starts(tiny, tmp_path: Path, dataset: Path, error: str) -> None:  # type: ignore[no-untyped-def]
    """safe-sft with this dataset exits 2 with this error line, and starts nothing: no run dir, no report."""
    out = tmp_path / "out"
    result = safe_sft(swift_args(tiny, out, dataset=dataset), fault_env(tmp_path))
    assert result.returncode == 2
    sep = "" if error.startswith(":") else " "
    assert result.stderr.splitlines()[0] == f"safe-sft: error: --dataset '{dataset}'{sep}{error}"
    assert not out.exists()


def test_e_missing_dataset_stops_before_swift_starts(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "no-such.jsonl"
    _stops_before_anything_starts(tiny, tmp_path, missing, "is no file (swift would look for it on the hub)")


@pytest.mark.parametrize(("name", "content"), [("empty.jsonl", "\n \n"), ("empty.json", "[]\n")])
def test_e_empty_dataset_fails_plain_swift_and_stops_safe_sft_before_it_starts(
    tiny, tmp_path: Path, name: str, content: str
) -> None:  # type: ignore[no-untyped-def]
    """Plain `swift sft` stops on a dataset file of blank lines or of an empty JSON list (its `datasets`
    loader finds no rows), with an error that names no file; safe-sft says so before anything starts."""
    empty = tmp_path / name
    empty.write_text(content)
    plain = _plain_swift(tiny, tmp_path, empty)
    assert plain.returncode != 0
    assert "corresponds to no data" in plain.stdout + plain.stderr
    _stops_before_anything_starts(tiny, tmp_path, empty, "is empty (swift's loader finds no rows in it and stops)")


@pytest.mark.parametrize(
    ("name", "encode", "said"),
    [
        ("bom.json", lambda text: b"\xef\xbb\xbf" + text.encode(), "is a JSON list after a UTF-8 byte-order mark"),
        ("wide.jsonl", lambda text: text.encode("utf-16"), "is UTF-16 text (it starts with a UTF-16 byte-order mark)"),
    ],
)
def test_e_an_encoding_swift_cannot_read_fails_plain_swift_and_stops_safe_sft_before_it_starts(
    tiny, tmp_path: Path, name: str, encode: Any, said: str
) -> None:  # type: ignore[no-untyped-def]
    """What Windows editors save: a JSON list after a UTF-8 byte-order mark (JSON Lines after one swift
    reads), a file in UTF-16. Plain `swift sft` stops on either once the model has loaded, naming no file."""
    rows = [json.loads(line) for line in Path(str(tiny["dataset"])).read_text().splitlines()]
    text = json.dumps(rows) if name.endswith(".json") else "".join(json.dumps(row) + "\n" for row in rows)
    dataset = tmp_path / name
    dataset.write_bytes(encode(text))
    plain = _plain_swift(tiny, tmp_path, dataset)
    assert plain.returncode != 0 and "model_info" in plain.stdout + plain.stderr
    assert str(dataset) not in plain.stderr.splitlines()[-1]
    _stops_before_anything_starts(
        tiny, tmp_path, dataset, f"{said}, which swift's loader cannot read: it stops on the whole file after the "
        "model has loaded",
    )  # fmt: skip


def _start_long_run(tiny, tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    args = swift_args(tiny, out, max_steps=100000, save_steps=100000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "--grace-period", "10", *args],
        env=fault_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ranks = list((tmp_path / "ranks").glob("rank-*.json"))
        logs = list(out.glob("v*/logging.jsonl"))
        if len(ranks) == 2 and logs and logs[0].stat().st_size > 0:
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("training never started")
    pids = [json.loads(r.read_text())["pid"] for r in ranks]
    pids += [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    return proc, sorted(set(pids))


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)], ids=["TERM", "INT", "HUP"]
)
def test_f_a_signal_stops_everything_without_restart(tiny, tmp_path: Path, signum: int, code: int) -> None:  # type: ignore[no-untyped-def]
    """docs/exit-codes.md: 128 + the signal, on the run path, for each signal safe-sft forwards."""
    proc, pids = _start_long_run(tiny, tmp_path)
    proc.send_signal(signum)
    assert proc.wait(timeout=10 + 15) == code  # grace period 10 s
    assert _alive(pids) == []
    data = report(tmp_path / "out")
    assert data["outcome"] == "interrupted" and len(data["attempts"]) == 1
    assert data["exit_code"] == code
    assert data["attempts"][0]["failure"]["kind"] == "interrupted"


def test_f_sigkill_of_safe_sft_leaves_no_training_process(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc, pids = _start_long_run(tiny, tmp_path)
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(pids) == []


def test_drop_in_with_a_swift_yaml_config_and_its_env_block(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    flat = swift_args(tiny, out, max_steps=4)
    pairs = dict(zip(flat[0::2], flat[1::2], strict=True))
    config = tmp_path / "train.yaml"
    config.write_text(
        "ENV:\n  NPROC_PER_NODE: 2\n"
        + "".join(f"{key[2:]}: {value}\n" for key, value in pairs.items() if key != "--max_steps")
    )
    env = {k: v for k, v in fault_env(tmp_path).items() if k != "NPROC_PER_NODE"}
    result = safe_sft([str(config), "--max_steps", "3"], env)  # a later CLI argument wins over the file
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NPROC_PER_NODE        2                 config" in result.stderr
    assert sorted(p.name.split("-")[1] for p in (tmp_path / "ranks").glob("rank-*.json")) == ["0", "1"]
    assert last_step(run_dirs(out)[-1]) == "3/3"


@pytest.mark.parametrize("kind", ["oom_forward", "oom_backward"])
def test_k_an_oom_inside_forward_or_backward_mid_step_is_cuda_oom_and_resumes(tiny, tmp_path: Path, kind: str) -> None:  # type: ignore[no-untyped-def]
    """A real mid-step OOM: raised from a module hook inside the model, in the second micro-batch of step 5,
    after the first micro-batch's gradients were accumulated; nothing of step 5 may survive into the resume."""
    out = tmp_path / "out"
    result = safe_sft(swift_args(tiny, out), fault_env(tmp_path, f"{kind}:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    fired = json.loads((tmp_path / "ranks" / "oom-fired.json").read_text())
    assert fired == {"kind": kind, "completed_steps": 4, "micro_batch": 2, "accumulation": 2}  # mid-step
    first, second = report(out)["attempts"]
    failure = first["failure"]
    assert (failure["kind"], failure["rank"], failure["exit_code"]) == ("cuda_oom", 1, 1)
    assert "CUDA out of memory" in failure["evidence"][0]
    console = Path(first["log"]).read_text()
    # the rank's traceback runs through the model's forward, or through autograd's backward
    where = "modeling_qwen2.py" if kind == "oom_forward" else "_engine_run_backward"
    assert "OutOfMemoryError" in console and where in console
    assert first["last_step"] == 4
    assert second["resumed_from"]["step"] == 3 and second["resumed_from"]["weights_only"] is False
    assert (second["settings"]["per_device_train_batch_size"], second["settings"]["gradient_accumulation_steps"]) == (
        1,
        4,
    )
    assert last_step(run_dirs(out)[-1]) == "8/8"
    assert_no_sample_lost_or_repeated(tiny, tmp_path, fault_env(tmp_path))
