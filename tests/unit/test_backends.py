"""The backend interface (launcher/backends): reading each trainer's arguments, its defaults, the knobs
it lacks, and how an attempt's arguments are written back for it. Pure, no processes."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.backends import BACKENDS, Backend
from launcher.backends.hf_trainer import HF_TRAINER
from launcher.backends.llamafactory import LLAMAFACTORY
from launcher.backends.swift import SWIFT
from launcher.configs import load_templates
from launcher.errors import SafeSftError
from launcher.model import FailureKind, Plan, Source, Sourced, Topology
from launcher.plan.degrade import Settings, Step, next_step
from launcher.plan.settings import Resume, attempt_args, initial_settings
from launcher.plan.swift_args import unknown_flag_warning
from launcher.prepare import check_trainer_installed

TEMPLATES = load_templates()


def test_each_backend_has_its_worker_file_and_a_distinct_name() -> None:
    assert set(BACKENDS) == {"swift", "torchrun", "llamafactory"}
    for backend in BACKENDS.values():
        assert backend.worker.is_file(), backend.worker
    assert SWIFT.missing == frozenset()  # swift: every knob, today's behaviour


def test_hf_reads_the_script_then_its_training_arguments(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    read = HF_TRAINER.read([str(script), "--output_dir", "o", "--gradient_checkpointing", "--use_cpu=true"])
    assert read.worker_args == (str(script.resolve()),)
    args = read.args
    assert args.argv() == ("--output_dir", "o", "--gradient_checkpointing", "--use_cpu", "true")
    assert args.get_bool("gradient_checkpointing", False) is True  # a bare flag is true, as HfArgumentParser reads it
    assert args.get_bool("use_cpu", False) is True


def test_hf_reads_a_prefix_of_a_training_argument_as_the_scripts_parser_does(tmp_path: Path) -> None:
    """argparse takes `--output_d` for --output_dir: safe-sft had guarded and reported in trainer_output while
    the script wrote its checkpoints elsewhere. A prefix of two options, or of none of TrainingArguments' (the
    script's own `--model_name_or_path`), stays itself."""
    script = tmp_path / "train.py"
    script.write_text("")
    argv = [str(script), "--output_d", "/out", "--per_device_train_b", "2", "--model_name_or_path", "m",
            "--gradient_accum=4", "--max", "9"]  # fmt: skip
    args = HF_TRAINER.read(argv).args
    assert (args.get("output_dir"), args.get_int("per_device_train_batch_size")) == ("/out", 2)
    assert args.get_int("gradient_accumulation_steps") == 4
    assert args.get("model_name_or_path") == "m" and args.get("max") == "9"  # max_steps or max_grad_norm: ambiguous
    new = args.with_values({"per_device_train_batch_size": "1"}).argv()
    assert new.count("1") == 1 and "--per_device_train_b" in new and "2" not in new  # replaced in place


