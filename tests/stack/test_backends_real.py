"""One behavioural suite over the three entry points, on the real frameworks: `safe-sft` over swift sft,
`safe-sft torchrun` over a real HF-Trainer script (tests/stack/scripts/hf_train.py), and `safe-sft
llamafactory train` over LLaMA-Factory (in its own environment, .venv-llamafactory, made by
scripts/setup_llamafactory.sh). Each trains the tiny model with 2 processes under torchrun (gloo) on
the CPU, and each must:
- survive an OOM in a step: micro-batch halved with the global batch kept, resumed from the latest
  complete checkpoint with its optimizer state, on exactly the samples its plain launcher trains on;
- survive an OOM while saving: save_only_model, the half-written checkpoint skipped and left in place,
  never written over, the same samples;
- stop after one attempt on a user error, naming the bad argument.

Faults: swift's through its plugin (tests/stack/plugins/faults.py), the others' through tests/stack/
hf_rank_hooks (sitecustomize on PYTHONPATH), with the same variables. Samples are compared with
tests/stack/test_supervise_real.py's machinery (per optimizer step, a key per sample, over all ranks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.stack.conftest import plain_run_finished
from tests.stack.test_supervise_real import report, swift_args, trained_samples

STACK = Path(__file__).resolve().parent
REPO = STACK.parents[1]
SCRIPT = STACK / "scripts" / "hf_train.py"
HF_RANK_HOOKS = STACK / "hf_rank_hooks"
LF_VENV = REPO / ".venv-llamafactory"
LF_PYTHON = LF_VENV / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def script_args(tiny: dict[str, object], out: Path) -> list[str]:
    args = {
        "model_name_or_path": tiny["model"], "data_path": tiny["dataset"], "output_dir": out, "use_cpu": "true",
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "max_steps": 8, "save_steps": 3,
        "logging_steps": 1, "report_to": "none", "dataloader_num_workers": 0, "seed": 42,
    }  # fmt: skip
    return [item for key, value in args.items() for item in (f"--{key}", str(value))]


def llamafactory_config(tiny: dict[str, object], out: Path, folder: Path) -> Path:
    """A LLaMA-Factory SFT config for the tiny model, its chat rows registered in a dataset_info.json."""
    folder.mkdir(parents=True, exist_ok=True)
    info = {
        "tiny_chat": {
            "file_name": str(tiny["dataset"]),
            "formatting": "sharegpt",
            "columns": {"messages": "messages"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
                     "system_tag": "system"},
        }
    }  # fmt: skip
    (folder / "dataset_info.json").write_text(json.dumps(info))
    config = {
        "model_name_or_path": tiny["model"], "stage": "sft", "do_train": True, "finetuning_type": "full",
        "dataset_dir": str(folder), "dataset": "tiny_chat", "template": "chatml", "cutoff_len": 128,
        "preprocessing_num_workers": 1, "dataloader_num_workers": 0, "output_dir": str(out), "logging_steps": 1,
        "save_steps": 3, "report_to": "none", "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
        "max_steps": 8, "bf16": False, "use_cpu": True, "seed": 42,
    }  # fmt: skip
    path = folder / "sft.yaml"  # YAML, as its examples are (0.9.5 fails on a JSON config: json.load of a Path)
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass(frozen=True)
class Entry:
    """One entry point: its safe-sft command, its plain launcher's command, and how it spells a bad argument."""

    name: str
    safe_sft: Callable[[dict[str, object], Path, Path], list[str]]  # tiny, out, tmp -> argv
    plain: Callable[[dict[str, object], Path, Path], list[str]]
    bad_argument: list[str]
    plugin_env: dict[str, str]


def _swift_safe_sft(tiny: dict[str, object], out: Path, tmp: Path) -> list[str]:
    return [sys.executable, "-m", "launcher", "--grace-period", "10", *swift_args(tiny, out)]


