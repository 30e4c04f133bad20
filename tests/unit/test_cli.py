"""Option splitting, the JSON plan schema through the real CLI, and the light import path."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import COMMANDS, split_own_options

PLAN = COMMANDS["plan"][0]


@pytest.mark.parametrize(
    ("args", "own", "swift"),
    [
        pytest.param(["--model", "m"], [], ["--model", "m"], id="drop-in"),
        pytest.param(
            ["--gpus", "2", "--force", "--model", "m"],
            ["--gpus", "2", "--force"],
            ["--model", "m"],
            id="leading",
        ),
        pytest.param(
            ["--gpus=2", "cfg.yaml", "--gpus", "x"],
            ["--gpus=2"],
            ["cfg.yaml", "--gpus", "x"],
            id="stops-at-first-unknown",
        ),
        pytest.param(["--json", "--", "--force", "1"], ["--json"], ["--force", "1"], id="double-dash"),
    ],
)
def test_split_own_options(args: list[str], own: list[str], swift: list[str]) -> None:
    assert split_own_options(PLAN, args) == (own, swift)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=60)


def test_plan_json_schema_7b_full_and_lora() -> None:
    common = ["--json", "--model-params", "7e9", "--assume-gpus", "4x24GiB", "--assume-ram", "256GiB"]
    # one process per GPU asked for: device_map would fit here without offload (test_device_map.py)
    full = run_cli(
        "plan", "--layout", "processes", *common, "--model", "Qwen/Qwen2.5-7B-Instruct", "--tuner_type", "full"
    )
    assert full.returncode == 0, full.stderr
    plan = json.loads(full.stdout)
    assert plan["strategy"] in ("zero3", "zero3_offload")
    assert "zero2 does not fit" in plan["strategy_reason"]
    for key in ("nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port"):
        assert set(plan["topology"][key]) >= {"value", "source"}
    assert plan["topology"]["nproc_per_node"]["value"] == 4
    # ddp: what no DeepSpeed needs; device_map: one process over the 4 GPUs, estimated though not chosen
    assert set(plan["estimates"]) == {"zero2", "zero3", "zero3_offload", "ddp", "device_map"}
    assert not plan["estimates"]["ddp"]["fits"]
    parts = plan["estimates"]["zero3"]["parts"]
    assert {"gpu_zero3_live_params", "gpu_zero_buckets", "gpu_logits"} <= set(parts)
    assert sum(v for k, v in parts.items() if k.startswith("gpu_")) == plan["estimates"]["zero3"]["gpu_need_bytes"]
    assert all(
        {"gpu_need_bytes", "gpu_free_bytes", "cpu_need_bytes", "cpu_free_bytes"} <= set(e)
        for e in plan["estimates"].values()
    )
    assert plan["command"][1:3] == ["-m", "torch.distributed.run"]
    assert plan["env"]["NPROC_PER_NODE"] == "4"
    lora = json.loads(run_cli("plan", *common, "--model", "Qwen/Qwen2.5-7B-Instruct", "--tuner_type", "lora").stdout)
    assert lora["strategy"] == "zero2"


def test_nothing_fits_exits_3_with_numbers_unless_forced() -> None:
    args = [
        "plan",
        "--model-params",
        "72e9",
        "--assume-gpus",
        "1x24GiB",
        "--assume-ram",
        "64GiB",
        "--model",
        "m",
        "--tuner_type",
        "full",
    ]
    result = run_cli(*args)
    assert result.returncode == 3
    assert "nothing fits" in result.stderr and "GiB" in result.stderr
    error, fix = result.stderr.splitlines()[-2:]  # one line, and its fix, as every other refusal
    assert error.startswith("safe-sft: error: nothing fits whatever the data: ")
    assert fix == "safe-sft: fix: take one of the options above, or pass --force to launch anyway"
    assert run_cli(args[0], "--force", *args[1:]).returncode == 0
    as_json = run_cli(args[0], "--json", *args[1:])
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout)["fits"] is False  # one document: the plan (the error had followed it)


def test_bad_value_is_one_line_with_fix() -> None:
    result = run_cli("plan", "--assume-gpus", "4xlots", "--model", "m")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == "safe-sft: error: --assume-gpus 'lots' is not a size"
    assert result.stderr.splitlines()[1].startswith("safe-sft: fix:")
    assert "Traceback" not in result.stderr


def test_plan_does_not_import_torch_deepspeed_or_swift() -> None:
    code = (
        "import sys; from launcher.cli import main\n"
        "try:\n    main(['plan', '--json', '--assume-gpus', '2x80GiB', '--model-params', '7e9', '--model', 'm'])\n"
        "except SystemExit: pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'deepspeed', 'swift', 'transformers'))\n"
        "print('HEAVY', bad)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in result.stdout, result.stdout[-500:] + result.stderr[-500:]


def test_explain_json_on_a_golden_log() -> None:
    result = run_cli("explain", "--json", "tests/data/cuda_oom_step_rank1.log")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["kind"], data["rank"]) == ("cuda_oom", 1)
    assert data["evidence"][0].startswith("torch.OutOfMemoryError")
    assert data["ladder"][0].startswith("halve per_device_train_batch_size")


def test_explain_reads_kernel_oom_lines_pasted_from_dmesg(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "capture.log"
    summary = (Path("tests/data/host_oom_sigkill_rank1.log")).read_text()
    log.write_text("Out of memory: Killed process 4818 (python3) total-vm:9000000kB\n" + summary)
    data = json.loads(run_cli("explain", "--json", str(log)).stdout)
    assert (data["kind"], data["rank"]) == ("host_oom", 1)


def test_explain_missing_file_is_one_line() -> None:
    result = run_cli("explain", "/no/such.log")
    assert result.returncode == 2
    assert result.stderr.startswith("safe-sft: error: /no/such.log does not exist")


def test_plan_explain_memory_shows_parts_and_the_largest_lever() -> None:
    args = ["--model-params", "7e9", "--assume-gpus", "8x80GiB", "--assume-ram", "1024GiB", "--explain-memory"]
    swift = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--per_device_train_batch_size", "4", "--max_length", "4096"]
    done = run_cli("plan", *args, *swift)
    assert done.returncode == 0, done.stderr
    table = done.stdout[done.stdout.index("Memory per GPU, by part") :]
    header = table.splitlines()[1].split()
    assert header[:3] == ["zero2", "*", "zero3"]  # LoRA on 8x80: zero2 chosen, marked
    for part in ("weights", "zero3_live_params", "zero_buckets", "logits", "fragmentation_margin"):
        assert f"  {part} " in table
    # the logits of 4 x 4096 tokens over a 152064 vocabulary are the largest part: liger first, then the batch
    # and the length, a near tie (the halved batch accumulates, so its gradients then coexist with the logits)
    found = re.search(r"zero2 \(fits\): --use_liger_kernel true saves \d+\.\d GiB per GPU \(then: (.*)\)", table)
    assert found is not None
    assert sorted(lever.rsplit(" ", 2)[0] for lever in found.group(1).split(", ")) == [
        "max_length 4096 -> 2048",
        "micro-batch 4 -> 2",
    ]


@pytest.mark.parametrize(
    "flag",
    [
        pytest.param(["--assume-gpus", "8x80GiB"], id="gpus"),
        pytest.param(["--assume-ram", "512GiB"], id="ram"),
        pytest.param(["--assume-nodes", "2"], id="nodes"),
    ],
)
def test_assume_flags_are_refused_on_the_run_path(tmp_path: Path, flag: list[str]) -> None:
    out = tmp_path / "out"
    result = run_cli(*flag, "--model", "m", "--use_cpu", "true", "--output_dir", str(out))
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith(f"safe-sft: error: {flag[0]} {flag[1]} on the run path")
    assert "safe-sft plan" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_no_gpu_without_use_cpu_is_refused_on_the_run_path_only(fake_host) -> None:  # type: ignore[no-untyped-def]
    from launcher.errors import SafeSftError
    from launcher.prepare import LaunchOptions, check_launchable, prepare

    no_gpu = fake_host()
    prepared = prepare(["--model", "m"], LaunchOptions(), {}, host=no_gpu)
    assert any("--use_cpu true" in w for w in prepared.plan.warnings)  # plan shows it
    with pytest.raises(SafeSftError, match=r"no GPU visible .* and --use_cpu not given") as err:
        check_launchable(prepared)
    assert "--use_cpu true" in err.value.hint
    check_launchable(prepare(["--model", "m", "--use_cpu", "true"], LaunchOptions(), {}, host=no_gpu))


def test_no_gpu_fix_is_written_in_the_trainers_own_spelling(fake_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """LLaMA-Factory's overrides are key=value: `--use_cpu true` was then refused as its spelling (audit42 F6)."""
    from launcher.backends.llamafactory import LLAMAFACTORY
    from launcher.errors import SafeSftError
    from launcher.prepare import LaunchOptions, check_launchable, prepare

    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\nfinetuning_type: lora\noutput_dir: out\n")
    prepared = prepare([str(config)], LaunchOptions(), {}, host=fake_host(), backend=LLAMAFACTORY)
    with pytest.raises(SafeSftError, match=r"and use_cpu not given") as err:
        check_launchable(prepared)
    assert err.value.hint.startswith("add use_cpu=true to train on the CPU")