def test_hf_defaults_are_transformers_and_never_written(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    args = HF_TRAINER.read([str(script)]).args
    assert args.get_int("per_device_train_batch_size") == 8  # TrainingArguments' default, not swift's 1
    assert args.get_int("gradient_accumulation_steps") == 1
    assert args.get_bool("gradient_checkpointing", True) is False
    assert args.get("output_dir") == "trainer_output"
    assert not args.has("output_dir")  # a default is not the user's
    assert args.get("tuner_type") == "full"  # what a script trains is unknown: every parameter, the upper bound
    assert args.argv() == ()
    assert args.with_values({"save_only_model": "true"}).argv() == ("--save_only_model", "true")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param([], "no training script given", id="nothing"),
        pytest.param(["--output_dir", "o"], "--output_dir where the training script should come first", id="flag"),
        pytest.param(["missing.py"], "training script missing.py does not exist", id="missing"),
        pytest.param(["."], "training script . is a directory without a __main__.py, not a script", id="a-dir"),
        pytest.param(["SCRIPT", "args.json"], "argument file is not read by safe-sft yet", id="json-args"),
        # the refusal had been case-sensitive: cfg.YAML was planned and run with transformers' defaults
        pytest.param(["SCRIPT", "cfg.YAML"], "argument file is not read by safe-sft yet", id="yaml-upper"),
        pytest.param(
            ["-m", "json", "cfg.yml"], "-m json cfg.yml: a script's JSON/YAML argument file", id="module-yaml"
        ),
        pytest.param(["--nproc-per-node", "8", "SCRIPT"], "--nproc-per-node is torchrun's option", id="nproc-per-node"),
        pytest.param(["--nproc_per_node=8", "SCRIPT"], "--nproc_per_node=8 is torchrun's option", id="underscores"),
        pytest.param(["--standalone", "SCRIPT"], "--standalone is torchrun's option", id="standalone"),
        pytest.param(["--rdzv-backend", "c10d", "SCRIPT"], "--rdzv-backend is torchrun's option", id="rdzv"),
        pytest.param(["--max-restarts", "1", "SCRIPT"], "--max-restarts is torchrun's option", id="max-restarts"),
        # a training argument placed first is no torchrun option, whatever word it starts with
        pytest.param(["--max_steps", "5", "SCRIPT"], "--max_steps where the training script", id="max_steps-first"),
        pytest.param(["-m"], "-m without a module name", id="module-without-name"),
        pytest.param(["-m", "no_such_pkg_here.train"], "module no_such_pkg_here.train: no package", id="no-module"),
    ],
)
def test_hf_bad_input_is_one_clear_error(tmp_path: Path, argv: list[str], says: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    with pytest.raises(SafeSftError) as err:
        HF_TRAINER.read([str(script) if a == "SCRIPT" else a for a in argv])
    assert says in err.value.message
    assert err.value.hint


def test_hf_runs_a_folder_with_a_main_as_python_does(tmp_path: Path) -> None:
    """torchrun hands the path to python, which runs a folder by its __main__.py: it had been refused."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("")
    assert HF_TRAINER.read([str(tmp_path / "app"), "--output_dir", "o"]).worker_args == (str(tmp_path / "app"),)


def test_hf_runs_a_module_as_torchrun_m_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`torchrun -m pkg.train ARGS`: safe-sft had refused `-m` as a script name that starts with a dash."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)  # found as `python -m` finds it: from the working directory
    for flag in ("-m", "--module"):
        read = HF_TRAINER.read([flag, "pkg.train", "--output_dir", "o", "--per_device_train_batch_size", "2"])
        assert read.worker_args == ("-m", "pkg.train")
        assert read.args.get("output_dir") == "o" and read.args.get_int("per_device_train_batch_size") == 2


def _plan(nproc: int = 2) -> Plan:
    topology = Topology(
        nproc_per_node=Sourced(nproc, Source.ENV),
        nnodes=Sourced(1, Source.DEFAULT),
        node_rank=Sourced(0, Source.DEFAULT),
        master_addr=Sourced("127.0.0.1", Source.DEFAULT),
        master_port=Sourced(29500, Source.DEFAULT),
        visible_devices=None,
        gpus=(),
    )
    return Plan(topology, None, "", None, (), (), (), ())


def test_hf_initial_settings_take_the_trainers_defaults_and_leave_missing_knobs_alone(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    args = HF_TRAINER.read([str(script), "--max_length", "4096", "--model_type", "qwen2_vl"]).args
    s = initial_settings(args, _plan(), None, {}, True, None, HF_TRAINER.missing)
    assert (s.micro_batch, s.grad_accum, s.gradient_checkpointing, s.dataloader_num_workers) == (8, 1, False, 0)
    # the script's own --max_length and a VL model type: knobs this trainer lacks, so nothing turns them
    assert (s.max_length, s.allow_shorter_max_length, s.vision_env) == (None, False, None)
    swift = initial_settings(args, _plan(), None, {}, True, None, SWIFT.missing)
    assert (swift.max_length, swift.vision_env) == (4096, "MAX_PIXELS")


def test_hf_weights_only_resume_passes_the_checkpoint_alone_and_a_fresh_dir_is_output_dir(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    base = HF_TRAINER.read([str(script), "--output_dir", "/out", "--save_steps", "3"]).args
    start = Settings(micro_batch=2, grad_accum=2, world_size=2, gradient_checkpointing=False)
    after = replace(start, save_only_model=True)
    resume = Resume("/out/checkpoint-3", 3, True, "the checkpoint holds no optimizer state (save_only_model)")

    def write(backend, fresh: bool) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
        return attempt_args(
            base, start, after, resume, user_deepspeed=None, templates=TEMPLATES, config_dir="/cfg",
            output_dir="/out", fresh_version_dir=fresh, missing=backend.missing, fresh_output_dir="/out/v2-run",
        ).swift.argv()  # fmt: skip

    assert write(HF_TRAINER, True) == (
        "--output_dir", "/out/v2-run", "--save_steps", "3",
        "--save_only_model", "true", "--resume_from_checkpoint", "/out/checkpoint-3",
    )  # fmt: skip
    assert write(HF_TRAINER, False)[:2] == ("--output_dir", "/out")
    swift = write(SWIFT, True)  # swift's flags: resume_only_model, and add_version only where the user turned it off
    assert swift[-2:] == ("--resume_only_model", "true") and "/out/v2-run" not in swift


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=60)


HEAVY = ("torch", "deepspeed", "swift", "transformers", "llamafactory", "omegaconf")


def plan_importing_nothing_heavy(argv: list[str]) -> dict:  # type: ignore[type-arg]
    """`safe-sft ARGV` in a fresh interpreter: its JSON plan, having imported nothing of HEAVY. How fast it
    starts is scripts/bench_plan_startup.py's to measure, not a unit test's."""
    code = (
        f"import sys\nfrom launcher.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit: pass\n"
        f"print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in result.stdout, result.stdout[-500:] + result.stderr[-500:]
    return json.loads(result.stdout[: result.stdout.index("HEAVY")])  # type: ignore[no-any-return]


def test_plan_for_an_hf_script_names_the_backend_and_imports_nothing_heavy(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('never run by plan')\n")
    argv = ["plan", "--json", "--backend", "torchrun", "--assume-gpus", "2x80GiB", "--model-params", "7e9",
            str(script), "--output_dir", str(tmp_path / "out"), "--per_device_train_batch_size", "4"]  # fmt: skip
    plan = plan_importing_nothing_heavy(argv)
    assert plan["backend"] == "torchrun"
    worker = plan["command"].index(str(Path("launcher/hf_worker.py").resolve()))
    assert plan["command"][worker + 1 : worker + 3] == [str(script.resolve()), "--output_dir"]
    assert plan["topology"]["nproc_per_node"]["value"] == 2  # one process per GPU: no device_map for a script
    assert "device_map" not in plan["estimates"]
    assert any("the ladder skips" in note for note in plan["notes"])
    assert any("planned as a full fine-tune" in note for note in plan["notes"])
    assert any("ddp_timeout 7200 set in the TrainingArguments the script builds" in note for note in plan["notes"])
    assert any("(the trainer's default is 1800 s" in note for note in plan["notes"])


def test_torchrun_with_a_missing_script_is_one_line_exit_2() -> None:
    result = _run_cli("torchrun", "--", "no_such_train.py", "--output_dir", "o")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == "safe-sft: error: training script no_such_train.py does not exist"
    assert result.stderr.splitlines()[1].startswith("safe-sft: fix:")
    assert "Traceback" not in result.stderr


def test_torchrun_with_a_device_as_its_script_says_so() -> None:
    result = _run_cli("torchrun", "--", "/dev/zero", "--output_dir", "o")
    assert result.stderr.splitlines()[0] == "safe-sft: error: training script /dev/zero is not a regular file"


def test_a_scripts_own_arguments_are_not_called_unknown_to_swift(tmp_path: Path) -> None:
    """An HF-Trainer script parses its own dataclasses' fields (ModelArguments' --model_name_or_path) beside
    TrainingArguments': safe-sft cannot know them, and swift is not involved."""
    script = tmp_path / "train.py"
    script.write_text("")
    own = ["--model_name_or_path", "m", "--output_dir", str(tmp_path / "o"), "--use_cpu", "true"]
    result = _run_cli("plan", "--json", "--backend", "torchrun", str(script), *own)
    assert result.returncode == 0, result.stderr
    assert not [w for w in json.loads(result.stdout)["warnings"] if "model_name_or_path" in w]