def _swift_plain(tiny: dict[str, object], out: Path, tmp: Path) -> list[str]:
    return [str(Path(sys.executable).parent / "swift"), "sft", *swift_args(tiny, out)]


def _torchrun_safe_sft(tiny: dict[str, object], out: Path, tmp: Path) -> list[str]:
    return [sys.executable, "-m", "launcher", "torchrun", "--grace-period", "10", "--", str(SCRIPT),
            *script_args(tiny, out)]  # fmt: skip


def _torchrun_plain(tiny: dict[str, object], out: Path, tmp: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            str(SCRIPT), *script_args(tiny, out)]  # fmt: skip


def _lf_safe_sft(tiny: dict[str, object], out: Path, tmp: Path) -> list[str]:
    config = llamafactory_config(tiny, out, tmp / f"lf-{out.name}")
    return [str(LF_PYTHON), "-m", "launcher", "llamafactory", "train", "--grace-period", "10", str(config)]


def _lf_plain(tiny: dict[str, object], out: Path, tmp: Path) -> list[str]:
    config = llamafactory_config(tiny, out, tmp / f"lf-{out.name}")
    return [str(LF_VENV / "bin" / "llamafactory-cli"), "train", str(config)]


ENTRIES = {
    # a plugin file that is not there: swift stops on it as each rank starts (an option, a template or a model
    # type swift does not have, safe-sft refuses itself before any rank starts: exit 2)
    "swift": Entry("swift", _swift_safe_sft, _swift_plain, ["--external_plugins=no_such_plugin.py"], {}),
    "torchrun": Entry(
        "torchrun", _torchrun_safe_sft, _torchrun_plain, ["--no_such_option", "1"], {"PYTHONPATH": str(HF_RANK_HOOKS)}
    ),
    "llamafactory": Entry(
        "llamafactory",
        _lf_safe_sft,
        _lf_plain,
        # a module to train that the model does not have: LLaMA-Factory stops on it once the model has loaded (an
        # unknown key or template safe-sft refuses itself, before any rank starts)
        ["freeze_trainable_modules=no_such_module", "finetuning_type=freeze"],
        # its environment activated, as its users run it: llamafactory-cli finds torchrun on PATH
        {"PYTHONPATH": str(HF_RANK_HOOKS), "PATH": f"{LF_VENV / 'bin'}:{os.environ.get('PATH', '')}"},
    ),
}


@pytest.fixture(params=list(ENTRIES))
def entry(request: pytest.FixtureRequest) -> Entry:
    if request.param == "llamafactory" and not LF_PYTHON.exists():
        pytest.fail(
            f"LLAMA-FACTORY'S ENVIRONMENT IS MISSING ({LF_VENV}): run `bash scripts/setup_llamafactory.sh` "
            "(bash scripts/test.sh does)"
        )
    return ENTRIES[request.param]


def env_for(entry: Entry, tmp: Path, records: str, fault: str | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        **entry.plugin_env,
        "NPROC_PER_NODE": "2",
        "FORCE_TORCHRUN": "1",  # llamafactory-cli's own switch to torchrun; the others do not read it
        "MASTER_PORT": str(free_port()),
        "SAFE_SFT_FAULT_ONCE": str(tmp / "fault-fired"),
        "SAFE_SFT_FAULT_RECORD": str(tmp / records),
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("PYTHONUNBUFFERED", None)  # block-buffered stdout, as users get it through safe-sft's pipes
    env.pop("SAFE_SFT_FAULT", None)
    if fault:
        env["SAFE_SFT_FAULT"] = fault
    return env


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)


_REFERENCES: dict[str, dict[int, list[str]]] = {}