def test_a_scripts_cpu_processes_are_a_note_where_its_run_starts(fake_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The plan had warned that the run refuses to start without --use_cpu, where `safe-sft torchrun --nproc`
    starts a script that sets use_cpu in its own code."""
    from dataclasses import replace

    from launcher.backends.hf_trainer import HF_TRAINER
    from launcher.plan.topology import NO_GPU_WARNING, TopologyRequest
    from launcher.prepare import LaunchOptions, check_launchable, prepare

    script = tmp_path / "train.py"
    script.write_text("")
    options = replace(LaunchOptions(), topology=TopologyRequest(nproc=2))
    prepared = prepare([str(script), "--output_dir", "o"], options, {}, host=fake_host(), backend=HF_TRAINER)
    assert NO_GPU_WARNING not in prepared.plan.warnings
    assert "no GPU visible: 2 CPU process(es) (--nproc), for a script that sets use_cpu in its own code" in (
        prepared.plan.notes
    )
    check_launchable(prepared)  # the run path agrees: it starts
    plain = prepare([str(script), "--output_dir", "o"], LaunchOptions(), {}, host=fake_host(), backend=HF_TRAINER)
    assert NO_GPU_WARNING in plain.plan.warnings  # without --nproc the run path refuses, and the plan says so


AFTER = "comes after swift's arguments (--model m), so swift would get it"
MEANT = "did you mean --max-attempts"


@pytest.mark.parametrize(
    ("args", "first_line"),
    [
        pytest.param(["--max-attemps", "3", "--model", "m"], f"unknown option --max-attemps: {MEANT}?", id="misspelt"),
        pytest.param(["--max_attempts", "3", "--model", "m"], f"unknown option --max_attempts: {MEANT}?",
                     id="underscore-spelling"),
        pytest.param(["--model", "m", "--node-timout=5"], "unknown option --node-timout: did you mean --node-timeout?",
                     id="misspelt-later-with-equals"),
        pytest.param(["--model", "m", "--max-attempts", "3"], f"safe-sft's option --max-attempts {AFTER}",
                     id="after-swift-args"),
        pytest.param(["plan", "--model", "m", "--gpus", "2"], f"safe-sft's option --gpus {AFTER}",
                     id="plan-after-swift-args"),
        pytest.param(["plan", "--max-attempts", "3", "--model", "m"],
                     "--max-attempts is an option of `safe-sft run`, not of `safe-sft plan`", id="run-option-to-plan"),
        pytest.param(["plan", "--max-attemps", "3", "--model", "m"],
                     f"unknown option --max-attemps: {MEANT} (an option of `safe-sft run`)?",
                     id="plan-misspelt-run-option"),
    ],
)  # fmt: skip
def test_own_options_among_swift_args_are_caught_before_anything_starts(
    tmp_path: Path, args: list[str], first_line: str
) -> None:
    out = tmp_path / "out"
    result = run_cli(*args, "--use_cpu", "true", "--output_dir", str(out))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"safe-sft: error: {first_line}"
    assert lines[1].startswith("safe-sft: fix: ") and len(lines) == 2  # nothing planned, nothing started
    assert not out.exists()


@pytest.mark.parametrize(
    "swift",
    [
        pytest.param(["--max_steps", "3", "--max-steps=3", "--ddp_timeout", "5", "--model_type", "qwen2"], id="swift"),
        pytest.param(["--lora_rank", "8", "--check_model", "false", "--model_kwargs", "{}"], id="near-names"),
    ],
)
def test_swifts_own_options_pass_the_check(swift: list[str]) -> None:
    from launcher.cli import check_swift_argv

    for name in ("run", "plan"):
        check_swift_argv(COMMANDS[name][0], ["--model", "m", *swift])


def test_after_a_double_dash_everything_is_swifts() -> None:
    result = run_cli("plan", "--json", "--assume-gpus", "1x80GiB", "--", "--model", "m", "--max-attempts", "3")
    assert "--max-attempts" not in result.stderr
    command = json.loads(result.stdout)["command"]
    assert command[command.index("--max-attempts") + 1] == "3"  # passed to swift as it is


def test_plan_columns_never_run_together() -> None:
    long_addr = "a-very-long-master-hostname.cluster.example.org"
    result = run_cli("plan", "--master-addr", long_addr, "--assume-gpus", "1x80GiB", "--model", "m")
    row = next(line for line in result.stdout.splitlines() if line.strip().startswith("MASTER_ADDR"))
    assert row.split() == ["MASTER_ADDR", long_addr, "flag"]
    rows = [line for line in result.stdout.splitlines()[1:7]]
    assert len({line.index(line.split()[2]) for line in rows}) == 1  # the source column lines up


def test_plan_warns_when_a_stale_nnodes_beats_slurms() -> None:
    import os

    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0",
             "SLURM_JOB_NODELIST": "a,b", "NNODES": "1"}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--assume-gpus", "1x80GiB", "--model", "m"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **slurm},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (
        "warning: NNODES=1 from your environment beats Slurm's SLURM_JOB_NUM_NODES=2: using 1 (unset NNODES to use "
        "Slurm's)" in result.stdout
    )


def test_only_the_data_over_the_card_plans_with_a_warning_and_exit_0() -> None:
    """Issue 15: a 2B model, micro-batch 16 x 4096 padding-free tokens on one 24 GiB GPU: the worst case is
    over the card only by activations and logits, so the plan warns and launches; it is not refused."""
    args = ["plan", "--json", "--model-params", "2.2e9", "--assume-gpus", "1x24GiB", "--assume-ram", "64GiB"]
    swift = ["--model", "m", "--per_device_train_batch_size", "16", "--max_length", "4096"]
    result = run_cli(*args, *swift, "--padding_free", "true", "--attn_impl", "flash_attn")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    chosen = plan["estimates"][plan["strategy"]]
    assert plan["fits"] and not chosen["fits"] and chosen["fixed_fits"]
    assert chosen["gpu_fixed_bytes"] < chosen["gpu_free_bytes"] < chosen["gpu_need_bytes"]
    assert any("do not depend on the data and fit" in w and "Levers" in w for w in plan["warnings"])


def test_assumed_machine_takes_no_network_fact_of_this_one() -> None:
    args = ["plan", "--json", "--model-params", "7e9", "--assume-gpus", "8x80GiB", "--assume-ram", "1TiB"]
    args += ["--assume-nodes", "2"]
    env = {**os.environ, "NCCL_SOCKET_IFNAME": "eth7"}
    result = subprocess.run(
        [sys.executable, "-m", "launcher", *args, "--model", "m"], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert "NCCL_IB_DISABLE" not in plan["env"] and "NCCL_SOCKET_IFNAME" not in plan["env"]
    notes = "\n".join(plan["notes"])
    assert "InfiniBand on the assumed machine: unknown" in notes
    assert "network interfaces of the assumed machine: unknown" in notes
    assert "this shell's NCCL variables (NCCL_SOCKET_IFNAME) describe this machine, so the plan" in notes


def test_assumed_machine_plan_says_its_memlock_is_this_machines() -> None:
    args = ["plan", "--model-params", "7e9", "--assume-gpus", "8x80GiB", "--assume-ram", "1TiB", "--model", "m"]
    text = run_cli(*args).stdout
    assert "memlock (of this machine; the assumed machine's is unknown):" in text
    assert json.loads(run_cli(*args[:1], "--json", *args[1:]).stdout)["assumed_machine"] is True


def test_plan_explain_memory_names_the_measured_layer_it_counts(tmp_path: Path) -> None:
    """A Gemma-2 config is counted as Gemma-2's measured layer; a model_type never measured says so."""
    config = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "intermediate_size": 14336,
              "vocab_size": 256000, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256}  # fmt: skip
    args = ["--assume-gpus", "1x80GiB", "--assume-ram", "256GiB", "--explain-memory"]
    for model_type, architecture, line in (
        ("gemma2", "Gemma2ForCausalLM", "activations: a gemma2 decoder layer, as measured on transformers' code"),
        (
            "brand_new",
            "BrandNewForCausalLM",
            "activations: model_type brand_new is not measured, counted as a llama decoder layer",
        ),
    ):
        model = tmp_path / model_type
        model.mkdir()
        named = {"model_type": model_type, "architectures": [architecture]}  # swift's type from its architecture
        (model / "config.json").write_text(json.dumps({**config, **named}))
        done = run_cli("plan", *args, "--model", str(model), "--max_length", "8192")
        assert done.returncode == 0, done.stderr
        assert f"\n  {line}\n" in done.stdout
    # swift's default LoRA: the base frozen, adapters on every projection; eager attention where asked
    lora = "LoRA: its weights frozen; adapters on 7 projections of each layer (rank 8, with dropout)"
    assert lora in done.stdout and "eager attention" not in done.stdout
    eager = run_cli("plan", *args, "--model", str(tmp_path / "gemma2"), "--attn_impl", "eager", "--lora_dropout", "0")
    assert "eager attention: 8 bytes per head x length^2 kept by each layer" in eager.stdout
    assert "(rank 8, without dropout)" in eager.stdout
    # gemma2 defaults to sdpa: eager only as asked, so no reason is given
    assert "runs eager" not in eager.stdout and "loader gives" not in eager.stdout
    # unset --attn_impl: a model swift's loader gives eager attention says why
    gemma3 = tmp_path / "gemma3"
    gemma3.mkdir()
    gemma3_named = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]}
    (gemma3 / "config.json").write_text(json.dumps({**config, **gemma3_named}))
    default = run_cli("plan", *args, "--model", str(gemma3), "--max_length", "8192")
    assert "ms-swift's loader gives gemma3_text eager attention when --attn_impl is unset" in default.stdout