def test_a_script_keeps_its_own_accumulation_for_the_processes_asked_for(tmp_path: Path) -> None:
    """`swift sft` alone picks one process on the CPU, so safe-sft's --nproc 2 would halve swift's
    accumulation to keep swift's global batch; `torchrun --nproc_per_node 2 SCRIPT` runs two, as asked."""
    script = tmp_path / "train.py"
    script.write_text("")
    train = ["--output_dir", str(tmp_path / "o"), "--use_cpu", "true", "--per_device_train_batch_size", "2",
             "--gradient_accumulation_steps", "2"]  # fmt: skip
    hf = _run_cli("plan", "--json", "--nproc", "2", "--backend", "torchrun", str(script), *train)
    assert hf.returncode == 0, hf.stderr
    batch = json.loads(hf.stdout)["batch"]
    assert (batch["gradient_accumulation_steps"], batch["global_batch"]) == (2, 8)
    swift = _run_cli("plan", "--json", "--nproc", "2", "--model", "m", *train)
    assert json.loads(swift.stdout)["batch"]["gradient_accumulation_steps"] == 1  # swift's: as plain swift sft


def _hf_worker():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("safe_sft_hf_worker", HF_TRAINER.worker)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("output_dir", "expected_output_dir", "add_version"),
    [
        pytest.param("/out", "/out", False, id="the-users-dir"),
        pytest.param("/out/v2-20261123-084300-123456", "/out", True, id="a-fresh-dir-safe-sft-named"),
    ],
)
def test_the_hf_worker_reports_the_scripts_training_arguments_as_resolved_reads_them(
    output_dir: str, expected_output_dir: str, add_version: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from launcher.run import resolved

    monkeypatch.setenv("WORLD_SIZE", "2")
    args = SimpleNamespace(
        output_dir=output_dir, per_device_train_batch_size=2, per_device_eval_batch_size=8,
        gradient_accumulation_steps=4, save_strategy=SimpleNamespace(value="steps"), save_steps=3.0,
        save_only_model=True, eval_strategy="no", eval_steps=None, resume_from_checkpoint="/out/checkpoint-3",
        ddp_timeout=7200,
    )  # fmt: skip
    parsed = resolved.parse(json.loads(json.dumps(_hf_worker().resolved_args(args))))
    assert parsed is not None
    assert (str(parsed.output_dir), str(parsed.run_dir), parsed.add_version) == (
        expected_output_dir, output_dir, add_version
    )  # fmt: skip
    assert (parsed.world_size, parsed.per_device_train_batch_size, parsed.gradient_accumulation_steps) == (2, 2, 4)
    assert (parsed.save_strategy, parsed.save_only_model, parsed.resume_only_model) == ("steps", True, None)
    assert parsed.resume_from_checkpoint == "/out/checkpoint-3"


@pytest.mark.parametrize("weights_only", [True, False])
def test_a_scripts_resume_is_reported_weights_only_where_safe_sft_found_no_optimizer_state(
    weights_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a script's Trainer has no resume_only_model: it loads what the checkpoint holds, so report.json says
    # what the console said (a checkpoint without optimizer state resets it), not the worker's missing field
    from types import SimpleNamespace

    from launcher.plan.degrade import Settings
    from launcher.plan.settings import Resume
    from launcher.run import resolved
    from launcher.run.records import AttemptRecord
    from launcher.run.report import attempt_json

    monkeypatch.setenv("WORLD_SIZE", "1")
    args = SimpleNamespace(output_dir="/out/v2-1", resume_from_checkpoint="/out/checkpoint-6")
    reported = resolved.parse(json.loads(json.dumps(_hf_worker().resolved_args(args))))
    why = "the checkpoint holds no optimizer state" if weights_only else ""
    record = AttemptRecord(
        2, Settings(micro_batch=2, grad_accum=2, world_size=1), [], {}, "l", "s",
        resumed_from=Resume("/out/checkpoint-6", 6, weights_only, why), resolved=reported,
    )  # fmt: skip
    shown = attempt_json(record)["resumed_from"]
    assert (shown["weights_only"], shown["optimizer_state_reset"]) == (weights_only, weights_only)
    assert shown["why_weights_only"] == why


LF_CONFIG = """\
model_name_or_path: /models/qwen
stage: sft
finetuning_type: lora
dataset: [alpaca_en, identity]
cutoff_len: 4096
disable_gradient_checkpointing: true
per_device_train_batch_size: 4
deepspeed: examples/deepspeed/ds_z3_config.json
output_dir: saves/qwen/lora
"""


def lf_config(tmp_path: Path) -> str:
    """LF_CONFIG with a dataset_dir whose dataset_info.json names its datasets, as LLaMA-Factory's data/ does."""
    (tmp_path / "identity.json").write_text("[]")
    info = {"alpaca_en": {"hf_hub_url": "llamafactory/alpaca_en"}, "identity": {"file_name": "identity.json"}}
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    return LF_CONFIG + f"dataset_dir: {tmp_path}\n"


def test_llamafactory_reads_the_config_then_the_overrides_in_swifts_names(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path))
    read = LLAMAFACTORY.read([str(config), "per_device_train_batch_size=2", "cutoff_len=2048"])
    assert read.worker_args == ("-m", "llamafactory.launcher", str(config.resolve()))
    args = read.args
    assert args.get_int("per_device_train_batch_size") == 2  # the override wins, as OmegaConf merges them
    assert args.get_int("max_length") == 2048  # cutoff_len is max_length
    assert args.get_bool("gradient_checkpointing", True) is False  # disable_gradient_checkpointing: true
    assert args.get("deepspeed") == "examples/deepspeed/ds_z3_config.json"
    assert args.get("model_name_or_path") == "/models/qwen" and args.get("dataset") == "alpaca_en,identity"
    assert args.get_int("gradient_accumulation_steps") == 1  # transformers' default: not in the config
    assert args.argv() == ("per_device_train_batch_size=2", "cutoff_len=2048")  # the user's own, as given


def test_llamafactory_reads_its_training_method_in_swifts_names_and_writes_it_back_in_its_own(
    tmp_path: Path,
) -> None:
    """The plan is trainer-blind: `finetuning_type: full` had been read as no --tuner_type, so LoRA, and a
    full fine-tune planned without its gradients and optimizer states (a 7B run's 124 GiB as 32)."""
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path).replace("finetuning_type: lora", "finetuning_type: full"))
    overrides = ["flash_attn=fa2", "lora_target=all", "quantization_bit=4", "freeze_vision_tower=false"]
    args = LLAMAFACTORY.read([str(config), *overrides, "enable_liger_kernel=true", "additional_target=lm_head"]).args
    assert args.get("tuner_type") == "full"
    assert args.get("attn_impl") == "flash_attention_2" and args.get("target_modules") == "all-linear"
    assert args.get("quant_bits") == "4" and args.get("quant_method") == "bnb"  # its default method
    assert args.get_bool("freeze_vit", True) is False and args.get_bool("use_liger_kernel", False) is True
    assert args.get("modules_to_save") == "lm_head"
    assert args.get("lora_dropout") == "0" and args.get_bool("use_logits_to_keep", True) is False  # its defaults
    assert args.argv()[:4] == tuple(overrides)  # written back as the user wrote them
    auto = LLAMAFACTORY.read([str(config), "flash_attn=auto", "neat_packing=true"]).args
    assert auto.get("attn_impl") == "" and auto.get_bool("packing", False) is True  # neat packing packs
    assert auto.argv() == ("flash_attn=auto", "neat_packing=true")
    quoted = LLAMAFACTORY.read([str(config), "neat_packing='true'"]).args  # text, true to Python: it packs
    assert quoted.get_bool("packing", False) is True


