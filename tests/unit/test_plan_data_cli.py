"""`safe-sft plan` with a local dataset, through the real CLI: both figures in the text, --explain-memory and --json."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Qwen2.5-7B LoRA, 8 samples of up to 8192 tokens: the worst case holds 8 x 8192 tokens of 152k-entry fp32
# logits (about 93 GiB) and fits no 80 GiB GPU; the data's short rows (a few hundred tokens) fit in any.
RUN = [
    "--assume-gpus", "1x80GiB", "--assume-ram", "256GiB", "--model-params", "7.6e9",
    "--model", "Qwen/Qwen2.5-7B-Instruct", "--tuner_type", "lora", "--per_device_train_batch_size", "8",
    "--max_length", "8192",
]  # fmt: skip


ROOT = Path(__file__).resolve().parents[2]


def run_plan(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """In the dataset's directory (relative --dataset paths), with this checkout's launcher first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "launcher", "plan", *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    rng = random.Random(0)
    with (tmp_path / "train.jsonl").open("w", encoding="utf-8") as handle:
        handle.write("{broken\n")  # the first line: among the 1,000 parsed, as a malformed row is only counted there
        for i in range(3000):
            question = "Explain the word " * rng.randint(2, 40)
            answer = ("这是一个回答。" if i % 3 == 0 else "This is an answer. ") * rng.randint(5, 60)
            row = {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return tmp_path


def test_the_plan_json_holds_the_data_and_both_figures(data_dir: Path) -> None:
    result = run_plan(data_dir, "--json", *RUN, "--dataset", "train.jsonl")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    data = plan["data_lengths"]
    assert data["estimated_from"] == "characters" and data["complete"]
    assert data["rows_sampled"] == 999 and data["rows_malformed"] == 1
    assert abs(data["datasets"][0]["rows_in_file"] - 3000) < 150 and not data["datasets"][0]["rows_in_file_exact"]
    tokens = data["tokens_per_sample"]
    assert 0 < tokens["p50"] <= tokens["p95"] <= tokens["p99"] <= tokens["max"] < 8192
    batch = data["micro_batch"]
    assert batch["mode"] == "padded" and batch["size"] == 8 and batch["percentile"] == 99
    assert batch["tokens"] == 8 * batch["longest_sample"] and batch["worst_case_tokens"] == 8 * 8192
    assert batch["label_tokens"] is None  # padded: logits from the earliest first label on, not modelled
    zero2 = plan["estimates"]["zero2"]
    assert not zero2["fits"] and zero2["fits_at_data"]  # the worst case keeps its meaning
    assert zero2["gpu_need_at_data_bytes"] < zero2["gpu_need_bytes"] / 3
    assert sum(v for k, v in zero2["parts_at_data"].items() if k.startswith("gpu_")) == zero2["gpu_need_at_data_bytes"]
    assert plan["fits"] and plan["strategy"] == "zero2"
    assert any("not at the max_length worst case" in w for w in plan["warnings"])


def test_the_plan_text_and_explain_memory_show_both(data_dir: Path) -> None:
    result = run_plan(data_dir, "--explain-memory", *RUN, "--dataset", "train.jsonl")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\nData\n" in out
    assert re.search(r"train\.jsonl: 999 of ~[23],\d{3} rows sampled, 1 malformed skipped", out)
    assert "tokens per sample (estimated from characters, no tokenizer): p50" in out
    assert "one micro-batch of 8 (padded to its longest sample): p99" in out
    assert "worst case 65,536 (8 x max_length 8,192)" in out
    header = next(line for line in out.splitlines() if line.strip().startswith("strategy"))
    assert "GPU need" in header and "at data" in header
    assert "= need per GPU at data" in out and "logits" in out.split("At the data's lengths")[1]


def test_a_hub_dataset_is_said_and_the_worst_case_decides(data_dir: Path) -> None:
    result = run_plan(data_dir, "--json", *RUN, "--dataset", "train.jsonl", "AI-ModelScope/alpaca-gpt4-data-zh#500")
    plan = json.loads(result.stdout)
    assert result.returncode == (0 if plan["fits"] else 3)
    assert "at the data's lengths" not in plan["strategy_reason"]  # the hub dataset's lengths are unknown
    assert plan["data_lengths"]["datasets"][1]["note"] == "not sampled, not a local file"
    assert not plan["data_lengths"]["complete"]
    assert plan["estimates"]["zero2"]["gpu_need_at_data_bytes"] is None
    text = run_plan(data_dir, *RUN, "--dataset", "AI-ModelScope/alpaca-gpt4-data-zh#500").stdout
    assert "AI-ModelScope/alpaca-gpt4-data-zh#500: not sampled, not a local file" in text


def test_a_directory_or_unreadable_dataset_is_one_warning_line(data_dir: Path) -> None:
    (data_dir / "repo").mkdir()
    result = run_plan(data_dir, "--force", *RUN, "--dataset", "repo")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning: --dataset repo")]
    assert warnings == ["warning: --dataset repo: a directory (swift loads it as a dataset repo) "
                        "(its lengths are not in the estimate)"]  # fmt: skip
    assert "Traceback" not in result.stderr


def test_no_dataset_no_data_section(data_dir: Path) -> None:
    result = run_plan(data_dir, "--json", "--force", *RUN)
    plan = json.loads(result.stdout)
    assert plan["data_lengths"] is None and plan["estimates"]["zero2"]["gpu_need_at_data_bytes"] is None


def test_missing_files_are_warnings_for_an_assumed_machine_and_an_error_for_this_one(data_dir: Path) -> None:
    on_cluster = ("--model", "/cluster/models/Qwen2.5-7B-Instruct", "--dataset", "/cluster/train.jsonl")
    assumed = run_plan(data_dir, "--force", *RUN, *on_cluster)
    assert assumed.returncode == 0, assumed.stderr  # the other machine may have them
    assert "warning: --dataset /cluster/train.jsonl: no such file '/cluster/train.jsonl'" in assumed.stdout
    here = run_plan(data_dir, "--model", "m", "--use_cpu", "true", "--dataset", "typo.jsonl")
    assert here.returncode == 2
    assert here.stderr.splitlines()[0] == (
        f"safe-sft: error: --dataset 'typo.jsonl' is no file in {data_dir} (swift would look for it on the hub)"
    )
    model_here = run_plan(data_dir, "--model", "/cluster/models/Qwen2.5-7B-Instruct", "--use_cpu", "true")
    assert model_here.returncode == 2
    assert model_here.stderr.splitlines()[0] == (
        "safe-sft: error: --model '/cluster/models/Qwen2.5-7B-Instruct' is no directory here"
    )


def test_a_model_path_that_is_a_file_is_one_line(data_dir: Path) -> None:
    """It planned as a model of unknown size ("pass --model-params"); swift loads no model from a file."""
    (data_dir / "model.safetensors").write_bytes(b"\x00" * 16)
    result = run_plan(data_dir, "--model", "./model.safetensors", "--use_cpu", "true")
    assert result.returncode == 2
    assert (
        result.stderr.splitlines()[0]
        == "safe-sft: error: --model './model.safetensors' is a file, not a model's directory"
    )


REAL_TOKENIZERS = sorted(
    d for d in (Path(__file__).resolve().parents[1] / "data" / "tokenizers").iterdir() if d.is_dir()
)


@pytest.mark.parametrize(
    "saved",
    [
        *[pytest.param(sorted(p.name for p in d.iterdir()), id=d.name) for d in REAL_TOKENIZERS],
        pytest.param(["qwen.tiktoken", "tokenization_qwen.py"], id="qwen-1"),
        pytest.param(["ice_text.model", "tokenization_chatglm.py"], id="chatglm-6b"),
        pytest.param(["vocab.txt"], id="bert-style"),
        pytest.param([], id="none"),
    ],
)
def test_a_model_folder_without_a_tokenizer_is_one_line_where_the_trainer_loads_it_from_there(
    data_dir: Path, saved: list[str]
) -> None:
    """A folder of weights and config.json alone (copied without the tokenizer's files): swift loads the
    weights, then fails to encode every row and stops on a TypeError that names no file. The run refuses;
    the plan (of a model not downloaded, say) says so. The real folders of tests/data/tokenizers, and the
    files other models' own code saves, are tokenizers."""
    folder = data_dir / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    for name in saved:
        (folder / name).write_text("")
    said = (
        "--model './model' holds no tokenizer (no tokenizer.json, tokenizer.model, vocab or merges file): swift "
        "would load the weights, then stop on every row it cannot encode"
    )
    typed = ("--model_type", "qwen2", "--template", "qwen")  # config.json alone names no architecture
    plan = run_plan(data_dir, "--model", "./model", "--use_cpu", "true", *typed)
    assert plan.returncode == 0, plan.stderr
    assert (said in plan.stdout) is not bool(saved)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "--model", "./model", "--use_cpu", "true", *typed, "--output_dir", "out"],
        capture_output=True, text=True, timeout=60, cwd=data_dir, env=env,
    )  # fmt: skip
    if saved:
        assert "holds no tokenizer" not in run.stderr, run.stderr
        return
    assert run.returncode == 2 and run.stderr.splitlines()[-2] == f"safe-sft: error: {said}"
    assert not (data_dir / "out").exists()


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("typo.jsonl", None, " is no file in {cwd} (swift would look for it on the hub)"),
        ("broken.jsonl", '{"messages": [}\n', " has a line that is not a JSON object: "),
        ("wide.jsonl", "\ufeff{}\n".encode("utf-16-le"), " is UTF-16 text (it starts with a UTF-16 byte-order mark)"),
        ("val.jsonl#ten", '{"messages": []}\n', ": 'ten' after its last # is not a whole number of samples"),
    ],
)
def test_val_dataset_gets_the_datasets_checks(
    data_dir: Path, name: str, content: str | bytes | None, said: str
) -> None:
    """swift loads --val_dataset as it loads --dataset, once the model has loaded: a missing file was taken for a
    hub id (five minutes of download retries), a broken line stopped every rank naming no file."""
    (data_dir / "good.jsonl").write_text('{"messages": [{"role": "user", "content": "q"}]}\n')
    if content is not None:
        path = data_dir / name.partition("#")[0]
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = run_plan(data_dir, "--model", "m", "--use_cpu", "true", "--dataset", "good.jsonl", "--val_dataset", name)
    assert result.returncode == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"safe-sft: error: --val_dataset {name!r}{said.format(cwd=data_dir)}"), first


