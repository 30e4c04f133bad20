"""Secrets never leave safe-sft: masked by name and by value shape in argv, env, log lines, the plan,
report.json, the summary and explain; and `safe-sft report` shows each attempt's lines once."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.masking import MASK, mask_argv, mask_env, mask_text
from launcher.model import Failure, FailureKind
from launcher.plan.degrade import Settings
from launcher.run.records import AttemptRecord, RunResult
from launcher.run.report import report_json, summary
from launcher.show_report import render_report

HF = "hf_AbCdEfGhIjKlMnOpQrStUv"
SK = "sk-proj-0123456789abcdefXYZ"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(["--hub_token", "abc123"], ["--hub_token", MASK], id="hub_token-by-name"),
        pytest.param(["--hub_token=abc123"], [f"--hub_token={MASK}"], id="hub_token-equals"),
        pytest.param(["--api_key", "plain"], ["--api_key", MASK], id="api_key"),
        pytest.param(["--api-key", "plain"], ["--api-key", MASK], id="api-key-dashes"),
        pytest.param(["--wandb_token", "x"], ["--wandb_token", MASK], id="any-_token"),
        pytest.param(["--db_password", "x"], ["--db_password", MASK], id="password"),
        pytest.param(["--client_secret_value", "x"], ["--client_secret_value", MASK], id="secret"),
        pytest.param(["--model", HF], ["--model", MASK], id="hf-shape-anywhere"),
        pytest.param(["--note", f"key={SK}"], ["--note", f"key={MASK}"], id="sk-shape-inside-a-value"),
        pytest.param(
            ["--dataset", "https://alice:s3cr3t@data.example.com/x.jsonl", "b.jsonl"],
            ["--dataset", f"https://alice:{MASK}@data.example.com/x.jsonl", "b.jsonl"],
            id="url-credentials-keep-user-and-host",
        ),
        pytest.param(
            ["--max_new_tokens", "512", "--max_length", "2048", "--model", "Qwen/Qwen2.5-7B"],
            ["--max_new_tokens", "512", "--max_length", "2048", "--model", "Qwen/Qwen2.5-7B"],
            id="ordinary-args-untouched",
        ),
        pytest.param(["--hub_token", "--next", "v"], ["--hub_token", "--next", "v"], id="no-value-no-mask"),
    ],
)
def test_mask_argv(argv: list[str], expected: list[str]) -> None:
    assert mask_argv(argv) == expected


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("HF_TOKEN", "anything", MASK),
        ("WANDB_API_KEY", "anything", MASK),
        ("HF_ENDPOINT", "https://u:pw@mirror.example.com", f"https://u:{MASK}@mirror.example.com"),
        ("NCCL_DEBUG", "INFO", "INFO"),
        ("SOME_VAR", HF, MASK),
    ],
)
def test_mask_env(name: str, value: str, expected: str) -> None:
    assert mask_env(name, value) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "TrainArguments(hub_token='abc', max_new_tokens=64, pad_token_id=5)",
            f"TrainArguments(hub_token='{MASK}', max_new_tokens=64, pad_token_id=5)",
        ),
        ('{"api_key": "xyz", "eos_token": "<|im_end|>"}', f'{{"api_key": "{MASK}", "eos_token": "<|im_end|>"}}'),
        (
            f"HTTPError: 401 for url https://bob:hunter2@hub/x?t={HF}",
            f"HTTPError: 401 for url https://bob:{MASK}@hub/x?t={MASK}",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory", "torch.OutOfMemoryError: CUDA out of memory"),
    ],
)
def test_mask_text(line: str, expected: str) -> None:
    assert mask_text(line) == expected


def _settings() -> Settings:
    return Settings(micro_batch=2, grad_accum=2, world_size=2)


def _records() -> list[AttemptRecord]:
    command = ["python", "-m", "torch.distributed.run", "w.py", "--model", "m", "--hub_token", HF]
    failure = Failure(FailureKind.USER_ERROR, (f"ValueError: bad hub_token={HF} for https://u:pw@h/x",), 0, 1)
    first = AttemptRecord(1, _settings(), command, {"HF_TOKEN": "t", "X": SK}, "l", "s", failure=failure)
    second = AttemptRecord(2, _settings(), command, {}, "l", "s", change="a change", change_reason="why")
    return [first, second]


def test_report_json_and_summary_hold_no_secret(tmp_path: Path) -> None:
    attempts = _records()
    result = RunResult("failed", attempts, 1, "gave up")
    argv = ["--max-attempts", "2", "--model", "m", "--hub_token", HF, "--api_key=plain-secret"]
    text = json.dumps(report_json(attempts, result, argv)) + summary(result, tmp_path / "report.json")
    for secret in (HF, SK, "plain-secret", ":pw@", '"t"'):
        assert secret not in text
    data = report_json(attempts, result, argv)
    assert data["safe_sft_argv"][-3:] == ["--hub_token", MASK, f"--api_key={MASK}"]
    assert data["attempts"][0]["command"][-2:] == ["--hub_token", MASK]
    assert data["attempts"][0]["env_set"] == {"HF_TOKEN": MASK, "X": MASK}


def test_report_command_shows_each_attempts_lines_once(tmp_path: Path) -> None:
    attempts = _records()
    data = report_json(attempts, RunResult("failed", attempts, 1, "gave up"), [])
    text = render_report({**data, "_path": "r"})
    assert text.count("attempt 1 user_error:") == 1
    assert text.count("attempt 2: a change (why)") == 1
    assert HF not in text


def test_plan_and_explain_through_the_cli_hold_no_secret(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=60)

    swift = ["--model", "m", "--use_cpu", "true", "--hub_token", HF, "--dataset", "https://a:b@h/d.jsonl"]
    for args in (["plan", *swift], ["plan", "--json", *swift]):
        result = cli(*args)
        assert result.returncode == 0, result.stderr
        assert HF not in result.stdout + result.stderr and "a:b@" not in result.stdout
        assert f"a:{MASK}@h/d.jsonl" in result.stdout
    log = tmp_path / "train.log"
    log.write_text(f"[rank0]: ValueError: hub_token={HF} is not valid\n")
    for args in (["explain", str(log)], ["explain", "--json", str(log)]):
        result = cli(*args)
        assert HF not in result.stdout and "ValueError" in result.stdout