def test_a_llamafactory_plan_counts_what_its_finetuning_type_trains(tmp_path: Path) -> None:
    """full trains every parameter, freeze its last layers, lora adapters; swift's own refusal of packing
    without flash attention is not LLaMA-Factory's (it packs with any attention)."""
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path).replace("deepspeed: examples/deepspeed/ds_z3_config.json\n", ""))
    model = tmp_path / "model"
    model.mkdir()
    layer = 4 * 64 * 64 + 3 * 64 * 128  # attention and MLP of one of the 4 layers
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 4,
        "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 1000, "torch_dtype": "bfloat16",
    }))  # fmt: skip

    def plan(*overrides: str) -> dict:  # type: ignore[type-arg]
        argv = ["plan", "--json", "--backend", "llamafactory", "--assume-gpus", "1x80GiB", "--model-params",
                str(2 * 1000 * 64 + 4 * layer), str(config), f"model_name_or_path={model}", *overrides]  # fmt: skip
        return plan_importing_nothing_heavy(argv)

    def optimizer(found: dict) -> int:  # type: ignore[type-arg]
        """Adam's states under DDP: the same bytes for each trained parameter."""
        return int(found["estimates"]["ddp"]["parts"]["gpu_optimizer"])

    total = 2 * 1000 * 64 + 4 * layer
    full = optimizer(plan("finetuning_type=full"))
    assert full == optimizer(plan("finetuning_type=lora", "finetuning_type=full"))  # the override wins
    assert optimizer(plan("finetuning_type=freeze")) == pytest.approx(full * 2 * layer / total)  # its last 2 layers
    first = optimizer(plan("finetuning_type=freeze", "freeze_trainable_layers=-1"))  # its first layer
    assert first == pytest.approx(full * layer / total)
    assert 0 < optimizer(plan("finetuning_type=lora")) < full * layer / total
    packed = plan("finetuning_type=lora", "packing=true")
    assert not any("needs a flash attention" in w for w in packed["warnings"])


@pytest.mark.parametrize(
    ("overrides", "left_out"),
    [
        pytest.param(("stage=sft",), None, id="sft"),
        pytest.param(("stage=pt",), None, id="pt"),
        pytest.param(("stage=dpo",), "each pair's two sequences (twice", id="dpo-lora-no-reference"),
        pytest.param(("stage=dpo", "finetuning_type=full"), "the frozen reference model", id="dpo-full"),
        pytest.param(("stage=dpo", "ref_model=/models/ref"), "the frozen reference model", id="dpo-ref-model"),
        pytest.param(("stage=kto", "finetuning_type=freeze"), "the frozen reference model", id="kto-freeze"),
        pytest.param(("stage=rm",), "the value head", id="rm"),
        pytest.param(("stage=ppo",), "the reward model", id="ppo"),
        # a typo is named as one, not warned of as a paired stage (audit42 F12)
        pytest.param(("stage=stf",), "stages (pt, sft, rm, ppo, dpo, kto) (did you mean sft?)", id="typo"),
    ],
)
def test_a_llamafactory_stage_the_estimate_does_not_count_is_named_in_the_plan(
    tmp_path: Path, overrides: tuple[str, ...], left_out: str | None
) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path))
    warned = [w for w in LLAMAFACTORY.read([str(config), *overrides]).warnings if w.startswith("stage: ")]
    assert (left_out is None and not warned) or (len(warned) == 1 and left_out in warned[0])
    if overrides == ("stage=dpo",):
        assert "reference" not in warned[0]  # LoRA's reference is its own base, adapters off


def test_dpo_with_a_loss_that_needs_no_reference_is_not_said_to_load_one(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path))
    for loss in ("orpo", "simpo"):
        read = LLAMAFACTORY.read([str(config), "stage=dpo", "finetuning_type=full", f"pref_loss={loss}"])
        assert len(read.warnings) == 1 and "reference" not in read.warnings[0]


def test_llamafactory_pretraining_packs_unless_told_not_to(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path))
    assert LLAMAFACTORY.read([str(config), "stage=pt"]).args.get_bool("packing", False) is True
    assert LLAMAFACTORY.read([str(config), "stage=pt", "packing=false"]).args.get_bool("packing", False) is False
    assert LLAMAFACTORY.read([str(config)]).args.get_bool("packing", False) is False  # sft does not


def test_llamafactory_gets_the_ladders_changes_as_its_own_overrides(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path))
    base = LLAMAFACTORY.read([str(config), "cutoff_len=2048"]).args
    changed = base.with_values({
        "gradient_checkpointing": "true", "max_length": "1024", "truncation_strategy": "right",
        "resume_from_checkpoint": "saves/qwen/lora/checkpoint-3", "resume_only_model": "true",
        "save_only_model": "true",
    })  # fmt: skip
    # no truncation_strategy or resume_only_model: LLaMA-Factory has neither
    assert changed.argv() == (
        "cutoff_len=1024", "disable_gradient_checkpointing=false",
        "resume_from_checkpoint=saves/qwen/lora/checkpoint-3", "save_only_model=true",
    )  # fmt: skip