def test_a_bad_image_budget_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """swift would stop on MAX_PIXELS=1003520.0 only as the model loads (int()); safe-sft says so first."""
    vision = {"hidden_size": 1280, "intermediate_size": 3420, "depth": 32, "patch_size": 14}
    config = {"model_type": "qwen2_5_vl", "hidden_size": 3584, "num_hidden_layers": 28, "vocab_size": 152064,
              "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
              "vision_config": vision, "architectures": ["Qwen2_5_VLForConditionalGeneration"]}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = [
        "plan",
        "--assume-gpus",
        "2x80GiB",
        "--assume-ram",
        "256GiB",
        "--model",
        str(tmp_path),
        "--template",
        "qwen2_5_vl",
    ]
    assert run_cli(*args).returncode == 0
    bad = subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, "MAX_PIXELS": "1003520.0"},
    )  # fmt: skip
    assert bad.returncode == 2, bad.stderr
    first, fix = bad.stderr.splitlines()[:2]
    assert first.startswith("safe-sft: error: MAX_PIXELS='1003520.0' is not a positive whole number of pixels")
    assert fix.startswith("safe-sft: fix: set MAX_PIXELS to a whole number") and "Traceback" not in bad.stderr


def test_explain_memory_counts_the_configs_attention_dropout_under_eager(tmp_path: Path) -> None:
    config = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 5632,
              "vocab_size": 32000, "num_attention_heads": 16, "num_key_value_heads": 4}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps({**config, "attention_dropout": 0.1}))
    args = ["plan", "--explain-memory", "--assume-gpus", "1x80GiB", "--assume-ram", "256GiB", "--model", str(tmp_path)]
    done = run_cli(*args, "--attn_impl", "eager", "--model_type", "llama", "--template", "llama")
    assert done.returncode == 0, done.stderr
    line = "eager attention: 7 bytes per head x length^2 kept by each layer (attention_scores)"
    assert f"{line}, with the config's attention dropout\n" in done.stdout


