"""Which checkpoint a resume uses: the newest complete (readable) one, across swift's versioned run dirs."""

import json
import os
import struct
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.run.checkpoints import latest_complete, load_failure_line, snapshot, unreadable


def safetensors_bytes(tensors: dict[str, list[int]] | None = None, dtype: str = "F32") -> bytes:
    """A real safetensors file: an 8-byte header length, the JSON header, the tensors' bytes (not zeros:
    trained weights never are)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in (tensors or {"w": [2, 3], "b": [3]}).items():
        size = 4
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + bytes(i % 255 + 1 for i in range(offset))


def torch_zip_bytes(tmp: Path) -> bytes:
    """What torch.save writes: a zip archive (stored, not compressed)."""
    path = tmp / "zip.tmp"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00." * 50)
        archive.writestr("archive/data/0", bytes(4096))
    data = path.read_bytes()
    path.unlink()
    return data


def make(path: Path, *, state: bool = True, weights: str | None = "model.safetensors", optimizer: bool = True) -> Path:
    path.mkdir(parents=True)
    if state:  # the step transformers saved it at: the one its name says (checkpoint-N), as the trainer names it
        step = path.name.removeprefix("checkpoint-")
        state = {"global_step": int(step) if step.isdigit() else 3, "train_batch_size": 2}
        (path / "trainer_state.json").write_text(json.dumps(state))
    if weights:
        (path / weights).write_bytes(safetensors_bytes())
    if optimizer:  # transformers saves both, and loads neither without the other
        (path / "optimizer.pt").write_bytes(torch_zip_bytes(path))
        (path / "scheduler.pt").write_bytes(torch_zip_bytes(path))
    return path


def test_latest_complete_skips_half_written(tmp_path: Path) -> None:
    make(tmp_path / "v0-20260101-000000" / "checkpoint-3")
    make(tmp_path / "v0-20260101-000000" / "checkpoint-6", state=False)  # killed mid-save
    make(tmp_path / "v1-20260101-010000" / "checkpoint-9", weights=None)  # weights never written
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.step == 3
    assert sorted(p.name for p in skipped) == ["checkpoint-6", "checkpoint-9"]
    assert "trainer_state.json is missing" in skipped[tmp_path / "v0-20260101-000000" / "checkpoint-6"]


def test_newer_version_dir_and_optimizer_state(tmp_path: Path) -> None:
    make(tmp_path / "v0-a" / "checkpoint-3")
    make(tmp_path / "v1-b" / "checkpoint-6", optimizer=False)
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None
    assert (checkpoint.step, checkpoint.has_optimizer_state) == (6, False)


def test_deepspeed_layout_and_adapters(tmp_path: Path) -> None:
    ds = make(tmp_path / "checkpoint-4", weights=None, optimizer=False)
    (ds / "global_step4").mkdir()
    (ds / "global_step4" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(torch_zip_bytes(ds))
    (ds / "latest").write_text("global_step4")
    make(tmp_path / "checkpoint-2", weights="adapter_model.safetensors")
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None
    assert (checkpoint.step, checkpoint.has_optimizer_state) == (4, True)


def _zero_checkpoint(path: Path, ranks: tuple[int, ...], saved_by: int, stage3: bool = False) -> Path:
    """A DeepSpeed checkpoint as `saved_by` ranks write it: each its rng state and its ZeRO shard(s); `ranks`
    are the shards that are there."""
    ds = make(path, weights=None, optimizer=False)
    (ds / "global_step4").mkdir()
    for rank in ranks:
        (ds / "global_step4" / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(torch_zip_bytes(ds))
        if stage3:
            (ds / "global_step4" / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt").write_bytes(torch_zip_bytes(ds))
    for rank in range(saved_by):
        (ds / f"rng_state_{rank}.pth").write_bytes(torch_zip_bytes(ds))
    (ds / "latest").write_text("global_step4")
    return ds


@pytest.mark.parametrize(
    ("ranks", "saved_by", "why"),
    [
        pytest.param((0, 1), 2, None, id="complete"),
        pytest.param((0,), 2, "holds 1 rank(s)' optim_states, and 2 ranks saved this checkpoint", id="last-lost"),
        pytest.param((0, 2, 3), 4, "has no zero_pp_rank_1 optim_states file", id="gap"),
        pytest.param((0, 1, 2, 3), 4, None, id="four"),
    ],
)
def test_a_zero_checkpoint_that_lost_a_ranks_shard_is_incomplete(
    tmp_path: Path, ranks: tuple[int, ...], saved_by: int, why: str | None
) -> None:
    """A copy that lost rank 1's shard had been read as a checkpoint of 1 rank, and resumed with the optimizer
    state reset, where the complete checkpoint before it would have resumed it."""
    make(tmp_path / "checkpoint-2")
    problem = unreadable(_zero_checkpoint(tmp_path / "checkpoint-4", ranks, saved_by))
    assert (problem is None) if why is None else (why in (problem or "")), problem
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.step == (4 if why is None else 2)


def test_a_zero_checkpoint_that_lost_its_last_ranks_shard_and_rng_state_is_incomplete_by_its_world_size(
    tmp_path: Path,
) -> None:
    """Rank 1's shard and rng_state_1.pth both gone from a 2-rank run's checkpoint-4: it read as a 1-rank
    checkpoint and was resumed weights only, with the complete checkpoint-2 beside it (hostile46mn F5). The
    run's args.json says it had 2 ranks."""
    make(tmp_path / "checkpoint-2")
    damaged = _zero_checkpoint(tmp_path / "checkpoint-4", (0,), 1)
    (tmp_path / "args.json").write_text(json.dumps({"global_world_size": 2}))
    problem = unreadable(damaged)
    assert problem == "global_step4 holds 1 rank(s)' optim_states, and its run had 2 (args.json's global_world_size)"
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.step == 2
    (tmp_path / "args.json").write_text(json.dumps({"global_world_size": 2, "sequence_parallel_size": 2}))
    assert unreadable(damaged) is None  # sequence parallel ranks share their partitions