def test_llamafactory_initial_settings_are_its_defaults(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: m\noutput_dir: o\n")
    args = LLAMAFACTORY.read([str(config)]).args
    s = initial_settings(args, _plan(), None, {}, True, None, LLAMAFACTORY.missing)
    assert (s.micro_batch, s.grad_accum, s.gradient_checkpointing, s.max_length) == (8, 1, True, 2048)
    assert s.allow_shorter_max_length is True  # cutoff_len is a knob it has


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param([], "no LLaMA-Factory config given", id="nothing"),
        pytest.param(["--model_name_or_path", "m"], "where LLaMA-Factory's YAML or JSON config", id="flags"),
        pytest.param(["missing.yaml"], "LLaMA-Factory config missing.yaml does not exist", id="missing"),
        pytest.param(["CONFIG", "--cutoff_len", "1024"], "--cutoff_len: LLaMA-Factory's overrides", id="flag-override"),
        pytest.param(["CONFIG", "cutoff_len"], "cutoff_len: LLaMA-Factory's overrides after the config", id="no-value"),
        pytest.param(
            ["CONFIG", "learning_rate=", "1e-4"],
            "`learning_rate=` then `1e-4`: a space after = makes two words of one override",
            id="space-after-equals",
        ),
    ],
)
def test_llamafactory_bad_input_is_one_clear_error(tmp_path: Path, argv: list[str], says: str) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path))
    with pytest.raises(SafeSftError) as err:
        LLAMAFACTORY.read([str(config) if a == "CONFIG" else a for a in argv])
    assert says in err.value.message
    assert err.value.hint


def test_plan_for_a_llamafactory_config_names_the_backend_and_imports_nothing_heavy(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    zero3 = tmp_path / "ds_z3_config.json"
    zero3.write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}))
    text = lf_config(tmp_path).replace("saves/qwen/lora", str(tmp_path / "out"))
    config.write_text(text.replace("examples/deepspeed/ds_z3_config.json", str(zero3)))
    argv = ["plan", "--json", "--backend", "llamafactory", "--assume-gpus", "2x80GiB", "--model-params", "7e9",
            str(config), "per_device_train_batch_size=2"]  # fmt: skip
    plan = plan_importing_nothing_heavy(argv)
    assert plan["backend"] == "llamafactory"
    worker = plan["command"].index(str(Path("launcher/hf_worker.py").resolve()))
    assert plan["command"][worker + 1 : worker + 4] == ["-m", "llamafactory.launcher", str(config.resolve())]
    assert plan["command"][worker + 4] == "per_device_train_batch_size=2"
    assert plan["topology"]["nproc_per_node"]["value"] == 2


@pytest.mark.parametrize("argv", [["llamafactory"], ["llamafactory", "export", "x.yaml"]])
def test_llamafactory_without_train_is_one_line_exit_2(argv: list[str]) -> None:
    result = _run_cli(*argv)
    assert result.returncode == 2
    first, fix = result.stderr.splitlines()[:2]
    assert first.startswith("safe-sft: error: safe-sft llamafactory takes `train`, not ")
    assert fix.startswith("safe-sft: fix: use it as `safe-sft llamafactory train config.yaml")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["torchrun", "--help"], "Usage: safe-sft torchrun [OPTIONS] [--] SCRIPT ARGS..."),
        (["llamafactory", "--help"], "Usage: safe-sft llamafactory train [OPTIONS] CONFIG [key=value ...]"),
        (["llamafactory", "train", "--help"], "Usage: safe-sft llamafactory train [OPTIONS] CONFIG [key=value ...]"),
    ],
)
def test_a_backend_command_helps_with_its_own_usage(argv: list[str], usage: str) -> None:
    """Not run's `SWIFT_ARGS` and "as swift sft would": a user of these commands passes no swift arguments."""
    result = _run_cli(*argv)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == usage
    summary, options = result.stdout.split("Options:")
    assert "swift sft" not in summary and "--backend" not in options
    assert "--max-attempts" in result.stdout


