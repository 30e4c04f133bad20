"""safe-sft learns swift's resolved arguments from swift itself (launcher/worker.py writes them inside
swift's process), and counts every phase swift shows progress in: on the real stack.

- swift names its output dir from a Hugging Face cache path by its own rules (`output/<repo name>`, not
  the snapshot hash); safe-sft watches that dir and resumes from its checkpoints.
- a long dataset preprocessing and a long evaluation are progress, not a hang.
- a config file's `resume_only_model: true`: the report says what swift did with the checkpoint.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tests.stack.test_supervise_real import PLUGIN, args_json, fault_env, last_step, safe_sft, swift_args

SLOW_PLUGIN = PLUGIN.parent / "slow.py"


def report_of(stderr: str) -> dict:  # type: ignore[type-arg]
    """report.json, where safe-sft's closing summary says it is."""
    [path] = re.findall(r"report: (\S+report\.json)", stderr)
    return json.loads(Path(path).read_text())  # type: ignore[no-any-return]


def without_output_dir(args: list[str]) -> list[str]:
    at = args.index("--output_dir")
    return args[:at] + args[at + 2 :]


def hf_cache_snapshot(tiny: dict[str, object], root: Path) -> Path:
    """The tiny model laid out as huggingface_hub stores a download: models--Org--Name/snapshots/<hash>/."""
    snapshot = root / "hub" / "models--TinyOrg--TinyName" / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(str(tiny["model"]), snapshot)
    (root / "hub" / "models--TinyOrg--TinyName" / "refs").mkdir()
    (root / "hub" / "models--TinyOrg--TinyName" / "refs" / "main").write_text(snapshot.name)
    return snapshot


def test_a_hf_cache_model_without_output_dir_is_watched_and_resumed_where_swift_writes(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    snapshot = hf_cache_snapshot(tiny, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    args = without_output_dir(swift_args(tiny, tmp_path / "unused", model=snapshot))
    args[args.index("--external_plugins") + 1 : args.index("--external_plugins") + 2] = [str(PLUGIN), str(SLOW_PLUGIN)]
    args[args.index("--callbacks") + 1 : args.index("--callbacks") + 2] = ["safe_sft_fault", "safe_sft_slow"]
    env = {**fault_env(tmp_path, "oom_step:4:1"), "SAFE_SFT_SLOW_STEP": "2.5"}
    # an attempt lasts longer than the start-up allowance: only seeing swift's steps keeps it alive
    own = ["--startup-timeout", "25", "--hang-timeout", "12", "--memory-sample-interval", "0"]
    result = safe_sft([*own, *args], env, cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]

    swift_out = work / "output" / "TinyName"  # swift's name for it: the repo's, not the snapshot's hash
    run_dirs = sorted(swift_out.glob("v*-*"), key=lambda p: int(p.name[1:].split("-")[0]))
    assert len(run_dirs) == 2
    data = report_of(result.stderr)
    first, second = data["attempts"]
    assert first["failure"]["kind"] == "cuda_oom" and "safe-sft: hang:" not in result.stderr
    assert first["run_dir"] == str(run_dirs[0]) and second["run_dir"] == str(run_dirs[1])
    assert Path(second["resumed_from"]["checkpoint"]) == run_dirs[0] / "checkpoint-3"
    assert args_json(run_dirs[1])["resume_from_checkpoint"] == str(run_dirs[0] / "checkpoint-3")
    assert last_step(run_dirs[1]) == "8/8"
    # what swift itself reported, as the report shows it
    assert first["swift"]["output_dir"] == str(swift_out)
    assert (first["swift"]["per_device_train_batch_size"], first["swift"]["world_size"]) == (2, 2)
    assert (second["swift"]["per_device_train_batch_size"], second["swift"]["gradient_accumulation_steps"]) == (1, 4)


def test_b_slow_preprocessing_and_a_long_evaluation_are_not_hangs(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rows = Path(str(tiny["dataset"])).read_text().splitlines()
    dataset = tmp_path / "big.jsonl"
    dataset.write_text("\n".join(rows[i % len(rows)] for i in range(3000)) + "\n")
    out = tmp_path / "out"
    args = swift_args(
        tiny, out, dataset=dataset, max_steps=4, save_steps=2, eval_steps=2, split_dataset_ratio=0.05,
        per_device_eval_batch_size=1, external_plugins=SLOW_PLUGIN, callbacks="safe_sft_slow",
    )  # fmt: skip
    # swift's length-adding map: 3000 rows x 8 ms = 24 s, its bar moving every 1000 rows; each evaluation:
    # 150 batches x 0.15 s = 22 s with no training step, its Val bar moving every batch
    env = {**fault_env(tmp_path), "NPROC_PER_NODE": "1", "SAFE_SFT_SLOW_ROW": "0.008", "SAFE_SFT_SLOW_EVAL": "0.15"}
    own = ["--startup-timeout", "20", "--hang-timeout", "12", "--memory-sample-interval", "0"]
    result = safe_sft([*own, *args], env)
    assert result.returncode == 0, result.stderr[-3000:]
    [attempt] = report_of(result.stderr)["attempts"]
    assert attempt["failure"] is None
    run_dir = Path(attempt["run_dir"])
    log = [json.loads(line) for line in (run_dir / "logging.jsonl").read_text().splitlines()]
    evaluations = [entry["eval_runtime"] for entry in log if "eval_runtime" in entry]
    assert len(evaluations) == 2 and min(evaluations) > 12  # each longer than the hang timeout
    assert last_step(run_dir) == "4/4"


def test_c_resume_only_model_in_a_config_file_is_what_the_report_says(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    config = tmp_path / "train.yaml"
    config.write_text("resume_only_model: true\n")
    result = safe_sft([str(config), *swift_args(tiny, out)], fault_env(tmp_path, "oom_step:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    _, second = report_of(result.stderr)["attempts"]
    resumed = second["resumed_from"]
    assert Path(resumed["checkpoint"]).name == "checkpoint-3"
    assert resumed["optimizer_state_reset"] is True and resumed["weights_only"] is True
    assert "resume_only_model true" in resumed["why_weights_only"]
    assert args_json(Path(second["run_dir"]))["resume_only_model"] is True  # what swift did
    assert second["swift"]["resume_only_model"] is True
    summary = result.stderr.split("safe-sft: succeeded")[1]
    assert "(weights only: the optimizer and the learning-rate schedule started over)" in summary