_NVME = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}}


@pytest.mark.parametrize(
    ("swapped", "config", "why"),
    [
        pytest.param({"rank00": 2, "rank01": 2}, _NVME, None, id="complete"),
        pytest.param(None, _NVME, "global_step4 has no offloaded_tensors, and its run swapped the optimizer to NVMe",
                     id="folder-lost"),
        pytest.param(None, {"zero_optimization": {"stage": 3}}, None, id="not-nvme"),
        pytest.param({"rank00": 2}, _NVME, "global_step4/offloaded_tensors has no rank01", id="rank-lost"),
        pytest.param({"rank00": 2, "rank01": 0}, _NVME, "global_step4/offloaded_tensors/rank01 is empty",
                     id="rank-emptied"),
        pytest.param({"rank00": 2}, {**_NVME, "checkpoint": {"use_node_local_storage": True}}, None,
                     id="node-local"),
        pytest.param({"rank01": 2}, {**_NVME, "checkpoint": {"use_node_local_storage": True}},
                     "global_step4/offloaded_tensors has no rank00", id="node-local-gap"),
    ],
)  # fmt: skip
def test_an_nvme_offload_checkpoint_needs_every_ranks_swapped_optimizer_state(
    tmp_path: Path, swapped: dict[str, int] | None, config: dict[str, object], why: str | None
) -> None:
    """DeepSpeed copies each rank's NVMe swap files into <tag>/offloaded_tensors/rank<NN> before `latest`, and a
    resume copies them back (a FileNotFoundError where they are gone): a copy of the checkpoint without them
    is not complete, and the older complete one is resumed."""
    make(tmp_path / "checkpoint-2")
    ds = _zero_checkpoint(tmp_path / "checkpoint-4", (0, 1), 2, stage3=True)
    (tmp_path / "args.json").write_text(json.dumps({"global_world_size": 2, "deepspeed": config}))
    for rank, files in (swapped or {}).items():
        folder = ds / "global_step4" / "offloaded_tensors" / rank
        folder.mkdir(parents=True)
        for n in range(files):
            (folder / f"{n}.tensor.swp").write_bytes(b"\x01" * 64)
    problem = unreadable(ds)
    assert problem == why if why is None else (problem or "").startswith(why), problem
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.step == (4 if why is None else 2)