def test_doctor_fails_what_the_run_would_refuse_and_says_why() -> None:
    env = {**os.environ, "NNODES": "x"}
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "doctor", "--model", "m", "--use_cpu", "true", "--torch_dtype", "int4"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "[fail] topology    NNODES='x' is not an integer" in result.stdout
    assert "[fail] swift_args  --torch_dtype 'int4' is not one of swift's choices: " in result.stdout


def test_doctor_fails_an_option_swift_sft_does_not_have_as_the_run_refuses_it() -> None:
    """ms-swift 3's --train_type (the README's own example) had passed doctor, which the run refuses."""
    result = run_cli("doctor", "--model", "m", "--use_cpu", "true", "--train_type", "lora")
    assert result.returncode == 1, result.stderr
    assert "[fail] swift_args  --train_type is no option of swift sft" in result.stdout
    assert "write --tuner_type" in result.stdout


def test_swifts_sft_word_is_taken_as_swift_takes_it_and_its_other_commands_are_refused() -> None:
    """Swapping `swift` for safe-sft in `swift sft ARGS` keeps `sft`: the plan is the one for `safe-sft ARGS`."""
    common = ["--json", "--model-params", "7e9", "--assume-gpus", "2x80GiB", "--assume-ram", "256GiB"]
    swift = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--dataset", "d.jsonl", "--tuner_type", "lora"]
    plans = [run_cli("plan", *common, *words, *swift) for words in ([], ["sft"], ["swift", "sft"])]
    assert [p.returncode for p in plans] == [0, 0, 0], [p.stderr for p in plans]
    commands = [json.loads(p.stdout)["command"] for p in plans]
    swift_parts = [c[next(i for i, a in enumerate(c) if a.endswith("worker.py")) :] for c in commands]
    assert swift_parts[1] == swift_parts[2] == swift_parts[0] and "sft" not in swift_parts[0]
    refused = run_cli("plan", *common, "rlhf", *swift)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[0] == "safe-sft: error: safe-sft runs `swift sft`, not `swift rlhf`"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        pytest.param(
            ["--hang-timeout", "inf"], {}, "Invalid value for '--hang-timeout': inf is not in the range", id="inf"
        ),
        pytest.param(
            ["--startup-timeout", "nan"], {}, "Invalid value for '--startup-timeout': 'nan' is not a number", id="nan"
        ),
        pytest.param(
            ["--hang-timeout", "1e99"], {}, "Invalid value for '--hang-timeout': 1e+99 is not in the range", id="1e99"
        ),
        pytest.param(
            [],
            {"SAFE_SFT_HANG_TIMEOUT": "inf"},
            "SAFE_SFT_HANG_TIMEOUT in the environment: Invalid value for '--hang-timeout'",
            id="env-inf",
        ),
        pytest.param(
            [],
            {"SAFE_SFT_NODE_RANK": "abc"},
            "SAFE_SFT_NODE_RANK in the environment: Invalid value for '--node-rank': 'abc' is not a valid integer",
            id="env-not-a-number",
        ),
    ],
)
def test_a_bad_value_of_safe_sfts_own_option_is_one_line_naming_its_source(
    args: list[str], env: dict[str, str], message: str
) -> None:
    """A timeout of inf overflowed the --ddp_timeout the watchdog adds (a traceback, on the run path too);
    nan passed every bound; click's own usage block did not say the value came from the environment."""
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", *args, "--model-params", "7e9", "--assume-gpus", "1x80GiB",
         "--assume-ram", "64GiB", "--model", "m", "--tuner_type", "lora"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )  # fmt: skip
    assert result.returncode == 2
    first, fix = result.stderr.splitlines()
    assert first.startswith(f"safe-sft: error: {message}"), result.stderr
    assert fix.startswith("safe-sft: fix: ") and "Traceback" not in result.stderr