def reference(entry: Entry, tiny: dict[str, object], tmp: Path) -> dict[int, list[str]]:
    """What the plain launcher trains on, step by step, with the same arguments and no failure."""
    if entry.name not in _REFERENCES:
        done = run(entry.plain(tiny, tmp / "reference-out", tmp), env_for(entry, tmp, "reference-records"))
        # what a rank that died at its interpreter's exit trained on is still the reference (plain_run_finished)
        assert plain_run_finished(done, tmp / "reference-out", 8), done.stderr[-3000:]
        samples = trained_samples(tmp / "reference-records")
        assert sorted(samples) == list(range(1, 9))
        _REFERENCES[entry.name] = samples
    return _REFERENCES[entry.name]


def state_of(checkpoint: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((checkpoint / "trainer_state.json").read_text())  # type: ignore[no-any-return]


def survived(entry: Entry, tiny: dict[str, object], tmp: Path, fault: str) -> list[dict]:  # type: ignore[type-arg]
    """Train into `fault` under safe-sft, into tmp/out: it must succeed; its report's attempts."""
    out = tmp / "out"
    result = run(entry.safe_sft(tiny, out, tmp), env_for(entry, tmp, "ranks", fault))
    assert result.returncode == 0, result.stderr[-3000:]
    data = report(out)
    assert (data["backend"], data["outcome"]) == (entry.name, "succeeded")
    return data["attempts"]  # type: ignore[no-any-return]


def test_an_oom_in_a_step_halves_the_micro_batch_and_resumes_on_the_same_samples(
    entry: Entry, tiny: dict[str, object], tmp_path: Path
) -> None:
    first, second = survived(entry, tiny, tmp_path, "oom_step:4:1")
    assert (first["failure"]["kind"], first["failure"]["rank"]) == ("cuda_oom", 1)
    settings = second["settings"]
    assert (settings["per_device_train_batch_size"], settings["gradient_accumulation_steps"]) == (1, 4)
    checkpoint = Path(first["run_dir"]) / "checkpoint-3"
    assert Path(second["resumed_from"]["checkpoint"]) == checkpoint and second["resumed_from"]["step"] == 3
    assert second["resumed_from"]["weights_only"] is False
    # what the trainer itself ran with in the resumed attempt (the worker's report from inside)
    resolved = second["swift"]
    assert (resolved["per_device_train_batch_size"], resolved["gradient_accumulation_steps"]) == (1, 4)
    assert resolved["resume_from_checkpoint"] == str(checkpoint)
    assert state_of(Path(second["run_dir"]) / "checkpoint-6")["global_step"] == 6
    assert trained_samples(tmp_path / "ranks") == reference(entry, tiny, tmp_path)


def test_an_oom_while_saving_turns_on_save_only_model_and_never_writes_over_the_half_written_checkpoint(
    entry: Entry, tiny: dict[str, object], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first, second = survived(entry, tiny, tmp_path, "oom_save:6:0")
    assert first["failure"]["kind"] == "cuda_oom_save"
    assert second["settings"]["save_only_model"] is True and second["swift"]["save_only_model"] is True
    assert second["resumed_from"]["step"] == 3
    assert Path(second["resumed_from"]["checkpoint"]) == Path(first["run_dir"]) / "checkpoint-3"
    half_written = Path(first["run_dir"]) / "checkpoint-6"
    assert str(half_written) in second["skipped_incomplete_checkpoints"]
    assert half_written.is_dir() and not (half_written / "trainer_state.json").exists()  # left, not deleted
    fresh = Path(second["run_dir"])
    assert fresh != Path(first["run_dir"]) and fresh.parent == out  # a dir of its own beside it, never over it
    assert state_of(fresh / "checkpoint-6")["global_step"] == 6
    assert not (fresh / "checkpoint-6" / "optimizer.pt").exists()  # save_only_model: no optimizer state
    assert trained_samples(tmp_path / "ranks") == reference(entry, tiny, tmp_path)


def test_a_rank_that_hangs_mid_run_is_found_after_its_last_step_by_hang_timeout(
    entry: Entry, tiny: dict[str, object], tmp_path: Path
) -> None:
    """A trainer that logs no swift step log (a script, LLaMA-Factory) hangs after step 4: its worker's step
    log tells the watchdog the step, so --hang-timeout finds the stall after it, not --startup-timeout as a
    start-up stall (hostile47lf F1), and each step's time is in the report (F2)."""
    out = tmp_path / "out"
    argv = entry.safe_sft(tiny, out, tmp_path)
    own = ["--hang-timeout", "15", "--startup-timeout", "600"]
    at = argv.index("--grace-period") + 2  # safe-sft's own options, beside the one the entry gives
    result = run([*argv[:at], *own, *argv[at:]], env_for(entry, tmp_path, "ranks", "stop:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "hang"
    assert re.match(r"no progress for 15 s after step [34] \(--hang-timeout\)", first["failure"]["evidence"][0])
    # a step seen live, while the attempt ran (the watchdog looks every 5 s), not only its last at the end
    assert min(first["step_seen_s"].values()) < first["duration_s"] - 10, first["step_seen_s"]
    assert second["resumed_from"]["step"] == 3


def test_a_user_error_stops_after_one_attempt(entry: Entry, tiny: dict[str, object], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run([*entry.safe_sft(tiny, out, tmp_path), *entry.bad_argument], env_for(entry, tmp_path, "ranks"))
    assert result.returncode == 1, result.stderr[-3000:]
    data = report(out)
    assert data["backend"] == entry.name and len(data["attempts"]) == 1
    failure = data["attempts"][0]["failure"]
    assert failure["kind"] == "user_error"
    bad_value = entry.bad_argument[0].lstrip("-").split("=")[-1]  # no_such_plugin, no_such_option, no_such_module
    assert any(bad_value in line for line in failure["evidence"]), failure["evidence"]


def test_a_script_with_a_bare_trainer_train_resumes_from_safe_sfts_resume_point(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """`safe-sft torchrun` over a script with a bare trainer.train(): attempt 2, told to resume at step 3, had
    trained from step 0 (reported as started over, attempt 1's steps lost). safe-sft's worker hands Trainer.train
    the resume point, so it resumes on the same samples; it still writes into a fresh dir beside attempt 1's
    checkpoints, which stay as they were."""
    entry, out = ENTRIES["torchrun"], tmp_path / "out"
    argv = [*entry.safe_sft(tiny, out, tmp_path), "--ignore_resume", "true"]
    result = run(argv, env_for(entry, tmp_path, "ranks", "oom_step:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    kept = Path(first["run_dir"]) / "checkpoint-3"
    assert Path(second["resumed_from"]["checkpoint"]) == kept and state_of(kept)["global_step"] == 3
    assert not second["resumed_from"].get("started_over")
    fresh = Path(second["run_dir"])
    assert fresh != Path(first["run_dir"]) and not (fresh / "checkpoint-3").exists()  # began at step 4
    assert state_of(fresh / "checkpoint-6")["global_step"] == 6
    assert first["lost"]["back_to_step"] == 3
    assert trained_samples(tmp_path / "ranks") == reference(entry, tiny, tmp_path)


def test_a_script_that_sets_its_output_dir_in_code_resumes_from_the_checkpoint_it_wrote_there(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """safe-sft had looked for checkpoints in the --output_dir given: it found none, attempt 2 trained from step 0
    and saved over attempt 1's checkpoint-3 in the dir the script really writes to."""
    entry, out, real = ENTRIES["torchrun"], tmp_path / "out", tmp_path / "real"
    argv = [*entry.safe_sft(tiny, out, tmp_path), "--output_dir_in_code", str(real)]
    result = run(argv, env_for(entry, tmp_path, "ranks", "oom_step:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert Path(first["run_dir"]) == real and Path(second["resumed_from"]["checkpoint"]) == real / "checkpoint-3"
    assert "started_over" not in second["resumed_from"] or not second["resumed_from"]["started_over"]
    fresh = Path(second["run_dir"])  # beside the checkpoints it resumed from, in the script's own dir
    assert fresh.parent == real and fresh.name.startswith("v2-")
    assert state_of(fresh / "checkpoint-6")["global_step"] == 6 and not list(out.glob("**/checkpoint-*"))


def test_a_script_writing_to_its_own_dir_that_holds_an_earlier_runs_checkpoints_never_saves_over_them(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """A script that sets its output dir in its code, where an earlier run left checkpoint-3 and checkpoint-6:
    safe-sft knew only the --output_dir given, and the run saved its own checkpoint-3 and -6 over them
    (hostile44tr F2, F3). The worker sends this attempt to a fresh dir inside it and says so."""
    entry, out, real = ENTRIES["torchrun"], tmp_path / "out", tmp_path / "real"
    for step in (3, 6):
        (real / f"checkpoint-{step}").mkdir(parents=True)
        (real / f"checkpoint-{step}" / "earlier.txt").write_text(f"the earlier run's step {step}")
    argv = [*entry.safe_sft(tiny, out, tmp_path), "--output_dir_in_code", str(real)]
    result = run(argv, env_for(entry, tmp_path, "ranks"))
    assert result.returncode == 0, result.stderr[-3000:]
    [attempt] = report(out)["attempts"]
    fresh = Path(attempt["run_dir"])
    assert fresh.parent == real and fresh.name.startswith("v1-")
    assert f"safe-sft: {real} holds an earlier run's checkpoint-6 (and 1 more): this attempt writes to {fresh}" in (
        result.stderr
    )
    for step in (3, 6):  # as they were
        assert sorted(p.name for p in (real / f"checkpoint-{step}").iterdir()) == ["earlier.txt"]
    assert state_of(fresh / "checkpoint-6")["global_step"] == 6


def test_a_script_with_its_own_parser_gets_the_watchdogs_timeout_in_its_training_arguments(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """Plain torchrun runs a script whose argparse takes only its own options; safe-sft had appended
    --ddp_timeout 7200 to its command line, and the script stopped on "unrecognized arguments" (user_error)."""
    out = tmp_path / "out"
    script = STACK / "scripts" / "argparse_train.py"
    argv = ["--model_name_or_path", str(tiny["model"]), "--data_path", str(tiny["dataset"]), "--output_dir", str(out)]
    env = {**os.environ, "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    plain = run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port",
                 str(free_port()), str(script), *argv[:-1], str(tmp_path / "plain")], env)  # fmt: skip
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert (tmp_path / "plain" / "ddp_timeout.txt").read_text() == "1800"  # transformers' default
    ours = run([sys.executable, "-m", "launcher", "torchrun", "--nproc", "1", "--", str(script), *argv], env)
    assert ours.returncode == 0, ours.stderr[-3000:]
    assert (out / "ddp_timeout.txt").read_text() == "7200"  # twice the startup timeout, as for swift
    assert (out / "checkpoint-4").is_dir()
    # the report holds the batch its own code set (2), not transformers' default its command line implies (8)
    data = report(out)
    assert (data["global_batch"]["value"], data["attempts"][0]["settings"]["per_device_train_batch_size"]) == (2, 2)


def test_a_scripts_own_option_that_prefixes_output_dir_with_a_file_for_its_value_stays_its_own(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """`--out metrics.json`, the script's own file, had been read as an abbreviated --output_dir: safe-sft made
    its records folder there, and the script, having trained, failed writing its file (plain torchrun ran it)."""
    out, metrics = tmp_path / "out", tmp_path / "metrics.json"
    script = STACK / "scripts" / "argparse_train.py"
    argv = ["--model_name_or_path", str(tiny["model"]), "--data_path", str(tiny["dataset"]), "--output_dir", str(out)]
    env = {**os.environ, "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    ours = run([sys.executable, "-m", "launcher", "torchrun", "--nproc", "1", "--", str(script), *argv,
                "--out", str(metrics)], env)  # fmt: skip
    assert ours.returncode == 0, ours.stderr[-3000:]
    assert metrics.is_file() and json.loads(metrics.read_text()) == {"trained": True}
    assert report(out)["outcome"] == "succeeded" and (out / "checkpoint-4").is_dir()


def test_a_rerun_of_a_script_that_resumes_from_its_own_last_checkpoint_goes_on_from_the_newest_complete_one(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """run_clm.py resumes from get_last_checkpoint(output_dir). A rerun into a dir with checkpoints goes to a
    fresh dir (it would save over them), which hid them from the script: it trained from step 0, where plain
    torchrun goes on (hostile44tr F10). The script now gets the newest complete checkpoint, and the report says
    the attempt went on from it (it had said step 0: hostile44tr M1)."""
    out = tmp_path / "out"
    argv = [str(STACK / "scripts" / "hf_train.py"), "--model_name_or_path", str(tiny["model"]), "--data_path",
            str(tiny["dataset"]), "--output_dir", str(out), "--save_steps", "2", "--use_cpu", "true",
            "--report_to", "none", "--per_device_train_batch_size", "2", "--resume_last", "true"]  # fmt: skip
    env = {**os.environ, "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    first = run([sys.executable, "-m", "launcher", "torchrun", "--nproc", "1", "--", *argv, "--max_steps", "4"], env)
    assert first.returncode == 0, first.stderr[-3000:]
    (out / "checkpoint-4" / "trainer_state.json").rename(out / "checkpoint-4" / "moved")  # a save cut short
    again = run([sys.executable, "-m", "launcher", "torchrun", "--nproc", "1", "--", *argv, "--max_steps", "6"], env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"gets {out / 'checkpoint-2'}, the newest complete one in {out}" in again.stderr
    newest = max((out / "safe-sft").glob("*/report.json"), key=lambda p: p.parent.name)
    rerun = json.loads(newest.read_text())["attempts"][0]
    assert rerun["resumed_from"]["step"] == 2 and rerun["lost"] is None
    fresh = Path(rerun["run_dir"])
    assert fresh.parent == out
    assert sorted(p.name for p in fresh.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]
    assert state_of(fresh / "checkpoint-6")["global_step"] == 6
    assert (out / "checkpoint-4" / "moved").is_file()  # the earlier run's checkpoints as they were


def test_a_script_whose_own_dataloader_keeps_its_batch_stops_before_training_on_another_global_batch(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """A Trainer subclass whose get_train_dataloader batches by the script's own value kept its batch when the
    ladder halved per_device_train_batch_size and doubled the accumulation: the retry trained on twice the
    global batch and said it was kept (hostile44tr F5). The retry now stops before its first step and says why."""
    out = tmp_path / "out"
    argv = [str(STACK / "scripts" / "hf_train.py"), "--model_name_or_path", str(tiny["model"]), "--data_path",
            str(tiny["dataset"]), "--output_dir", str(out), "--max_steps", "6", "--save_steps", "2", "--use_cpu",
            "true", "--report_to", "none", "--per_device_train_batch_size", "2", "--own_loader_batch", "2"]  # fmt: skip
    env = {**env_for(ENTRIES["torchrun"], tmp_path, "ranks", "oom_step:3:0"), "OMP_NUM_THREADS": "1"}
    result = run([sys.executable, "-m", "launcher", "torchrun", "--nproc", "1", "--", *argv], env)
    assert result.returncode == 1, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "cuda_oom" and second["settings"]["per_device_train_batch_size"] == 1
    assert second["failure"]["kind"] == "user_error"
    assert "own get_train_dataloader batches 2 per process, not the per_device_train_batch_size 1" in result.stderr
    assert second["last_step"] is None  # it stopped before its first step
    assert sorted(p.name for p in out.rglob("checkpoint-*")) == ["checkpoint-2"]  # nothing saved by the retry


def test_a_script_with_its_own_parser_is_retried_from_its_own_batch_through_its_training_arguments(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """The ladder had halved transformers' default batch (8) for a script that ran 2; then the script's own
    parser (argparse) stopped on the arguments safe-sft added, and the run ended there. Its command line now
    stays as typed: the worker sets the halved batch and the resume point in the TrainingArguments it builds."""
    out = tmp_path / "out"
    script = STACK / "scripts" / "argparse_train.py"
    argv = ["--model_name_or_path", str(tiny["model"]), "--data_path", str(tiny["dataset"]), "--output_dir", str(out)]
    env = {**env_for(ENTRIES["torchrun"], tmp_path, "ranks", "oom_step:3:0"), "OMP_NUM_THREADS": "1"}
    result = run([sys.executable, "-m", "launcher", "torchrun", "--nproc", "1", "--", str(script), *argv], env)
    assert result.returncode == 0, result.stderr[-3000:]
    data = report(out)
    first, second = data["attempts"]
    assert first["failure"]["kind"] == "cuda_oom" and first["swift"]["per_device_train_batch_size"] == 2
    assert second["settings"]["per_device_train_batch_size"] == 1  # half the script's own 2
    assert second["swift"]["per_device_train_batch_size"] == 1  # what its TrainingArguments held
    assert second["command"] == first["command"]  # the script's options as typed: nothing it would refuse
    resumed = Path(second["resumed_from"]["checkpoint"])
    assert resumed == out / "checkpoint-2" and second["swift"]["resume_from_checkpoint"] == str(resumed)
    assert state_of(Path(second["run_dir"]) / "checkpoint-4")["global_step"] == 4


def test_a_module_runs_under_safe_sft_torchrun_as_under_torchrun_m(tiny: dict[str, object], tmp_path: Path) -> None:
    """`torchrun -m pkg.train ARGS` trains; safe-sft had refused `-m` as a script name that starts with a dash."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    shutil.copy(SCRIPT, tmp_path / "pkg" / "train.py")
    out = tmp_path / "out"
    args = ["--model_name_or_path", str(tiny["model"]), "--data_path", str(tiny["dataset"]), "--output_dir", str(out),
            "--max_steps", "2", "--save_steps", "2", "--use_cpu", "true", "--report_to", "none"]  # fmt: skip
    env = {**os.environ, "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "torchrun", "--nproc", "1", "--", "-m", "pkg.train", *args],
        env={**env, "PYTHONPATH": str(REPO)}, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "checkpoint-2").is_dir()


def test_a_deepspeed_config_where_deepspeed_is_not_installed_is_refused_before_anything_starts(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """LLaMA-Factory's own environment installs no DeepSpeed: a `deepspeed=` config there stopped every rank on its
    import (PackageNotFoundError), which was retried as unknown (hostile47lf F3). It is refused in one line with
    the fix; and the error, should a rank still meet it, is a user error with that fix."""
    if not LF_PYTHON.exists():
        pytest.fail(f"LLAMA-FACTORY'S ENVIRONMENT IS MISSING ({LF_VENV}): run `bash scripts/setup_llamafactory.sh`")
    missing = subprocess.run([str(LF_PYTHON), "-c", "import importlib.util as u; print(u.find_spec('deepspeed'))"],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.stdout.strip() == "None", "this test needs LLaMA-Factory's environment without DeepSpeed"
    config = tmp_path / "z2.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    entry = ENTRIES["llamafactory"]
    result = run([*entry.safe_sft(tiny, tmp_path / "out", tmp_path), f"deepspeed={config}"],
                 env_for(entry, tmp_path, "ranks"))  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("safe-sft: error: ")]
    assert errors == [
        "safe-sft: error: deepspeed is given, and DeepSpeed is not installed for "
        f"{LF_PYTHON}, the Python every rank runs"
    ], result.stderr[-2000:]
    assert "safe-sft: fix: pip install deepspeed there, or leave deepspeed out" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("checkpoint-*"))
