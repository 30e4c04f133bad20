"""`safe-sft plan` and the memlock raise on this real machine, against a real tiny model."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import fields

import pytest

from launcher.cli import COMMANDS


def safe_sft(*args: str, preexec=None) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=preexec,
    )


def test_plan_prints_exact_param_count_from_safetensors(tiny: dict[str, object]) -> None:
    result = safe_sft("plan", "--model", str(tiny["model"]), "--dataset", str(tiny["dataset"]), "--use_cpu", "true")
    assert result.returncode == 0, result.stderr
    assert f"{tiny['params']:,} exact, from safetensors headers" in result.stdout
    plan = json.loads(safe_sft("plan", "--json", "--model", str(tiny["model"]), "--use_cpu", "true").stdout)
    assert plan["model"]["total_params"] == tiny["params"]
    assert plan["strategy"] is None and "CPU training" in plan["strategy_reason"]


def test_memlock_soft_limit_is_raised_to_hard_in_a_real_child() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    low = 64 * 1024
    if hard != resource.RLIM_INFINITY and hard <= low:
        pytest.fail(f"this machine's hard memlock limit {hard} is too low to lower the soft limit below it")

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (low, hard))

    result = safe_sft(
        "plan", "--json", "--assume-gpus", "1x80GiB", "--model-params", "1e9", "--model", "m", preexec=lower
    )
    assert result.returncode == 0, result.stderr
    memlock = json.loads(result.stdout)["memlock"]
    assert memlock["soft_before"] == low
    expected_hard = "unlimited" if hard == resource.RLIM_INFINITY else hard
    assert memlock["soft"] == memlock["hard"]
    if expected_hard == "unlimited" or memlock["hard"] == "unlimited":
        assert memlock["problem"] is None
    else:
        # This machine's case: hard limit 8 MiB that even root cannot raise. The fix must be shown.
        assert memlock["hard"] == expected_hard
        assert "cannot raise" in memlock["problem"]
        doctor = safe_sft("doctor", preexec=lower)
        assert "--ulimit memlock=-1" in doctor.stdout and "PropagateResourceLimits" in doctor.stdout
        # root that cannot raise it (no CAP_SYS_RESOURCE): `ulimit -l unlimited` fails here too, so the fix is
        # where the container starts (hostile45report F8)
        as_root = os.geteuid() == 0
        assert ("CAP_SYS_RESOURCE" in doctor.stdout) == as_root
        assert ("`ulimit -l unlimited`" in doctor.stdout) != as_root


def test_safe_sft_options_never_collide_with_swift_or_transformers(stack_installed: None) -> None:
    from swift.arguments import RLHFArguments, SftArguments

    names: set[str] = set()
    for cls in (SftArguments, RLHFArguments):
        for field in fields(cls):
            names |= {f"--{field.name}", f"--{field.name.replace('_', '-')}"}
    ours = {
        opt
        for command, _ in COMMANDS.values()
        for param in command.params
        for opt in getattr(param, "opts", [])
        if opt.startswith("--")
    }
    assert ours, "no safe-sft options found"
    assert not ours & names


def test_no_swift_or_transformers_argument_is_taken_for_a_misspelt_safe_sft_option(stack_installed: None) -> None:
    from swift.arguments import RLHFArguments, SftArguments

    from launcher.cli import check_swift_argv

    names = sorted(
        {f"--{f.name}" for cls in (SftArguments, RLHFArguments) for f in fields(cls)}
        | {f"--{f.name.replace('_', '-')}" for cls in (SftArguments, RLHFArguments) for f in fields(cls)}
    )
    assert len(names) > 400
    for command in ("run", "plan"):
        for name in names:
            check_swift_argv(COMMANDS[command][0], ["--model", "m", name, "1"])  # raises on a false "did you mean"