def test_an_assumed_machine_without_assume_ram_has_unknown_host_ram_not_this_ones() -> None:
    """--assume-gpus alone planned with this machine's RAM (22 GiB here): zero2 was refused for 337 GiB of host
    RAM a cluster node has, and the plan said nothing of where the figure came from."""
    args = ["plan", "--json", "--model-params", "7e9", "--assume-gpus", "8x80GiB"]
    swift = ["--model", "m", "--tuner_type", "full"]
    plan = json.loads(run_cli(*args, *swift).stdout)
    assert plan["strategy"] == "zero2"
    assert "the assumed machine's host RAM is unknown: not checked (pass --assume-ram)" in plan["warnings"]
    with_ram = json.loads(run_cli(*args, "--assume-ram", "64GiB", *swift).stdout)
    assert with_ram["strategy"] != "zero2"  # 64 GiB is too little for zero2's host side here
    assert not any("host RAM is unknown" in w for w in with_ram["warnings"])


@pytest.mark.parametrize(
    ("args", "fail"),
    [
        pytest.param(["--model", "/no/such/model"], "--model '/no/such/model' is no directory here", id="model"),
        pytest.param(["--model", "m", "--dataset", "typo.jsonl"], "--dataset 'typo.jsonl' is no file in", id="dataset"),
        pytest.param(["--model", "m", "--dataset", "org/set#abc"], "'abc' after its last # is not a whole", id="count"),
        pytest.param(["--model", "m", "--deepspeed", '{"zero_optimization": {"stage": 7}}'], '"stage": 7', id="zero"),
    ],
)
def test_doctor_fails_what_the_run_refuses_of_what_the_arguments_name(
    tmp_path: Path, args: list[str], fail: str
) -> None:
    """doctor passed these, and the run stopped on each before anything started."""
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "doctor", *args, "--use_cpu", "true", "--output_dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("[fail] swift_args  ")]
    assert fail in line