MODEL_NAMES = [
    ("/models/Qwen2.5-7B/", "Qwen2.5-7B"),
    ("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/a09a3545", "Qwen2.5-7B"),
    ("/cache/modelscope/models/Qwen--Qwen2.5-7B/snapshots/a09a3545/", "Qwen2.5-7B"),
    ("/cache/modelscope/Qwen/Qwen2___5-7B-Instruct", "Qwen2.5-7B-Instruct"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B-Instruct"),
]


@pytest.mark.parametrize(("model", "name"), MODEL_NAMES)
def test_the_default_output_dir_is_named_as_swift_names_the_model(model: str, name: str) -> None:
    """A hub cache's snapshot path had given output/<revision>, and a modelscope download's `___` stayed: the
    lock and report went to a dir swift never writes, and --resume-latest found no checkpoint there."""
    from launcher.plan.build import output_dir_of
    from launcher.plan.swift_args import parse_swift_argv

    assert output_dir_of(parse_swift_argv(["--model", model])) == f"output/{name}"


def test_a_full_weights_only_resume_names_the_output_dir_after_the_checkpoint() -> None:
    """swift loads the checkpoint as the model there (SftArguments.__post_init__), and names the dir after it."""
    from launcher.plan.build import output_dir_of
    from launcher.plan.swift_args import parse_swift_argv

    resume = ["--resume_from_checkpoint", "/runs/v0-x/checkpoint-30", "--resume_only_model", "true"]
    assert output_dir_of(parse_swift_argv(["--model", "m", "--tuner_type", "full", *resume])) == "output/checkpoint-30"
    assert output_dir_of(parse_swift_argv(["--model", "m", *resume])) == "output/m"  # LoRA: an adapter, not the model


def test_an_empty_output_dir_is_the_working_directory_as_swift_reads_it(data_dir: Path) -> None:
    """`--output_dir "$OUT"` with OUT unset: swift's abspath makes it the working directory, where its runs
    and safe-sft's own dir then go (safe-sft had put its report under output/<model>, a tree swift never
    makes). The plan says so."""
    from launcher.plan.build import output_dir_of
    from launcher.plan.swift_args import parse_swift_argv

    assert output_dir_of(parse_swift_argv(["--model", "m", "--output_dir", ""])) == "."
    assert output_dir_of(parse_swift_argv(["--model", "/models/Qwen2.5-7B/"])) == "output/Qwen2.5-7B"
    result = run_plan(data_dir, "--model", "m", "--use_cpu", "true", "--output_dir", "")
    assert result.returncode == 0, result.stderr
    assert f"warning: output_dir is empty: the trainer writes its runs into {data_dir}" in result.stdout


@pytest.mark.parametrize(
    ("name", "said", "fix"),
    [
        ("upper.JSONL", "its extension 'JSONL' names none", "rename it to upper.jsonl"),
        (
            "data.jsonl.gz",
            "its extension 'gz' names none",
            "decompress it and give the file inside (as {cwd}/data.jsonl)",
        ),
        ("rows", "a name without an extension names none", "give it as .jsonl, .json, .csv, .txt or .parquet"),
    ],
)
def test_a_dataset_file_whose_extension_names_no_loader_is_one_line(
    data_dir: Path, name: str, said: str, fix: str
) -> None:
    """swift picks a `datasets` loader by the extension as written (jsonl and txt mapped to json and text):
    `JSONL` or `gz` names none, so it looks the name up on the hub once the model has loaded; safe-sft had
    then retried it for minutes as a failed download."""
    (data_dir / name).write_text('{"messages": [{"role": "user", "content": "q"}]}\n')
    result = run_plan(data_dir, "--model", "m", "--use_cpu", "true", "--dataset", name)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"safe-sft: error: --dataset {name!r}: swift loads a file with the datasets loader its extension names, as "
        f"written, and {said} (it looks that up on the hub once the model has loaded, and stops)",
        f"safe-sft: fix: {fix.format(cwd=data_dir)}",
    ]