def test_a_zero3_checkpoint_missing_a_ranks_model_states_is_incomplete(tmp_path: Path) -> None:
    ds = _zero_checkpoint(tmp_path / "checkpoint-4", (0, 1), 2, stage3=True)
    assert unreadable(ds) is None
    (ds / "global_step4" / "zero_pp_rank_1_mp_rank_00_model_states.pt").unlink()
    assert "holds 1 rank(s)' model_states" in (unreadable(ds) or "")


def test_nothing_there(tmp_path: Path) -> None:
    assert latest_complete(tmp_path / "missing") == (None, {})


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
    assert skipped == {}  # an earlier run's half-written checkpoint is not this run's to report
    # without the snapshot: the same (the newest run's), with the earlier run's half-written one reported
    assert latest_complete(tmp_path)[0].step == 3  # type: ignore[union-attr]
    assert list(latest_complete(tmp_path)[1]) == []  # checkpoint-9 is an older run's: behind the newest run's


def test_a_snapshot_still_allows_what_this_run_rewrote(tmp_path: Path) -> None:
    make(tmp_path / "v0-earlier" / "checkpoint-4")
    rewritten = make(tmp_path / "checkpoint-2")
    before = snapshot(tmp_path)
    assert latest_complete(tmp_path, before=before) == (None, {})
    time.sleep(0.01)
    (rewritten / "trainer_state.json").write_text(
        '{"global_step": 2, "train_batch_size": 2}'
    )  # --add_version false: same name
    checkpoint, _ = latest_complete(tmp_path, before=before)
    assert checkpoint is not None and checkpoint.path == rewritten


def _truncate(name: str, keep: int) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        data = (path / name).read_bytes()
        (path / name).write_bytes(data[:keep])

    return corrupt


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda path: (path / name).write_bytes(data)


def _bad_header(path: Path) -> None:
    data = bytearray((path / "model.safetensors").read_bytes())
    data[8] = ord("[")  # the header's opening brace
    (path / "model.safetensors").write_bytes(bytes(data))


def _huge_header_length(path: Path) -> None:
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + data[8:])


def _overlapping(path: Path) -> None:
    blob = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()  # fmt: skip
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(12))


def _wrong_shape(path: Path) -> None:
    blob = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(8))


def _zero_filled(path: Path) -> None:
    """What a crash leaves where the header reached the disk and the data blocks did not: zeros."""
    weights = path / "model.safetensors"
    raw = weights.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    weights.write_bytes(raw[: 8 + length] + bytes(len(raw) - 8 - length))


def _remove(name: str) -> Callable[[Path], None]:
    return lambda path: (path / name).unlink()


