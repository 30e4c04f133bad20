"""Generated bad inputs against `plan` and the run path up to launch: never a traceback, always exit 2 with
a line naming the bad value, and no file that existed before is changed.

In-process through `launcher.cli.main` (a subprocess each would take minutes). The host is four fake
80 GiB GPUs plus this machine's real disk, so GPU cases mean the same on every machine; the run path is
stopped before it could launch (the supervisor, the coordinator and the child process fail the test if
they are ever reached).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from launcher import cli
from launcher.probe.disk import probe_disk
from tests.conftest import gpus, host

BASE = ["--model", "m", "--output_dir", "{out}"]
SAFE_ENV = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Case:
    id: str
    own: tuple[str, ...] = ()  # safe-sft's options, first
    swift: tuple[str, ...] = ()  # after BASE
    env: dict[str, str] = field(default_factory=dict)
    needle: str = ""  # what the error line must name
    files: dict[str, bytes] = field(default_factory=dict)  # fixture files this case needs ({tree}/name)
    commands: tuple[str, ...] = ("plan", "run")


def _env_cases() -> Iterator[Case]:
    bad = {
        "NNODES": ["x", "-1", "0", "1.5", "", "two", "1e3", "0x10"],
        "NODE_RANK": ["x", "-1", "1.0", "", "first"],
        "NPROC_PER_NODE": ["x", "-2", "0", "2.5", "", "all"],
        "MASTER_PORT": ["x", "-1", "0", "70000", "99999999", "", "port"],
        "CUDA_VISIBLE_DEVICES": ["0,0", "9", "0,,1", "", "-1", "GPU-nope", "1,1,1", "a", "0,9"],
    }
    for name, values in bad.items():
        for value in values:
            needle = f"{name}={value!r}" if not value.lstrip("-").isdigit() else f"{name}={value}"
            if name == "CUDA_VISIBLE_DEVICES":
                needle = "CUDA_VISIBLE_DEVICES"
            yield Case(f"env-{name}-{value or 'empty'}", env={name: value}, needle=needle)
    yield Case("env-rank-beyond", env={"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "h"}, needle="NODE_RANK=2")
    yield Case("env-loopback-multinode", env={"NNODES": "2"}, needle="MASTER_ADDR=127.0.0.1")


def _slurm_cases() -> Iterator[Case]:
    step = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0"}
    nodelists = ["gpu-[01-03", "gpu-01]", "n[3-1]", "n[a-b]", "a,,b", "n[]", "[", "]", "n[1-2-3]", "n[01-]",
                 "n[-1]", "a,b]", ",a", "a,", "n[1,]", "n[[1]]", "n]1[", "n[1-x]"]  # fmt: skip
    for nodelist in nodelists:
        yield Case(f"nodelist-{nodelist}", env={**step, "SLURM_JOB_NODELIST": nodelist}, needle=repr(nodelist))
    for count in ("3", "4", "1"):
        yield Case(
            f"nodelist-count-{count}",
            env={**step, "SLURM_JOB_NUM_NODES": count, "SLURM_JOB_NODELIST": "a,b"},
            needle=f"SLURM_JOB_NUM_NODES={count}",
        )
    slurm_bad = (("SLURM_JOB_NUM_NODES", "two"), ("SLURM_NODEID", "x"), ("SLURM_JOB_NUM_NODES", "-"),
                 ("SLURM_NTASKS", "many"), ("SLURM_STEP_NUM_NODES", "one"), ("SLURM_GPUS_ON_NODE", "4x"))  # fmt: skip
    for name, value in slurm_bad:
        yield Case(
            f"slurm-{name}-{value}", env={**step, "SLURM_JOB_NODELIST": "a,b", name: value}, needle=f"{name}={value!r}"
        )
    yield Case("slurm-batch-script", env={"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2",
               "SLURM_JOB_NODELIST": "a,b"}, needle="SLURM_STEP_ID is not set")  # fmt: skip
    yield Case("slurm-step-subset", env={**step, "SLURM_JOB_NODELIST": "a,b", "SLURM_STEP_NUM_NODES": "1"},
               needle="SLURM_STEP_NUM_NODES=1")  # fmt: skip
    yield Case("slurm-ntasks", env={**step, "SLURM_JOB_NODELIST": "a,b", "SLURM_NTASKS": "16"},
               needle="SLURM_NTASKS=16")  # fmt: skip
    yield Case("slurm-job-id", env={"SLURM_JOB_ID": "abc", "SLURM_STEP_ID": "0"}, needle="SLURM_JOB_ID='abc'")


def _mistyped(name: str) -> Iterator[str]:
    bare = name[2:]
    yield "--" + bare[:-1]  # a letter short
    yield "--" + bare + bare[-1]  # a letter doubled at the end
    yield "--" + bare.replace("-", "_")  # swift's spelling of ours
    if len(bare) > 8:
        yield "--" + bare[:2] + bare[3] + bare[2] + bare[4:]  # two letters swapped


def _option_cases() -> Iterator[Case]:
    values = {
        "--gpus": ["0", "99", "0,0", "9,", "x", "1,x", ",", "-1", "0,9"],
        "--nnodes": ["0", "-1"],
        "--master-port": ["0", "70000"],
        "--model-params": ["lots", "7x", "-5", "1e999", "nan", "7", "0.5", "72"],
        "--nccl-env": [
            "LD_PRELOAD=x",
            "CUDA_VISIBLE_DEVICES=5",
            "NCCL",
            "=1",
            "nccl_x=1",
            "PATH=/tmp",
            "MASTER_PORT=1",
        ],
    }
    for option, bad in values.items():
        for value in bad:
            yield Case(f"opt{option}-{value or 'empty'}", own=(option, value), needle=value or option)
    yield Case("opt--node-rank-beyond", own=("--nnodes", "2", "--node-rank", "5", "--master-addr", "h"),
               needle="NODE_RANK=5")  # fmt: skip
    yield Case("opt--nproc-negative", own=("--nproc", "-1"), swift=("--use_cpu", "true"), needle="-1")
    for option, bad in {"--nnodes": ["x", "1.5"], "--master-port": ["port"], "--nproc": ["two"]}.items():
        for value in bad:
            yield Case(f"click{option}-{value}", own=(option, value), needle=repr(value))
    # (--hang-timeout 0 and --startup-timeout 0 are valid: they turn the watchdog, or its start-up limit, off)
    run_only = {"--max-attempts": ["0", "101", "x"], "--grace-period": ["soon"], "--hang-timeout": ["-1", "x"],
                "--startup-timeout": ["-5"], "--node-timeout": ["0", "-5"], "--coord-port": ["0", "70000"],
                "--memory-sample-interval": ["-1", "often"]}  # fmt: skip
    for option, bad in run_only.items():
        for value in bad:
            yield Case(f"run{option}-{value}", own=(option, value), needle=value, commands=("run",))
    for option in ("--assume-gpus", "--assume-ram"):
        for value in ("4xlots", "lots", "-1GiB", "GiB", "x80GiB", "0x80GiB", "1e999GiB", "2x1e400"):
            needle = value.split("x", 1)[1] if value[0].isdigit() and "x" in value else value
            yield Case(f"plan{option}-{value}", own=(option, value), needle=needle, commands=("plan",))
    for option, value in (("--assume-gpus", "2x0GiB"), ("--assume-gpus", "99999999999x80GiB"),
                          ("--assume-gpus", "65x80GiB"), ("--assume-ram", "0GiB")):  # fmt: skip
        yield Case(f"plan{option}-{value}", own=(option, value), needle=repr(value), commands=("plan",))
    for value in ("0", "-1"):  # named as typed, not as the NNODES=0 (flag) it becomes (audit42 F10)
        yield Case(f"plan--assume-nodes-{value}", own=("--assume-nodes", value), needle=f"--assume-nodes {value} is no",
                   commands=("plan",))  # fmt: skip
    for option, value in (("--assume-gpus", "8x80"), ("--assume-gpus", "24"), ("--assume-ram", "512")):
        yield Case(
            f"plan{option}-{value}-no-unit", own=(option, value), needle="its unit is missing", commands=("plan",)
        )
    for option, value in (("--assume-gpus", "8x80GiB"), ("--assume-ram", "512GiB"), ("--assume-nodes", "2")):
        yield Case(f"run{option}-refused", own=(option, value), needle=f"{option} {value} on the run path",
                   commands=("run",))  # fmt: skip
    names = sorted({n for c in (cli.COMMANDS["run"][0], cli.COMMANDS["plan"][0]) for n in cli.option_names(c)})
    for name in names:
        for typo in sorted(set(_mistyped(name)) - {name}):
            yield Case(f"typo{typo}", own=(typo, "1"), needle=f"did you mean {name}")
        commands = tuple(c for c in ("plan", "run") if name in cli.option_names(cli.COMMANDS[c][0]))
        yield Case(f"after{name}", swift=(name, "1"), needle=f"option {name} comes after", commands=commands)


YAML_BAD = {
    "open.yaml": b"a: [1\n", "tab.yaml": b"model: m\n\tx: 1\n", "alias.yaml": b"a: *x\n", "nul.yaml": b"\x00\x00",
    "binary.yaml": bytes(range(256)), "list.yaml": b"- 1\n- 2\n", "empty.yaml": b"", "scalar.yml": b"just text\n",
    "bad.json": b"{bad", "list.json": b"[1, 2]", "binary.json": b"\xff\xfe\x00\x01", "str.json": b'"model"',
    "latin1.yaml": "model: caf\xe9\n".encode("latin-1"), "dup.json": b'{"a": 1,}',
}  # fmt: skip
DS_BAD = {
    "stage7.json": {"zero_optimization": {"stage": 7}}, "stage-two.json": {"zero_optimization": {"stage": "two"}},
    "stage-neg.json": {"zero_optimization": {"stage": -1}}, "stage-true.json": {"zero_optimization": {"stage": True}},
    "stage-null.json": {"zero_optimization": {"stage": None}}, "stage-half.json": {"zero_optimization": {"stage": 2.5}},
    "stage-list.json": {"zero_optimization": {"stage": [2]}}, "zero-list.json": {"zero_optimization": [2]},
    "zero-str.json": {"zero_optimization": "zero2"}, "no-batch.json": {"zero_optimization": {"stage": 2}},
}  # fmt: skip


def _swift_number_cases() -> Iterator[Case]:
    """swift's whole-number fields the plan reads: a value swift's parser refuses, or one no run can use
    (swift itself takes `-1` and fails in the first step, after the model has loaded)."""
    bad = {
        "--per_device_train_batch_size": ["0", "-1", "abc", "1.5", "2e3", ""],
        "--gradient_accumulation_steps": ["0", "-4", "x"],
        "--max_length": ["0", "-5", "1e9", "4k"],
        "--lora_rank": ["0", "r8"],
        "--per_device_eval_batch_size": ["0"],
        "--sequence_parallel_size": ["0", "two"],
        "--max_pixels": ["-1", "1024*1024"],
        "--dataloader_num_workers": ["-2", "auto"],
    }
    for flag, values in bad.items():
        for value in values:
            yield Case(f"swift{flag}-{value or 'empty'}", swift=(flag, value), needle=f"{flag} {value!r}")
    for dataset in ("typo.jsonl", "data/train.json#500", "/nowhere/d.csv"):
        yield Case(
            f"dataset-missing-{dataset}", swift=("--dataset", dataset), needle=f"--dataset {dataset!r} is no file"
        )
    for name, content in {"empty.jsonl": b"", "blank.jsonl": b"\n \n\t\n", "empty.csv": b""}.items():
        yield Case(f"dataset-{name}", swift=("--dataset", "{tree}/" + name), files={name: content},
                   needle=f"{name}' is empty (swift's loader finds no rows in it and stops)")  # fmt: skip
    for model in ("/nowhere/Qwen2.5-7B", "./models/qwen", "../qwen", "~/no-such-model-dir"):
        yield Case(f"model-missing-{model}", swift=("--model", model), needle=f"--model {model!r} is no directory")
    # (a plan for an assumed machine only warns of a missing file: test_plan_data_cli.py)
    yield Case("swift-dash-spelling", swift=("--per-device-train-batch-size", "0"),
               needle="--per_device_train_batch_size '0'")  # fmt: skip


def _swift_value_cases() -> Iterator[Case]:
    """Values swift's parser would not convert: not a number, not a truthy word, none of a Literal field's
    choices; on the command line and in a config file (where a YAML null becomes `None`)."""
    unconverted = {
        "--learning_rate": ["abc", "1,5e-4", "None"],
        "--num_train_epochs": ["three"],
        "--max_steps": ["1e3", "None", "50.0"],
        "--gradient_checkpointing": ["on", "off", "2", "None"],
        "--packing": ["maybe"],
    }
    for flag, values in unconverted.items():
        for value in values:
            yield Case(f"value{flag}-{value}", swift=(flag, value), needle=f"{flag} {value!r} is not")
    yield Case("config-yaml-null-number", files={"null-number.yaml": b"max_length: null\n"},
               needle="--max_length 'None' is not a whole number")  # fmt: skip
    bad = {
        "--torch_dtype": ["int4", "BF16", "bf16", "fp16"],
        "--quant_bits": ["3.5", "16", "nf4"],
        "--quant_method": ["gptq", "BNB"],
        "--truncation_strategy": ["cut"],
        "--optim": ["adam"],
        "--task_type": ["classification"],
        "--padding_side": ["center"],
    }
    for flag, values in bad.items():
        for value in values:
            yield Case(f"choice{flag}-{value}", swift=(flag, value), needle=f"{flag} {value!r} is not one of")
    for tuner, meant in (("ful", " (did you mean full?)"), ("qlora", " (did you mean lora?)"), ("p-tuning", "")):
        yield Case(f"tuner-{tuner}", swift=("--tuner_type", tuner),
                   needle=f"--tuner_type {tuner!r} is not one of swift's tuners{meant}")  # fmt: skip


def _config_cases() -> Iterator[Case]:
    for name, content in YAML_BAD.items():
        yield Case(f"config-{name}", swift=(), files={name: content}, needle=name)
    for name, config in DS_BAD.items():
        body = {"train_micro_batch_size_per_gpu": "auto", **config} if name != "no-batch.json" else config
        yield Case(f"ds-{name}", swift=("--deepspeed", "{tree}/" + name), files={name: json.dumps(body).encode()},
                   needle=name)  # fmt: skip
    for name, content in {"ds-broken.json": b"{", "ds-array.json": b"[]", "ds-binary.json": b"\x89PNG"}.items():
        yield Case(f"ds-{name}", swift=("--deepspeed", "{tree}/" + name), files={name: content}, needle=name)
    for inline in ('{"zero_optimization": {"stage": 9}, "train_batch_size": 8}', "{not json", "zero9"):
        yield Case(f"ds-inline-{inline[:12]}", swift=("--deepspeed", inline), needle=inline[:8])


def _checkpoint_cases() -> Iterator[Case]:
    state = b'{"global_step": 3}'
    weights = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "
    corrupt = {
        "no-state": {"model.safetensors": weights},
        "no-weights": {"trainer_state.json": state},
        "empty-state": {"trainer_state.json": b"", "model.safetensors": weights},
        "truncated-state": {"trainer_state.json": state[:7], "model.safetensors": weights},
        "binary-state": {"trainer_state.json": b"\xff\x00", "model.safetensors": weights},
        "empty-dir": {},
    }
    for name, files in corrupt.items():
        laid = {f"{name}/checkpoint-3/{f}": c for f, c in files.items()} or {f"{name}/checkpoint-3/.keep": b""}
        yield Case(f"ckpt-{name}", swift=("--resume_from_checkpoint", "{tree}/" + name + "/checkpoint-3"),
                   files=laid, needle=f"{name}/checkpoint-3", commands=("run",))  # fmt: skip
    yield Case(
        "ckpt-missing", swift=("--resume_from_checkpoint", "{tree}/nowhere"), needle="nowhere", commands=("run",)
    )
    yield Case("ckpt-a-file", swift=("--resume_from_checkpoint", "{tree}/a-file.txt"), files={"a-file.txt": b"x"},
               needle="a-file.txt", commands=("run",))  # fmt: skip


def _output_dir_cases() -> Iterator[Case]:
    yield Case("outdir-a-file", files={"out-file": b"mine"}, swift=("--output_dir", "{tree}/out-file"),
               needle="out-file", commands=("run",))  # fmt: skip
    yield Case("outdir-under-a-file", files={"out-file2": b"mine"}, swift=("--output_dir", "{tree}/out-file2/x"),
               needle="out-file2", commands=("run",))  # fmt: skip


def _other_cases() -> Iterator[Case]:
    yield Case("run-no-gpu-no-use-cpu", needle="--use_cpu not given", commands=("run",))  # host without GPUs below
    yield Case("gpus-with-use-cpu", own=("--gpus", "0,1"), swift=("--use_cpu", "true"), needle="--gpus 0,1")


CASES = [
    *_env_cases(), *_slurm_cases(), *_option_cases(), *_swift_number_cases(), *_swift_value_cases(),
    *_config_cases(), *_checkpoint_cases(), *_output_dir_cases(), *_other_cases(),
]  # fmt: skip
RUNS = [pytest.param(case, command, id=f"{command}:{case.id}") for case in CASES for command in case.commands]


def test_there_are_at_least_200_generated_bad_inputs() -> None:
    assert len(CASES) >= 200 and len({c.id for c in CASES}) == len(CASES)
    assert len(RUNS) >= 350


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every file any case needs, written once; hashed before and after each case."""
    root = tmp_path_factory.mktemp("fixture")
    for case in CASES:
        for name, content in case.files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(content)
    return root


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing may launch, and the environment holds only what the case sets."""
    from launcher.run import child, coord, supervisor

    def launched(*_: object, **__: object) -> None:
        raise AssertionError("the run path reached a launch")

    monkeypatch.setattr(supervisor.Supervisor, "run", launched)
    monkeypatch.setattr(coord.Coordinator, "__init__", launched)
    monkeypatch.setattr(child.TrainingProcess, "__init__", launched)
    for name in list(os.environ):
        if name.startswith(("SLURM_", "SAFE_SFT_")) or name in SAFE_ENV:
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("case", "command"), RUNS)
def test_bad_input_is_exit_2_with_one_line_naming_it_and_changes_nothing(
    case: Case,
    command: str,
    tree: Path,
    guarded: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import launcher.prepare

    gpu_list = () if case.id == "run-no-gpu-no-use-cpu" else gpus(4, 80)
    monkeypatch.setattr(
        launcher.prepare, "probe_host", lambda out: _facts(gpu_list, out)
    )  # fake GPUs, this machine's disk
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    out = tree / "outputs" / case.id
    swift = [a.replace("{tree}", str(tree)).replace("{out}", str(out)) for a in (*BASE, *case.swift)]
    if any(name.endswith((".yaml", ".yml", ".json")) for name in case.files) and case.id.startswith("config-"):
        swift = [str(tree / next(iter(case.files))), *swift]
    before = digest(tree)
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, *case.own, *swift])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err[-1500:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith(("safe-sft: error:", "Error:"))]
    assert len(lines) == 1, err[-1500:]
    needle = case.needle.replace("{tree}", str(tree))
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert digest(tree) == before
    assert not (out / "safe-sft").exists()


def _facts(gpu_list, out: Path):  # type: ignore[no-untyped-def]
    disk = probe_disk(out)
    return replace(host(gpu_list), disk_free_bytes=disk.free_bytes, disk_path=disk.path, disk_problem=disk.problem)


def test_an_internal_error_leaves_the_report_failed_not_running(
    tmp_path: Path, guarded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash of safe-sft's own (a bug) had left report.json saying `running` after the process ended."""
    import launcher.prepare
    from launcher.run import child, supervisor

    def crash(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(supervisor.Supervisor, "run", crash)
    # pytest itself must not become the subreaper of orphans: later tests count on init adopting them
    monkeypatch.setattr(child, "become_subreaper", lambda: None)
    monkeypatch.setattr(launcher.prepare, "probe_host", lambda out: _facts(gpus(4, 80), out))
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["--model", "m", "--output_dir", str(out)])
    (report,) = out.glob("safe-sft/*/report.json")
    found = json.loads(report.read_text())
    assert found["outcome"] == "failed"
    assert "internal error (RuntimeError: boom)" in json.dumps(found)