def test_an_error_naming_a_path_with_a_line_break_stays_one_line(tmp_path: Path) -> None:
    result = run_cli("report", str(tmp_path / "new\nline"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"safe-sft: error: {tmp_path}/new\\nline does not exist",
        "safe-sft: fix: give a run dir, or the output dir of a safe-sft run",
    ]


@pytest.mark.parametrize(
    "given",
    [["--output_dir=~/out", "--resume_from_checkpoint", "~/out/checkpoint-4"], ["--output_dir", "~/out"]],
    ids=["both", "output-dir"],
)
def test_a_tilde_no_shell_expanded_is_where_the_trainer_writes(  # type: ignore[no-untyped-def]
    fake_host, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: list[str]
) -> None:
    """swift and transformers expand `~` in the output dir themselves: safe-sft put its lock and report under
    ./~/out and guarded the wrong dir, so a rerun with --add_version false wrote over checkpoint-2."""
    from launcher.prepare import LaunchOptions, prepare

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    prepared = prepare(["--model", "m", "--use_cpu", "true", *given], LaunchOptions(), {}, host=fake_host())
    assert prepared.output_dir == tmp_path / "out"
    assert prepared.swift.get("output_dir") == str(tmp_path / "out")
    if "--resume_from_checkpoint" in given:
        assert prepared.swift.get("resume_from_checkpoint") == str(tmp_path / "out" / "checkpoint-4")
    assert "~" not in " ".join(prepared.plan.swift_argv)


def test_a_dotdot_past_a_symlink_is_read_as_swift_reads_it(  # type: ignore[no-untyped-def]
    fake_host, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`lnk/../out` is ./out to swift (os.path.abspath on the text) and, lnk being a symlink, another dir to
    the file system: safe-sft locked, guarded and searched that one while swift saved over the checkpoints in
    ./out (hostile45disk F1). swift now gets the value it makes itself, and safe-sft looks there too."""
    from launcher.prepare import LaunchOptions, prepare

    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "lnk").symlink_to(tmp_path / "real" / "sub")
    monkeypatch.chdir(tmp_path / "cwd")
    given = ["--output_dir", "lnk/../out", "--resume_from_checkpoint", "lnk/../out/checkpoint-4"]
    prepared = prepare(["--model", "m", "--use_cpu", "true", *given], LaunchOptions(), {}, host=fake_host())
    assert prepared.output_dir.resolve() == tmp_path / "cwd" / "out"  # not real/out
    assert prepared.swift.get("output_dir") == str(tmp_path / "cwd" / "out")
    assert prepared.swift.get("resume_from_checkpoint") == str(tmp_path / "cwd" / "out" / "checkpoint-4")


def test_resume_latest_refuses_another_experiments_checkpoint_before_anything_starts(tmp_path: Path) -> None:
    """Experiment A (learning rate 1e-5) saved checkpoint-6 in the shared output dir; experiment B (1e-3),
    interrupted before its first checkpoint, is rerun with --resume-latest: it had gone on from A's."""
    from tests.unit.test_checkpoints import make

    out = tmp_path / "out"
    checkpoint = make(out / "v0-a" / "checkpoint-6")
    (out / "v0-a" / "args.json").write_text(json.dumps({"model": "m", "learning_rate": 1e-05, "seed": 42}))
    argv = ["--resume-latest", "--model", "m", "--use_cpu", "true", "--output_dir", str(out)]
    result = run_cli(*argv, "--learning_rate", "1e-3")
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        f"safe-sft: error: --resume-latest would go on from {checkpoint}, another experiment's: its run had "
        "learning_rate 1e-05, this one 1e-3"
    ) in result.stderr
    assert not list(out.glob("safe-sft/*/attempt-*"))


@pytest.mark.parametrize("args_json", [None, b"{not json", b"[1, 2]", b'{"seed": 42}'])
def test_resume_latest_warns_where_the_checkpoints_experiment_cannot_be_read(
    tmp_path: Path, args_json: bytes | None
) -> None:
    """The same-experiment guard is the only thing between --resume-latest and an unrelated run's checkpoint;
    it had been skipped without a word where args.json was missing or unreadable (hostile42res F3)."""
    from launcher.run.lock import acquire
    from tests.unit.test_checkpoints import make

    out = tmp_path / "out"
    checkpoint = make(out / "v0-a" / "checkpoint-6")
    if args_json is not None:
        (out / "v0-a" / "args.json").write_bytes(args_json)
    held = acquire(out, None)  # the run stops at the lock, after the warning, before any training
    try:
        result = run_cli("--resume-latest", "--model", "m", "--use_cpu", "true", "--output_dir", str(out))
    finally:
        held.release()
    assert f"safe-sft: warning: --resume-latest goes on from {checkpoint} unchecked: no readable args.json" in (
        result.stderr
    )
    assert result.returncode == 2 and "another safe-sft run is using the output dir" in result.stderr
    (out / "v0-a" / "args.json").write_text(json.dumps({"model": "m"}))
    held = acquire(out, None)
    try:
        readable = run_cli("--resume-latest", "--model", "m", "--use_cpu", "true", "--output_dir", str(out))
    finally:
        held.release()
    assert "unchecked" not in readable.stderr


def test_resume_latest_after_the_run_finished_says_so_and_trains_nothing(tmp_path: Path) -> None:
    """A requeue after the end: swift had trained a step 7/6 and saved a new final model (hostile42res F2).
    A longer run (--max_steps raised) still goes on."""
    from tests.unit.test_checkpoints import make

    out = tmp_path / "out"
    checkpoint = make(out / "v0-a" / "checkpoint-6")
    state = {"global_step": 6, "max_steps": 6, "train_batch_size": 2}
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    (out / "v0-a" / "args.json").write_text(json.dumps({"model": "m", "max_steps": 6, "num_train_epochs": 3}))
    argv = ["--resume-latest", "--model", "m", "--use_cpu", "true", "--output_dir", str(out), "--max_steps"]
    result = run_cli(*argv, "6")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"safe-sft: the run already finished: {checkpoint} is its last step (6 of 6)" in result.stderr
    assert not list(out.glob("safe-sft/*/attempt-*"))
    from launcher.plan.swift_args import parse_swift_argv
    from launcher.run.checkpoints import saved_args
    from launcher.run.resume import already_finished

    finished = saved_args(checkpoint)
    assert already_finished(checkpoint, finished, parse_swift_argv(["--model", "m", "--max_steps", "10"])) is None
    # no args.json (an HF script's run writes none): the trainer's own state ends at the --max_steps given
    # again, and resuming there would train past it (hostile44tr F7); another max_steps, or none given, goes on
    (out / "v0-a" / "args.json").write_text("[]")
    unreadable = saved_args(checkpoint)
    assert already_finished(checkpoint, unreadable, parse_swift_argv(["--model", "m", "--max_steps", "6"]))
    assert already_finished(checkpoint, unreadable, parse_swift_argv(["--model", "m", "--max_steps", "9"])) is None
    assert already_finished(checkpoint, unreadable, parse_swift_argv(["--model", "m"])) is None


def test_a_run_dir_given_for_a_checkpoint_is_told_its_newest_one(tmp_path: Path) -> None:
    """`--resume_from_checkpoint out/v0-a` had said only that trainer_state.json is missing (hostile42res F8);
    given with --resume-latest, the latter is said to be left aside (F4)."""
    from tests.unit.test_checkpoints import make

    run = tmp_path / "out" / "v0-a"
    make(run / "checkpoint-3")
    newest = make(run / "checkpoint-6")
    argv = ["--model", "m", "--use_cpu", "true", "--output_dir", str(tmp_path / "out")]
    result = run_cli(*argv, "--resume_from_checkpoint", str(run))
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"safe-sft: fix: name its newest complete checkpoint, {newest}" in result.stderr
    from launcher.run.lock import acquire

    held = acquire(tmp_path / "out", None)  # the run stops at the lock, after the note, before any training
    try:
        both = run_cli("--resume-latest", *argv, "--resume_from_checkpoint", str(newest))
    finally:
        held.release()
    note = f"safe-sft: note: --resume-latest is left aside: --resume_from_checkpoint names the checkpoint ({newest})"
    assert note in both.stderr
    assert both.returncode == 2 and "another safe-sft run is using the output dir" in both.stderr


def test_a_zero_checkpoint_of_another_rank_count_is_refused_with_its_fix(tmp_path: Path) -> None:
    """The user's own checkpoint, saved by 2 ranks under ZeRO-2, on 1 process: every rank stopped after the
    model loaded (`used a DP world size of 2 but the current world size is 1`), named `unknown`."""
    from tests.unit.test_checkpoints import make, torch_zip_bytes

    checkpoint = make(tmp_path / "out" / "v0-a" / "checkpoint-6", optimizer=False)
    (checkpoint / "latest").write_text("global_step6")
    (checkpoint / "global_step6").mkdir()
    for rank in (0, 1):
        name = f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
        (checkpoint / "global_step6" / name).write_bytes(torch_zip_bytes(checkpoint))
    argv = ["--model", "m", "--use_cpu", "true", "--deepspeed", "zero2", "--output_dir", str(tmp_path / "out")]
    result = run_cli(*argv, "--resume_from_checkpoint", str(checkpoint))
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        f"safe-sft: error: --resume_from_checkpoint {checkpoint} holds the ZeRO optimizer states of 2 ranks, "
        "and this run has 1"
    ) in result.stderr
    assert "safe-sft: fix: add --resume_only_model true to resume its weights only" in result.stderr