def test_an_option_after_the_script_names_safe_sft_torchrun_in_its_fix(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    result = _run_cli("torchrun", str(script), "--max-attempts", "2")
    assert result.returncode == 2
    assert "safe-sft: fix: put safe-sft's options first: `safe-sft torchrun --max-attempts ..." in result.stderr


def _worker():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("safe_sft_worker_test", SWIFT.worker)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("ending", "marked"),
    [
        pytest.param(lambda: None, True, id="returns"),
        pytest.param(lambda: sys.exit(0), True, id="exit-0"),
        pytest.param(lambda: sys.exit(3), False, id="exit-3"),
        pytest.param(lambda: 1 / 0, False, id="raises"),
    ],
)
def test_a_rank_marks_its_training_returned_only_when_it_did(
    ending, marked: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SAFE_SFT_NOTICE_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    with contextlib.suppress(SystemExit, ZeroDivisionError):
        _worker().run_training(ending)
    assert (tmp_path / "finished-rank-3").exists() is marked


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen3_vl"])
def test_llamafactory_turns_its_image_budget_as_image_max_pixels_not_an_environment_variable(
    model_type: str, tmp_path: Path
) -> None:
    from launcher.model import ModelFacts

    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: m\noutput_dir: /out\n")
    base = LLAMAFACTORY.read([str(config), "image_max_pixels=1048576"]).args
    vl = ModelFacts(name="m", total_params=7_000_000_000, source="config", model_type=model_type)
    start = initial_settings(base, _plan(), vl, {}, False, None, LLAMAFACTORY.missing, LLAMAFACTORY.budget_args)
    # pixels for every family (qwen3_vl's swift reads IMAGE_MAX_TOKEN_NUM); the user's value is the start
    assert (start.vision_env, start.vision_budget) == ("MAX_PIXELS", 1048576)
    halved = replace(start, vision_budget=524288)
    args = attempt_args(
        base, start, halved, None, user_deepspeed=None, templates=TEMPLATES, config_dir="/cfg", output_dir="/out",
        fresh_version_dir=False, missing=LLAMAFACTORY.missing, budget_args=LLAMAFACTORY.budget_args,
    )  # fmt: skip
    assert args.swift.argv() == ("image_max_pixels=524288",) and args.env == {}
    # the ladder's change, as the summary and report.json say it, names the argument that changed
    last_rung = replace(start, micro_batch=1, gradient_checkpointing=True, deepspeed="zero3_offload")
    step = next_step(last_rung, FailureKind.CUDA_OOM)
    assert isinstance(step, Step) and step.change == "MAX_PIXELS 1048576 -> 524288"
    assert LLAMAFACTORY.spelled(step.change) == "image_max_pixels 1048576 -> 524288"
    assert SWIFT.spelled(step.change) == step.change  # swift reads the variable
    unset = LLAMAFACTORY.read([str(config)]).args  # its default, 768 x 768
    assert initial_settings(unset, _plan(), vl, {}, False, None, LLAMAFACTORY.missing, LLAMAFACTORY.budget_args) \
        .vision_budget == 768 * 768  # fmt: skip
    text = initial_settings(unset, _plan(), None, {}, False, None, LLAMAFACTORY.missing, LLAMAFACTORY.budget_args)
    assert text.vision_env is None  # a text model: no image rung


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(
            {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29501", "NPROC_PER_NODE": "4"},
            (2, 1, "10.0.0.5", 29501, 4), id="llamafactory-cli's-variables",
        ),
        pytest.param(
            {"SLURM_JOB_ID": "777", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1",
             "SLURM_JOB_NODELIST": "gpu-[01-02]", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"},
            (2, 1, "gpu-01", None, 4), id="a-slurm-job-step",
        ),
    ],
)  # fmt: skip
def test_a_llamafactory_run_over_several_nodes_takes_its_topology_as_a_swift_run_does(
    env: dict[str, str], expected: tuple[object, ...], tmp_path: Path
) -> None:
    import os

    config = tmp_path / "sft.yaml"
    config.write_text(f"model_name_or_path: m\noutput_dir: {tmp_path / 'out'}\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NNODES", "NODE_RANK", "MASTER_"))}
    argv = [sys.executable, "-m", "launcher", "plan", "--json", "--backend", "llamafactory", "--assume-gpus",
            "4x80GiB", "--assume-ram", "512GiB", "--model-params", "7e9", str(config)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**clean, **env})
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    topology = plan["topology"]
    nnodes, node_rank, master, port, nproc = expected
    assert (topology["nnodes"]["value"], topology["node_rank"]["value"]) == (nnodes, node_rank)
    assert (topology["master_addr"]["value"], topology["nproc_per_node"]["value"]) == (master, nproc)
    if port is not None:
        assert topology["master_port"]["value"] == port
    command = plan["command"]
    assert command[command.index("--nnodes") + 1 : command.index("--nnodes") + 4] == ["2", "--node_rank", "1"]
    assert command[command.index("--master_addr") + 1] == master


def test_llamafactory_on_only_incomplete_checkpoints_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """It would resume from the newest checkpoint-N, complete or not, and die loading it."""
    out = tmp_path / "out"
    (out / "checkpoint-10").mkdir(parents=True)
    (out / "checkpoint-10" / "config.json").write_text("{}")  # half-written: no trainer_state.json
    config = tmp_path / "sft.yaml"
    config.write_text(f"model_name_or_path: m\noutput_dir: {out}\nuse_cpu: true\n")
    result = _run_cli("llamafactory", "train", "--nproc", "2", "--model-params", "1e6", str(config))
    assert result.returncode == 2, result.stderr
    error, fix = [line for line in result.stderr.splitlines() if line.startswith("safe-sft: ")][-2:]
    assert error == (
        f"safe-sft: error: llamafactory would resume from {out / 'checkpoint-10'}, which is incomplete "
        f"(trainer_state.json is missing), and no complete checkpoint is in {out}"
    )
    assert fix.startswith("safe-sft: fix: move the incomplete checkpoint dirs away, or set overwrite_output_dir=true")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-10"]  # nothing started, nothing written
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("resume", "refused"),
    [
        pytest.param("true", True, id="true-resumes-the-newest-as-unset-does"),
        pytest.param("false", False, id="false-starts-afresh"),
        pytest.param("False", False, id="False"),
    ],
)
def test_llamafactory_reads_a_true_or_false_resume_as_transformers_does(
    tmp_path: Path, resume: str, refused: bool
) -> None:
    """transformers' Trainer.train(resume_from_checkpoint=True) takes the newest checkpoint, False none: safe-sft
    had refused both as a checkpoint path that does not exist ("--resume_from_checkpoint true does not exist")."""
    out = tmp_path / "out"
    (out / "checkpoint-10").mkdir(parents=True)
    (out / "checkpoint-10" / "config.json").write_text("{}")  # half-written: no trainer_state.json
    config = tmp_path / "sft.yaml"
    config.write_text(f"model_name_or_path: m\noutput_dir: {out}\nuse_cpu: true\nresume_from_checkpoint: {resume}\n")
    for argv in ([str(config)], [str(config), f"resume_from_checkpoint={resume}"]):
        args = LLAMAFACTORY.read(argv).args
        assert args.get("resume_from_checkpoint") == (None if refused else "")
        assert LLAMAFACTORY.resumes_by_itself(args) is refused
    assert LLAMAFACTORY.read([str(config), f"resume_from_checkpoint={resume}"]).args.argv() == (
        () if refused else ("resume_from_checkpoint=false",)
    )
    result = _run_cli("plan", "--backend", "llamafactory", "--nproc", "2", "--model-params", "1e6", str(config))
    assert "does not exist" not in result.stderr and result.returncode == 0, result.stderr
    # in this environment the run stops, before anything starts, where it finds no llamafactory package
    run = _run_cli("llamafactory", "train", "--nproc", "2", "--model-params", "1e6", str(config))
    assert "does not exist" not in run.stderr and "Traceback" not in run.stderr
    assert ("would resume from" in run.stderr) is refused  # true: the same refusal as LLaMA-Factory's own search
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-10"]