@pytest.mark.parametrize("spec", [" good.jsonl", "good.jsonl ", " good.jsonl#2"])
def test_a_dataset_value_with_spaces_around_it_is_the_file_swift_strips_it_to(data_dir: Path, spec: str) -> None:
    """swift's DatasetSyntax.parse strips the name (a quoted YAML item, a pasted line): it trains on the file,
    where safe-sft had refused a leading space as no file and planned a trailing one as a hub id."""
    (data_dir / "good.jsonl").write_text('{"messages": [{"role": "user", "content": "q"}]}\n' * 3)
    result = run_plan(data_dir, "--json", "--model", "m", "--use_cpu", "true", "--dataset", spec)
    assert result.returncode == 0, result.stderr
    [sampled] = json.loads(result.stdout)["data_lengths"]["datasets"]
    assert sampled["status"] == "sampled"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--model", ""], "--model is empty"),
        (["--model", "m", "--dataset", ""], "--dataset '' names no dataset"),
        (["--model", "m", "--dataset", "   "], "--dataset '   ' names no dataset"),
        (["--model", "m", "--dataset", "good.jsonl", "--val_dataset", "#5"], "--val_dataset '#5' names no dataset"),
    ],
)
def test_an_empty_model_or_dataset_is_one_line(data_dir: Path, args: list[str], said: str) -> None:
    """A script's `--model "$MODEL"` or `--dataset "$DATA"` with the variable unset: swift stops on an empty
    model id at once (retried once as transient, then called unknown) and on an empty dataset once the
    model has loaded (a TypeError)."""
    (data_dir / "good.jsonl").write_text('{"messages": [{"role": "user", "content": "q"}]}\n')
    result = run_plan(data_dir, *args, "--use_cpu", "true")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == f"safe-sft: error: {said}"
    assert "(is the shell variable that should hold it set?)" in result.stderr.splitlines()[1]


def test_an_empty_template_or_model_type_is_detected_as_if_not_given(data_dir: Path) -> None:
    """swift reads `--template ''` as None and detects it; safe-sft had refused '' as no template it registers."""
    folder = data_dir / "Qwen2.5-0.5B-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}))
    (folder / "tokenizer.json").write_text("{}")
    result = run_plan(
        data_dir, "--json", "--model", str(folder), "--template", "", "--model_type", "", "--use_cpu", "true"
    )
    assert result.returncode == 0, result.stderr
    assert not [w for w in json.loads(result.stdout)["warnings"] if "refuses to start" in w]