def test_a_working_directory_since_removed_is_one_line(tmp_path: Path) -> None:
    """The shell stood in a folder that was then removed (an old run dir): swift cannot start there either."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"import os, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r})\n"
    script += "sys.argv = ['safe-sft', 'plan', '--model', 'm']\nfrom launcher.cli import main; main()"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "safe-sft: error: the working directory no longer exists",
        "safe-sft: fix: cd to a directory that does, and run again",
    ]


def test_a_path_with_a_name_longer_than_the_file_system_takes_is_never_a_traceback(tmp_path: Path) -> None:
    """An auto-generated experiment name of 300 bytes: as --output_dir it is one line (swift stops on it after
    its start); as a --model hub id it is in no cache (the plan says its size is unknown)."""
    long = "x" * 300
    model = run_cli("plan", "--model", f"models/{long}", "--use_cpu", "true")
    assert model.returncode == 0 and "Traceback" not in model.stderr, model.stderr[-2000:]
    assert f"models/{long} is not a local directory nor in the ModelScope/Hugging Face cache" in model.stdout
    output = run_cli("plan", "--model", "m", "--use_cpu", "true", "--output_dir", str(tmp_path / long))
    assert output.returncode == 2 and "Traceback" not in output.stderr, output.stderr[-2000:]
    assert output.stderr.splitlines() == [
        f"safe-sft: error: {str(tmp_path / long)[:117]}...: a name in this path has 300 bytes, more than the file "
        "system allows",
        "safe-sft: fix: shorten it (most file systems take 255 bytes a name)",
    ]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("plan", "--json", "--model", "m", "--learning_rate", "abc"), id="plan-bad-value"),
        pytest.param(("plan", "--json", "--backend", "llamafactory", "nonexist.yaml"), id="plan-missing-config"),
        pytest.param(("explain", "--json", "/nonexistent/log"), id="explain-missing-log"),
    ],
)
def test_a_json_command_that_fails_prints_its_error_as_json_on_stdout(args: tuple[str, ...]) -> None:
    """A script doing json.loads(stdout) had got nothing on stdout (the error on stderr alone)."""
    result = run_cli(*args)
    assert result.returncode == 2
    found = json.loads(result.stdout)
    assert set(found) == {"error", "fix"} and found["error"] in result.stderr and found["fix"]
    assert run_cli(*(a for a in args if a != "--json")).stdout == ""  # without --json: stderr alone, as before


def test_a_safe_sft_option_after_another_trainers_arguments_names_that_trainer(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: m\n")
    result = run_cli("plan", "--backend", "llamafactory", str(config), "--json")
    assert result.returncode == 2
    assert f"comes after LLaMA-Factory's arguments ({config}), so LLaMA-Factory would get it" in result.stderr
    assert json.loads(result.stdout)["error"] in result.stderr  # --json last: its error is still JSON


@pytest.mark.parametrize("spelling", ["equals", "environment"])
def test_the_trainer_named_in_that_error_is_read_from_every_spelling_of_backend(
    tmp_path: Path, spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--backend=llamafactory` and SAFE_SFT_BACKEND had been read as swift: the error said swift would get it."""
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: m\n")
    own = ["--backend=llamafactory"] if spelling == "equals" else []
    if spelling == "environment":
        monkeypatch.setenv("SAFE_SFT_BACKEND", "llamafactory")
    result = run_cli("plan", *own, str(config), "--json")
    assert result.returncode == 2
    assert "so LLaMA-Factory would get it" in result.stderr