@pytest.mark.parametrize(
    ("backend", "raises"),
    [(replace(LLAMAFACTORY, trainer=("no_such_trainer_package", "no-such-trainer")), True),
     (replace(SWIFT, trainer=("json", "python")), False), (HF_TRAINER, False)],
    ids=["missing", "found", "the-users-script"],
)  # fmt: skip
def test_the_run_path_finds_the_trainers_package_first(backend: Backend, raises: bool) -> None:
    """Every rank imports it: without it each stops on its first import, after torchrun started them all."""
    if not raises:
        check_trainer_installed(backend)
        return
    with pytest.raises(SafeSftError) as err:
        check_trainer_installed(backend)
    assert err.value.message == (
        f"safe-sft llamafactory train: no no_such_trainer_package package for {sys.executable}, the Python every "
        "rank runs"
    )
    assert (
        err.value.hint
        == "run safe-sft from the environment that has no-such-trainer installed (pip install safe-sft there)"
    )


def test_llamafactory_from_an_environment_without_it_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """This tier's .venv has ms-swift and no LLaMA-Factory (scripts/setup.sh; it has its own environment)."""
    out = tmp_path / "out"
    config = tmp_path / "sft.yaml"
    config.write_text(f"model_name_or_path: m\noutput_dir: {out}\nuse_cpu: true\n")
    result = _run_cli("llamafactory", "train", "--nproc", "1", "--model-params", "1e6", str(config))
    assert result.returncode == 2, result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("safe-sft: error: ")][-1]
    assert error == (
        f"safe-sft: error: safe-sft llamafactory train: no llamafactory package for {sys.executable}, the Python "
        "every rank runs"
    )
    assert not out.exists()  # nothing started, nothing written


def test_llamafactory_names_a_bad_whole_number_in_its_own_spelling(tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(lf_config(tmp_path))
    args = LLAMAFACTORY.read([str(config), "cutoff_len=-1"]).args
    with pytest.raises(SafeSftError) as bad:
        args.check_values()
    assert (bad.value.message, bad.value.hint) == (
        "cutoff_len '-1' is below 1",
        "set cutoff_len to a whole number of at least 1",
    )


def test_swift_reads_a_prefix_of_its_options_and_names_a_retired_one() -> None:
    """swift_options.txt holds swift sft 4.6's option names (tests/stack/test_swift_options_real.py holds it
    to the installed swift): `--max_len` is max_length there, and 4.6 has no --train_type."""
    args = SWIFT.read(["--model", "m", "--max_len", "64", "--train_type", "lora"]).args
    assert args.get_int("max_length") == 64
    assert args.unknown_flags() == ("--train_type",)
    assert unknown_flag_warning("--train_type", args.options).startswith(
        "--train_type is no option of swift sft (an earlier ms-swift's option: write --tuner_type)"
    )


@pytest.mark.parametrize(
    ("argv", "swift_gets"),
    [
        (["sft", "--model", "m"], ["--model", "m"]),
        (["swift", "sft", "--model", "m"], ["--model", "m"]),
        (["sft", "config.yaml"], ["config.yaml"]),  # swift sft's one positional: its config file
        (["--model", "m"], ["--model", "m"]),
        (["--model", "sft"], ["--model", "sft"]),  # a value named sft is a value
        (["swift", "--model", "m"], ["swift", "--model", "m"]),  # left for swift to refuse, as it would
    ],
)
def test_the_sft_word_of_swift_sft_is_dropped_as_swift_drops_it(argv: list[str], swift_gets: list[str]) -> None:
    from launcher.backends.swift import without_command_word

    assert without_command_word(argv) == swift_gets


@pytest.mark.parametrize("word", ["rlhf", "pt", "infer", "merge_lora", "export"])
def test_another_swift_command_is_refused_naming_it(word: str) -> None:
    from launcher.backends.swift import without_command_word

    with pytest.raises(SafeSftError, match=f"not `swift {word}`"):
        without_command_word([word, "--model", "m"])


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["junk", "--model", "m"], id="a-word"),
        pytest.param(["cfg.YAML", "--model", "m"], id="a-config-swift-does-not-read-upper-case"),
        pytest.param(["-max_length", "--model", "m"], id="a-single-dash"),
    ],
)
def test_a_word_before_swifts_options_is_one_line(argv: list[str]) -> None:
    """swift sft stops on it (remaining_argv) in every rank, after torchrun has started them."""
    with pytest.raises(SafeSftError) as err:
        SWIFT.read(argv)
    assert err.value.message.startswith(f"{argv[0]!r} is no swift argument")
    assert SWIFT.read([*argv, "--ignore_args_error", "true"]).args.get("model") == "m"  # swift only warns then


def test_a_deepspeed_mapping_in_a_config_file_reads_as_the_json_swift_receives(tmp_path: Path) -> None:
    """swift's parse_yaml_args writes a mapping value as JSON; the plan read Python's str() of it, which is no
    JSON, and refused a config that swift runs."""
    config = tmp_path / "train.yaml"
    config.write_text("model: m\ndeepspeed:\n  zero_optimization: {stage: 2}\n  train_micro_batch_size_per_gpu: auto\n")
    args = SWIFT.read([str(config)]).args
    expected = '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}'
    assert args.get("deepspeed") == expected
    assert args.argv()[args.argv().index("--deepspeed") + 1] == expected


def test_swifts_deepspeed_names_are_refused_where_the_trainer_takes_a_file_or_json(tmp_path: Path) -> None:
    """`--deepspeed zero2` under transformers' own parser: every rank stopped on 'Expected a string path to an
    existing deepspeed config' after the start."""
    from launcher.backends.swift import SWIFT
    from launcher.errors import SafeSftError
    from launcher.prepare import read_named_inputs

    script = tmp_path / "train.py"
    script.write_text("")
    args = HF_TRAINER.read([str(script), "--deepspeed", "zero2"]).args
    with pytest.raises(SafeSftError) as err:
        read_named_inputs(args, HF_TRAINER)
    assert err.value.message == (
        "--deepspeed zero2 is one of swift's names, which safe-sft torchrun does not take (a file or inline JSON)"
    )
    assert "zero2.json, zero3.json, zero3_offload.json" in err.value.hint
    assert read_named_inputs(SWIFT.read(["--deepspeed", "zero2"]).args, SWIFT).user_deepspeed is None  # swift's own


@pytest.mark.parametrize("text", ["", "- a\n- b\n"], ids=["empty", "list"])
def test_a_llamafactory_config_that_holds_no_mapping_points_at_llamafactorys_examples(
    tmp_path: Path, text: str
) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(text)
    with pytest.raises(SafeSftError) as err:
        LLAMAFACTORY.read([str(config)])
    assert err.value.message == f"config file {config} does not hold a mapping of arguments"
    assert err.value.hint == "write one `key: value` line per argument, as LLaMA-Factory's examples/train_lora do"