def _missing_shard(path: Path) -> None:
    (path / "model.safetensors").rename(path / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"w": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def _shard_without_a_tensor(path: Path) -> None:
    (path / "model.safetensors").unlink()
    (path / "model-00001-of-00002.safetensors").write_bytes(safetensors_bytes({"w": [2, 3]}))
    (path / "model-00002-of-00002.safetensors").write_bytes(safetensors_bytes({"b": [3]}))
    index = {"weight_map": {"w": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def _lost_both_saved_with_state(path: Path) -> None:
    (path / "optimizer.pt").unlink()
    (path / "scheduler.pt").unlink()
    (path / "args.json").write_text(json.dumps({"save_only_model": False}))


def test_lost_optimizer_state_is_resumed_weights_only_where_no_complete_checkpoint_is_left(tmp_path: Path) -> None:
    for step in (3, 6):
        lost = make(tmp_path / f"checkpoint-{step}")
        (lost / "optimizer.pt").unlink()
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is not None and (checkpoint.step, checkpoint.has_optimizer_state) == (6, False)
    assert list(skipped) == []  # only newer ones are listed as skipped: none is newer than the one taken


def test_a_checkpoint_saved_without_its_optimizer_resumes_weights_only(tmp_path: Path) -> None:
    """save_only_model true, or no args.json to tell: no optimizer files is how it was saved, not a loss."""
    for name, args in (("checkpoint-3", {"save_only_model": True}), ("checkpoint-6", None)):
        saved = make(tmp_path / name, optimizer=False)
        if args is not None:
            (saved / "args.json").write_text(json.dumps(args))
        assert unreadable(saved) is None


@pytest.mark.parametrize(
    ("corrupt", "why"),
    [
        pytest.param(_write("trainer_state.json", b""), "trainer_state.json is not valid JSON", id="empty-state"),
        pytest.param(_truncate("trainer_state.json", 7), "trainer_state.json is not valid JSON", id="cut-state"),
        pytest.param(_write("trainer_state.json", b"[1, 2]"), "not a JSON object", id="state-not-object"),
        pytest.param(_write("trainer_state.json", b"\xff\xfe"), "trainer_state.json is not valid JSON", id="binary"),
        pytest.param(
            _write("trainer_state.json", b"{}"), "trainer_state.json has no global_step (it holds null)", id="{}"
        ),
        pytest.param(_write("trainer_state.json", b'{"global_step": "8"}'), 'no global_step (it holds "8")', id="text"),
        pytest.param(_write("trainer_state.json", b'{"global_step": -1}'), "no global_step (it holds -1)", id="neg"),
        pytest.param(
            _truncate("model.safetensors", -5),
            "describes 36 bytes of tensor data, the file holds 31 (truncated?)",
            id="truncated-data",
        ),
        pytest.param(_truncate("model.safetensors", 40), "its header claims", id="truncated-header"),
        pytest.param(_truncate("model.safetensors", 5), "shorter than a safetensors header", id="5-bytes"),
        pytest.param(_write("model.safetensors", b""), "shorter than a safetensors header", id="empty-weights"),
        pytest.param(_bad_header, "its header is not JSON", id="bad-header"),
        pytest.param(_huge_header_length, "its header claims 1099511627776 bytes", id="huge-header-length"),
        pytest.param(_overlapping, "overlap or leave gaps", id="overlapping-tensors"),
        pytest.param(_wrong_shape, "its shape and dtype need more", id="shape-vs-offsets"),
        pytest.param(
            _write("model.safetensors", b"\x10" + bytes(7) + b"{}" + bytes(20)), "its header is not JSON", id="junk"
        ),
        pytest.param(_zero_filled, "its tensor data is all zeros", id="zero-filled-data"),
        pytest.param(_missing_shard, "names model-00002-of-00002.safetensors, which is not there", id="missing-shard"),
        pytest.param(
            _shard_without_a_tensor,
            "model-00001-of-00002.safetensors lacks 'b', which the index maps to it",
            id="shard-lacks-a-tensor",
        ),
        pytest.param(_truncate("optimizer.pt", 100), "optimizer.pt is not a complete torch file", id="cut-optimizer"),
        pytest.param(_write("optimizer.pt", b""), "optimizer.pt is empty", id="empty-optimizer"),
        pytest.param(_write("rng_state_0.pth", b""), "rng_state_0.pth is empty", id="empty-rng-state"),
        pytest.param(_write("latest", b"global_step9"), "latest names 'global_step9', which is not there", id="latest"),
        # transformers 5 loads the optimizer and the scheduler only together: Adam and the schedule restart
        pytest.param(
            _remove("scheduler.pt"),
            "optimizer.pt without scheduler.pt: transformers would load neither",
            id="no-scheduler",
        ),
        # a copy that lost the optimizer: transformers saves it with the scheduler, and neither under save_only_model
        pytest.param(
            _remove("optimizer.pt"),
            "scheduler.pt without its optimizer file: the optimizer state was lost",
            id="no-optimizer",
        ),
        pytest.param(
            _lost_both_saved_with_state,
            "no optimizer file, though it was saved with save_only_model false",
            id="no-optimizer-files-args-say-saved",
        ),
        # transformers 5 divides the state's train_batch_size as it resumes: a TypeError in every rank
        pytest.param(
            _write("trainer_state.json", b'{"global_step": 6}'),
            "has no train_batch_size (it holds null)",
            id="state-without-batch-size",
        ),
    ],
)
def test_unreadable_checkpoints_table(tmp_path: Path, corrupt: Callable[[Path], None], why: str) -> None:
    good = make(tmp_path / "checkpoint-3")
    bad = make(tmp_path / "checkpoint-6")
    assert unreadable(bad) is None
    corrupt(bad)
    problem = unreadable(bad)
    assert problem is not None and why in problem, problem
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.path == good  # the older good one
    assert skipped == {bad: problem}
    assert bad.is_dir()  # left where it is


def test_large_weights_are_sampled_for_zeros_and_a_zero_tensor_among_trained_ones_is_kept(tmp_path: Path) -> None:
    """A file too large to read whole is sampled: zeros at every sample are a lost write; an untrained LoRA B
    (zeros) beside trained tensors is a real checkpoint."""
    shapes = {"a_lora_A": [64, 1024], "b_lora_B": [64, 1024]}  # 256 KiB each, over what is read whole
    zeroed = make(tmp_path / "checkpoint-3")
    (zeroed / "model.safetensors").write_bytes(safetensors_bytes(shapes))
    _zero_filled(zeroed)
    problem = unreadable(zeroed)
    assert problem is not None and "all zeros" in problem
    half = make(tmp_path / "checkpoint-6")
    raw = safetensors_bytes(shapes)
    (half / "model.safetensors").write_bytes(raw[: len(raw) - 256 * 1024] + bytes(256 * 1024))  # B untrained
    assert unreadable(half) is None


def test_a_legacy_torch_file_and_a_real_deepspeed_tree_are_readable(tmp_path: Path) -> None:
    ds = make(tmp_path / "checkpoint-4", weights=None)
    (ds / "training_args.bin").write_bytes(b"\x80\x02legacy pickle")  # torch's pre-zip format: only non-empty
    (ds / "global_step4").mkdir()
    (ds / "global_step4" / "mp_rank_00_model_states.pt").write_bytes(torch_zip_bytes(ds))
    (ds / "latest").write_text("global_step4\n")
    assert unreadable(ds) is None
    (ds / "global_step4" / "mp_rank_00_model_states.pt").write_bytes(torch_zip_bytes(ds)[:-30])
    assert "global_step4/mp_rank_00_model_states.pt is not a complete torch file" in str(unreadable(ds))


def test_set_aside_checkpoints_are_not_candidates(tmp_path: Path) -> None:
    make(tmp_path / "checkpoint-3")
    newest = make(tmp_path / "checkpoint-6")
    checkpoint, skipped = latest_complete(tmp_path, set_aside={newest})
    assert checkpoint is not None and checkpoint.step == 3 and skipped == {}


@pytest.mark.parametrize(
    ("lines", "found"),
    [
        (['  File "trainer.py", line 2540, in _load_from_checkpoint', "KeyError: 'w'"], "KeyError: 'w'"),
        (['  File "trainer.py", line 2540, in _load_from_checkpoint'], "_load_from_checkpoint"),
        (["safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge"], "SafetensorError"),
        (["RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"], "Reader"),
        (["torch.OutOfMemoryError: CUDA out of memory."], None),
        (["ValueError: remaining_argv: ['--bogus']"], None),
        pytest.param(
            [
                "[transformers] Warning: The following arguments do not match the ones in the `trainer_state.json` "
                "within the checkpoint directory:",
                "Segmentation fault (core dumped)",
            ],
            None,
            id="resume-warning",
        ),
        pytest.param(
            [
                '[rank0]:   File "transformers/trainer.py", line 3943, in _load_optimizer_and_scheduler',
                "[rank0]:     raise ValueError(",
                "[rank0]: ValueError: loaded state dict has a different number of parameter groups",
            ],
            "[rank0]: ValueError: loaded state dict has a different",
            id="the-error-the-load-ended-in",
        ),
        (["FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/trainer_state.json'"], "FileNotFound"),
    ],
)
def test_load_failure_line(lines: list[str], found: str | None) -> None:
    line = load_failure_line(lines)
    assert (line is None) if found is None else (line is not None and found in line)


def test_checkpoint_problem_passes_a_complete_checkpoint_and_names_what_is_wrong(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from launcher.run.checkpoints import checkpoint_problem

    good = tmp_path / "checkpoint-3"
    good.mkdir()
    (good / "trainer_state.json").write_text('{"global_step": 3, "train_batch_size": 2}')
    (good / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    assert checkpoint_problem(good) is None
    assert checkpoint_problem(tmp_path / "nowhere") == "does not exist"
    (good / "trainer_state.json").write_text('{"global_st')
    assert (checkpoint_problem(good) or "").startswith("is not a complete, readable checkpoint: trainer_state.json")
    (good / "trainer_state.json").unlink()
    assert "is not a complete, readable checkpoint" in (checkpoint_problem(good) or "")


def test_a_sharded_checkpoint_whose_shards_hold_what_the_index_maps_is_complete(tmp_path: Path) -> None:
    path = make(tmp_path / "checkpoint-3", weights=None)
    (path / "model-00001-of-00002.safetensors").write_bytes(safetensors_bytes({"w": [2, 3]}))
    (path / "model-00002-of-00002.safetensors").write_bytes(safetensors_bytes({"b": [3]}))
    index = {
        "metadata": {},
        "weight_map": {"w": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"},
    }
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert unreadable(path) is None


def test_a_checkpoint_whose_name_and_state_disagree_is_skipped(tmp_path: Path) -> None:
    """checkpoint-8 holding step 2's state (copied, renamed, or a link to checkpoint-2): transformers would
    resume at step 2 while safe-sft guarded everything above 8, and saved over checkpoint-4 and -6."""
    make(tmp_path / "checkpoint-4")
    copied = make(tmp_path / "checkpoint-8")
    (copied / "trainer_state.json").write_text('{"global_step": 2, "train_batch_size": 2}')
    (tmp_path / "checkpoint-10").symlink_to(tmp_path / "checkpoint-4")
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.path == tmp_path / "checkpoint-4"
    says = "its name says step 8, its trainer_state.json step 2 (renamed, copied or linked from another?)"
    assert skipped[copied] == says
    assert "its name says step 10" in skipped[tmp_path / "checkpoint-10"]


def test_a_state_that_cannot_be_read_is_not_called_missing(tmp_path: Path) -> None:
    """A user told that a file is missing may delete the dir; it is there, and unreadable (or nested too deep)."""
    deep = make(tmp_path / "checkpoint-3")
    (deep / "trainer_state.json").write_text("[" * 100_000 + "]" * 100_000)
    unreadable_state = make(tmp_path / "checkpoint-6")
    (unreadable_state / "trainer_state.json").unlink()
    (unreadable_state / "trainer_state.json").mkdir()  # a read that fails with another errno than ENOENT
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is None
    assert skipped[deep] == "trainer_state.json is not valid JSON (empty, cut short, or nested too deep?)"
    assert skipped[unreadable_state].startswith("trainer_state.json cannot be read (Is a directory")


def test_a_state_that_is_a_fifo_is_skipped_not_read(tmp_path: Path) -> None:
    """Reading a FIFO blocks until something writes to it: --resume-latest had hung before anything started
    (hostile45disk F5)."""
    import os

    older = make(tmp_path / "checkpoint-3")
    fifo = make(tmp_path / "checkpoint-6")
    (fifo / "trainer_state.json").unlink()
    os.mkfifo(fifo / "trainer_state.json")
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.path == older
    assert skipped[fifo] == "trainer_state.json is not a regular file"


def test_a_newest_checkpoint_this_user_may_not_read_is_skipped_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint dir of mode 000 (another user's, a chmod gone wrong): its files cannot even be stat'ed, and it
    had been passed over without a word, where an unreadable file inside one is named (hostile45disk F8). Root
    reads everything, so the refusal is the file system's, stood in for here."""
    older = make(tmp_path / "checkpoint-3")
    closed = make(tmp_path / "checkpoint-6")
    real_stat = Path.stat

    def stat(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if self.parent == closed:
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "stat", stat)
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.path == older
    assert skipped == {closed: "trainer_state.json cannot be read (Permission denied)"}


def test_a_run_dir_that_cannot_be_listed_is_passed_over(tmp_path: Path) -> None:
    """A colleague's run dir (mode 700) in a shared output dir: its checkpoints are none of this user's, and
    reading the others must not fail. (Root reads it all the same: the listing is made to fail here.)"""
    from unittest import mock

    mine = make(tmp_path / "v1-b" / "checkpoint-3")
    make(tmp_path / "v0-a" / "checkpoint-6")
    real_iterdir = Path.iterdir

    def iterdir(self: Path):  # type: ignore[no-untyped-def]
        if self.name == "v0-a":
            raise PermissionError(13, "Permission denied")
        return real_iterdir(self)

    with mock.patch.object(Path, "iterdir", iterdir):
        checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.path == mine


def test_the_newest_run_is_taken_before_an_older_runs_higher_step(tmp_path: Path) -> None:
    """Every experiment on a model shares swift's default output dir: experiment B (v1), interrupted at
    step 4, resumed from experiment A's checkpoint-6 (v0) with --resume-latest, A's weights and optimizer."""
    make(tmp_path / "v0-20260101-000000" / "checkpoint-6")
    b = make(tmp_path / "v1-20260102-000000" / "checkpoint-2")
    make(tmp_path / "v1-20260102-000000" / "checkpoint-4", state=False)  # interrupted while saving
    make(tmp_path / "v10-20260103-000000" / "checkpoint-9", weights=None)  # v10 after v9, not after v1: never saved
    checkpoint, skipped = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.path == b
    assert sorted(p.name for p in skipped) == ["checkpoint-4", "checkpoint-9"]


def test_a_deepspeed_checkpoint_counts_the_ranks_of_its_optimizer_state(tmp_path: Path) -> None:
    path = make(tmp_path / "checkpoint-6", optimizer=False)
    (path / "latest").write_text("global_step6")
    (path / "global_step6").mkdir()
    for rank in (0, 1):
        (path / "global_step6" / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(
            torch_zip_bytes(path)
        )
    (path / "global_step6" / "zero_pp_rank_0_mp_rank_00_model_states.pt").write_bytes(torch_zip_bytes(path))
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.zero_ranks == 2 and checkpoint.has_optimizer_state


def test_the_output_dirs_own_checkpoints_count_as_the_run_that_saved_them_last(tmp_path: Path) -> None:
    """Experiment B with --add_version false writes into the output dir itself, after experiment A's v0 run:
    B's checkpoint-2 was passed over for A's checkpoint-6, whatever their age."""
    a = make(tmp_path / "v0-20260101-000000" / "checkpoint-6")
    b = make(tmp_path / "checkpoint-2")
    os.utime(a / "trainer_state.json", (1_000_000, 1_000_000))
    os.utime(b / "trainer_state.json", (2_000_000, 2_000_000))
    assert latest_complete(tmp_path)[0].path == b  # type: ignore[union-attr]
    (a / "infer_result").mkdir()  # `swift infer` on A's checkpoint writes into it: A saved nothing new
    os.utime(a, (3_000_000, 3_000_000))
    assert latest_complete(tmp_path)[0].path == b  # type: ignore[union-attr]
    os.utime(b / "trainer_state.json", (500_000, 500_000))  # the other way round: A's run saved last
    assert latest_complete(tmp_path)[0].path == a  # type: ignore[union-attr]


def test_a_later_run_by_swifts_numbering_at_a_higher_step_is_found_where_times_say_otherwise(tmp_path: Path) -> None:
    """A copy that did not keep times (cp -r) wrote v1 before v0: --resume-latest, going by the files' times, took
    v0's checkpoint-6 and trained steps 7-8 again without naming v1's checkpoint-8 (hostile45disk F4)."""
    import os

    from launcher.run.checkpoints import later_by_name

    v0 = make(tmp_path / "v0-20261129-083815" / "checkpoint-6")
    v1 = make(tmp_path / "v1-20261129-084410" / "checkpoint-8")
    os.utime(v1 / "trainer_state.json", (1_000_000, 1_000_000))  # copied first: older than v0's
    chosen, _ = latest_complete(tmp_path)
    assert chosen is not None and chosen.path == v0
    assert later_by_name(v0) == v1
    assert later_by_name(v1) is None
    make(tmp_path / "v2-20261129-090000" / "checkpoint-4")  # later by its number, but at a lower step
    assert later_by_name(v0) == v1
    assert later_by_name(make(tmp_path / "checkpoint-2")) is None  # the output dir's own: no number to go by