@pytest.mark.parametrize("args", [("sft", "--help"), ("--model", "m", "-h"), ("plan", "sft", "--model", "m", "--help")])
def test_help_among_swifts_arguments_shows_the_commands_help_and_starts_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """`safe-sft sft --help` had started torchrun with swift's --help and recorded a succeeded run."""
    result = subprocess.run(
        [sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: safe-sft ") and "Command-line-parameters.html" in result.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("llamafactory", "train", "--backend", "torchrun", "c.yaml"), "--backend torchrun contradicts"),
        (("torchrun", "--backend=llamafactory", "train.py"), "--backend llamafactory contradicts"),
    ],
)
def test_a_backend_option_against_the_command_word_is_refused(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """It had beaten the word: `llamafactory train --backend torchrun c.yaml` ran the YAML as a Python script."""
    result = subprocess.run(
        [sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 2 and message in result.stderr
    assert list(tmp_path.iterdir()) == []


def _as_unprivileged(argv: list[str]) -> list[str]:
    """The command as a user without root's permission bypass (CI runs as root, where chmod 000 holds
    nothing back): setpriv drops the capabilities that read past file modes."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *argv]


@pytest.mark.parametrize("command", ["plan", "doctor"])
@pytest.mark.parametrize("locked", ["model", "output_dir"])
def test_a_folder_this_user_may_not_enter_is_one_line_naming_it(tmp_path: Path, command: str, locked: str) -> None:
    """A colleague's 700 model folder, or an --output_dir below one, had ended in a PermissionError traceback."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2}')
    (tmp_path / "locked").mkdir()
    output_dir = tmp_path / "locked" / "out"
    (model if locked == "model" else tmp_path / "locked").chmod(0)
    try:
        argv = [sys.executable, "-m", "launcher", command, "--json", "--model", str(model)]
        argv += ["--output_dir", str(output_dir), "--use_cpu", "true"]
        result = subprocess.run(_as_unprivileged(argv), capture_output=True, text=True, timeout=60)
    finally:
        (model if locked == "model" else tmp_path / "locked").chmod(0o755)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    found = json.loads(result.stdout)
    assert "Permission denied for this user" in found["error"] and "permissions" in found["fix"]


@pytest.mark.parametrize(
    ("args", "fix"),
    [
        (("plan", "torchrun", "train.py"), "safe-sft: fix: run another trainer as `safe-sft torchrun [safe-sft's "
         "options] train.py ...`, safe-sft's options after `torchrun`, not before it; plan it with `safe-sft plan "
         "--backend torchrun train.py ...`"),
        (("plan", "llamafactory", "train", "c.yaml"), "`safe-sft plan --backend llamafactory c.yaml ...`"),
        # safe-sft's options before the trainer's command word (hostile47lf F5)
        (("--max-attempts", "3", "llamafactory", "train", "c.yaml"), "safe-sft: fix: run another trainer as "
         "`safe-sft llamafactory train [safe-sft's options] c.yaml ...`, safe-sft's options after `llamafactory "
         "train`, not before it"),
        (("swift", "--model", "m"), "safe-sft: fix: drop `swift`: safe-sft takes what `swift sft` takes"),
    ],
)  # fmt: skip
def test_a_trainers_command_word_among_swifts_arguments_names_the_way_to_write_it(
    args: tuple[str, ...], fix: str
) -> None:
    """They had been told only that the word is no swift argument."""
    result = run_cli(*args)
    assert result.returncode == 2 and fix in result.stderr


def test_a_safe_sft_variable_shows_as_one_in_the_plan_and_its_errors() -> None:
    """SAFE_SFT_NODE_RANK had been shown as a flag the user never typed."""
    env = {**os.environ, "SAFE_SFT_NNODES": "2", "SAFE_SFT_NODE_RANK": "5"}
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--master-addr", "10.0.0.1", "--model", "m", "--use_cpu", "true"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 2
    assert "safe-sft: error: NODE_RANK=5 (safe-sft env) is not below NNODES=2" in result.stderr


@pytest.mark.parametrize("case", ["dataset", "explain", "report"])
def test_a_folder_this_user_may_not_search_is_named_as_a_permission_problem(tmp_path: Path, case: str) -> None:
    """They had read as a dataset to fetch from the hub, a console.log that is not there, and no report."""
    locked = tmp_path / "locked"
    if case == "report":
        locked = tmp_path / "out" / "safe-sft"
    locked.mkdir(parents=True)
    (locked / "data.jsonl").write_text('{"messages": []}\n')
    argv = {
        "dataset": ["plan", "--model", "m", "--use_cpu", "true", "--dataset", str(locked / "data.jsonl")],
        "explain": ["explain", str(locked)],
        "report": ["report", str(tmp_path / "out")],
    }[case]
    locked.chmod(0)
    try:
        result = subprocess.run(
            _as_unprivileged([sys.executable, "-m", "launcher", *argv]), capture_output=True, text=True, timeout=60
        )
    finally:
        locked.chmod(0o755)
    assert result.returncode == 2, result.stderr
    error = result.stderr.splitlines()[0]
    assert "Permission denied" in error and str(locked) in error and "console.log" not in error, error


@pytest.mark.parametrize(
    ("first", "says"),
    [
        (("--nproc_per_node", "2"), "--nproc_per_node is torchrun's option, which safe-sft replaces"),
        (("--standalone",), "--standalone is torchrun's option, which safe-sft replaces"),
    ],
)
def test_a_torchrun_option_before_a_safe_sft_option_is_named_as_torchruns(first: tuple[str, ...], says: str) -> None:
    """It had been read as the script, and --nproc after it as a safe-sft option placed after the script's
    arguments: the fix that message gave led to the torchrun error anyway."""
    result = run_cli("torchrun", *first, "--nproc", "1", "train.py")
    assert result.returncode == 2 and f"safe-sft: error: {says}" in result.stderr


def test_a_module_without_the_double_dash_is_still_planned(tmp_path: Path) -> None:
    """The check for a torchrun option placed first had read `-m pkg.train` as a module option alone."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--backend", "torchrun", "-m", "pkg.train", "--output_dir", "o"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert "-m without a module name" not in result.stderr
    assert "hf_worker.py -m pkg.train --output_dir o" in result.stdout, result.stderr[-2000:]


def test_no_arguments_at_all_fail_as_swift_sft_alone_does(tmp_path: Path) -> None:
    """`safe-sft` alone printed its help and exited 0, so a script's `safe-sft $ARGS` with ARGS unset passed;
    `swift sft` alone fails, and so does `safe-sft sft`. `--help` still shows it and exits 0."""
    alone = subprocess.run([sys.executable, "-m", "launcher"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert alone.returncode == 2 and alone.stdout == ""
    assert "safe-sft: error: no arguments given" in alone.stderr and "safe-sft [OPTIONS] SWIFT_ARGS" in alone.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "launcher", "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert helped.returncode == 0 and "safe-sft [OPTIONS] SWIFT_ARGS" in helped.stdout


def test_resume_latest_names_no_missing_args_json_for_a_trainer_that_writes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """args.json is swift's: every --resume-latest of an HF script had warned that none named the model it
    trained (hostile44tr M5). swift's own run without one is still warned of."""
    from dataclasses import replace

    from launcher.backends.hf_trainer import HF_TRAINER
    from launcher.cli import check_newest_checkpoint
    from tests.unit.test_checkpoints import make
    from tests.unit.test_supervisor import prepared

    make(tmp_path / "checkpoint-3")
    swift_run = prepared(tmp_path)
    assert check_newest_checkpoint(replace(swift_run, backend=HF_TRAINER)) is None
    assert "unchecked" not in capsys.readouterr().err
    assert check_newest_checkpoint(swift_run) is None
    assert "unchecked: no readable args.json" in capsys.readouterr().err


def test_plan_warns_of_a_master_port_in_use_as_the_run_refuses_it() -> None:
    """The run refused a MASTER_PORT something listens on (exit 2); `safe-sft plan` had said nothing and exited 0
    (hostile47env F8). A plan for other hardware (--assume-*) does not look at this host's ports."""
    import socket

    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {**os.environ, "MASTER_PORT": str(port)}
        argv = [sys.executable, "-m", "launcher", "plan", "--model", "m", "--dataset", "org/set", "--use_cpu", "true"]
        here = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        assert here.returncode == 0, here.stderr
        assert f"warning: MASTER_PORT={port} (from env) is already in use on this host (the run refuses to start)" in (
            here.stderr
        )
        assumed = [*argv[:4], "--assume-gpus", "8x80GiB", *argv[4:]]
        elsewhere = subprocess.run(assumed, capture_output=True, text=True, timeout=60, env=env)
        assert elsewhere.returncode == 0 and "already in use" not in elsewhere.stderr, elsewhere.stderr