@pytest.mark.parametrize(
    ("installed", "argv", "refused"),
    [
        ("4.6.2", ["--model", "m", "--train_type", "lora"], True),  # ms-swift 3's name: 24 of 57 public scripts
        ("4.6.2", ["--model", "m", "--train_type", "lora", "--ignore_args_error", "true"], False),
        ("4.6.2", ["--model", "m", "--tuner_type", "lora"], False),
        ("3.12.1", ["--model", "m", "--train_type", "lora"], False),  # another swift: its options may differ
    ],
)
def test_an_option_the_installed_swift_does_not_have_is_refused_before_any_rank_starts(
    monkeypatch: pytest.MonkeyPatch, installed: str, argv: list[str], refused: bool
) -> None:
    """swift stops every rank on it (`ValueError: remaining_argv: ['--train_type', 'lora']`), after torchrun
    started them all; the plan had only warned."""
    import importlib.metadata

    from launcher.backends.swift import read, table_version
    from launcher.prepare import check_swift_options

    assert table_version() == "4.6.0"
    monkeypatch.setattr(importlib.metadata, "version", lambda name: installed)
    swift = read(argv).args
    if not refused:
        check_swift_options(swift, SWIFT)
        return
    with pytest.raises(SafeSftError) as err:
        check_swift_options(swift, SWIFT)
    assert err.value.message == (
        "--train_type is no option of swift sft 4.6.2 (an earlier ms-swift's option: write --tuner_type): swift "
        "stops on it unless --ignore_args_error true is given"
    )
    check_swift_options(swift, HF_TRAINER)  # a script's own options are its own


@pytest.mark.parametrize("let_through", [[], ["--ignore_args_error", "true"]])
def test_an_ambiguous_prefix_is_refused_with_its_options_even_where_unknown_words_are_let_through(
    let_through: list[str],
) -> None:
    """argparse stops on `--lr` (lr_scheduler_type, lr_scheduler_kwargs) as ambiguous in every rank, exit 2,
    whatever --ignore_args_error says; an unambiguous prefix (`--max_len`) is the option it starts."""
    from launcher.backends.swift import read
    from launcher.prepare import check_swift_options

    swift = read(["--model", "m", "--lr", "1e-4", *let_through]).args
    with pytest.raises(SafeSftError) as err:
        check_swift_options(swift, SWIFT)
    assert err.value.message == (
        "--lr is the start of 2 options of swift sft (--lr_scheduler_kwargs, --lr_scheduler_type): its parser "
        "stops on it in every rank as ambiguous, --ignore_args_error or not"
    )
    check_swift_options(read(["--model", "m", "--max_len", "512", *let_through]).args, SWIFT)


def test_a_scripts_plan_leaves_its_command_line_as_typed_and_sends_the_deepspeed_config_to_its_worker(
    tmp_path: Path,
) -> None:
    """A script's own argparse stops on an option it does not know: the plan's --deepspeed on its command line
    had ended every rank at once. It goes to the script's TrainingArguments through the worker instead."""
    import json

    from launcher.plan.script_args import SCRIPT_ARGS_ENV

    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('never run by plan')\n")
    argv = ["plan", "--json", "--backend", "torchrun", "--assume-gpus", "2x80GiB", "--model-params", "7e9",
            str(script), "--model_name_or_path", "Qwen/Qwen2.5-7B", "--output_dir", str(tmp_path / "out")]  # fmt: skip
    plan = plan_importing_nothing_heavy(argv)
    worker = plan["command"].index(str(Path("launcher/hf_worker.py").resolve()))
    assert plan["command"][worker + 2 :] == argv[-4:]  # the script's options, as typed
    chosen = json.loads(plan["env"][SCRIPT_ARGS_ENV])
    assert plan["strategy"] and chosen["deepspeed"].endswith(f"{plan['strategy']}.json")


def test_a_scripts_own_flag_that_prefixes_an_option_taking_a_value_is_its_own(tmp_path: Path) -> None:
    """An argparse script's `--resume` (store_true) had been read as --resume_from_checkpoint true and refused
    before anything ran ("--resume_from_checkpoint true does not exist"; hostile44tr F9): HfArgumentParser
    would stop on a value-taking option given none, so the flag is the script's own. A prefix with a value
    is still read as HfArgumentParser reads it."""
    script = tmp_path / "train.py"
    script.write_text("")
    own = HF_TRAINER.read([str(script), "--ckpt_dir", "ck", "--resume", "--out", "m.json"]).args
    assert not own.has("resume_from_checkpoint") and own.given("resume") == "true"
    assert own.argv() == ("--ckpt_dir", "ck", "--resume", "--out", "m.json")  # as typed
    hf = HF_TRAINER.read([str(script), "--output_d", "o", "--resume_from", "o/checkpoint-2"]).args
    assert (hf.get("output_dir"), hf.get("resume_from_checkpoint")) == ("o", "o/checkpoint-2")


def test_a_scripts_own_flag_that_prefixes_a_folder_option_with_a_file_for_its_value_is_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An argparse script's `--out metrics.json` had been read as --output_dir (an unambiguous prefix), and
    safe-sft made its records folder at that path; the script then failed writing its file there (hostile44tr
    F8). A folder option's prefix whose value is a file, or is named as one, is the script's own."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("")
    (tmp_path / "scores").write_text("{}")  # an existing file, whatever its name

    def output_dir(*argv: str) -> str | None:
        return HF_TRAINER.read([str(script), "--output_dir", "ck", *argv]).args.get("output_dir")

    assert output_dir("--out", "metrics.json") == "ck"
    assert output_dir("--out", "Metrics.JSONL") == "ck"
    assert output_dir("--out", "scores") == "ck"
    # a folder's name, even with a dot in it, is still read as HfArgumentParser reads it
    assert output_dir("--out", "runs") == "runs"
    assert output_dir("--out", "runs/qwen2.5") == "runs/qwen2.5"
    (tmp_path / "model.pt").mkdir()
    assert output_dir("--out", "model.pt") == "model.pt"  # an existing folder
