"""The --ddp_timeout safe-sft adds for its watchdog: only with the watchdog on, never over the user's,
and said in `plan` (at the argv level: what swift receives)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
from launcher.plan.settings import plan_swift_args
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.plan.watchdog import Watchdog, added_ddp_timeout
from tests.conftest import host


@pytest.mark.parametrize(
    ("argv", "watchdog", "added"),
    [
        pytest.param([], Watchdog(), 7200, id="defaults-twice-the-startup-allowance"),
        pytest.param([], Watchdog(hang_timeout=5000, startup_timeout=600), 10000, id="twice-the-larger"),
        pytest.param([], Watchdog(hang_timeout=60, startup_timeout=0), 120, id="no-startup-limit"),
        pytest.param([], Watchdog(hang_timeout=0), None, id="watchdog-off-leaves-swifts-default"),
        pytest.param(["--ddp_timeout", "300"], Watchdog(), None, id="the-users-value-wins"),
        pytest.param(["--ddp-timeout=300"], Watchdog(), None, id="in-either-spelling"),
    ],
)
def test_added_ddp_timeout(argv: list[str], watchdog: Watchdog, added: int | None) -> None:
    value, note = added_ddp_timeout(parse_swift_argv(["--model", "m", *argv]), watchdog)
    assert value == added
    assert (note is not None) is (added is not None)
    if note:
        assert note.startswith(f"--ddp_timeout {added} added") and "--hang-timeout 0" in note


def swift_argv_of(argv: list[str], watchdog: Watchdog) -> tuple[tuple[str, ...], tuple[str, ...]]:
    swift = parse_swift_argv(["--model", "m", "--use_cpu", "true", *argv])
    topo = resolve_topology(TopologyRequest(), {}, (), free_port=1, use_cpu=True)
    plan = build_plan(
        swift, topo, host((), ram_gib=24), None, env={}, paths=LaunchPaths("python", "w.py", "/cfg"),
        options=PlanOptions(watchdog=watchdog),
    )  # fmt: skip
    assert plan.swift_argv == plan_swift_args(swift, plan).argv()  # what the run path passes, too
    return plan.swift_argv, plan.notes


@pytest.mark.parametrize(
    ("argv", "watchdog", "expected_tail"),
    [
        pytest.param([], Watchdog(), ("--ddp_timeout", "7200"), id="added-at-the-end"),
        pytest.param(["--ddp_timeout", "300"], Watchdog(), ("--ddp_timeout", "300"), id="the-users-kept-in-place"),
        pytest.param([], Watchdog(hang_timeout=0), ("--use_cpu", "true"), id="nothing-with-the-watchdog-off"),
    ],
)
def test_the_plans_argv(argv: list[str], watchdog: Watchdog, expected_tail: tuple[str, ...]) -> None:
    swift_argv, notes = swift_argv_of(argv, watchdog)
    assert swift_argv[-2:] == expected_tail
    assert swift_argv.count("--ddp_timeout") == (0 if watchdog.hang_timeout == 0 else 1)
    assert any(n.startswith("--ddp_timeout") for n in notes) is (expected_tail == ("--ddp_timeout", "7200"))


def test_plan_says_so_and_hang_timeout_0_turns_it_off() -> None:
    def plan(*own: str) -> dict:  # type: ignore[type-arg]
        args = [*own, "--json", "--model-params", "1e8", "--model", "m", "--use_cpu", "true"]
        done = subprocess.run([sys.executable, "-m", "launcher", "plan", *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    on, short, off = plan(), plan("--hang-timeout", "60", "--startup-timeout", "100"), plan("--hang-timeout", "0")
    assert on["command"][-2:] == ["--ddp_timeout", "7200"] and on["ddp_timeout_arg"] == "7200"
    assert any(note.startswith("--ddp_timeout 7200 added") for note in on["notes"])
    assert short["command"][-2:] == ["--ddp_timeout", "200"]
    assert "--ddp_timeout" not in off["command"] and not any("ddp_timeout" in n for n in off["notes"])


def test_a_scripts_timeout_goes_to_its_worker_not_on_its_command_line(tmp_path: Path) -> None:
    """A script's own argparse refuses an option it does not know: plain torchrun runs it, and safe-sft's
    --ddp_timeout had stopped it on "unrecognized arguments"."""
    script = tmp_path / "train.py"
    script.write_text("")

    def plan(*own: str) -> dict:  # type: ignore[type-arg]
        args = ["--json", "--backend", "torchrun", "--model-params", "1e8", "--nproc", "2", str(script), *own]
        done = subprocess.run([sys.executable, "-m", "launcher", "plan", *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    found = plan("--output_dir", "o")
    assert "--ddp_timeout" not in found["command"] and found["ddp_timeout_arg"] is None
    assert found["env"]["SAFE_SFT_DDP_TIMEOUT"] == "7200"
    assert any(n.startswith("ddp_timeout 7200 set in the TrainingArguments the script builds") for n in found["notes"])
    own = plan("--output_dir", "o", "--ddp_timeout", "60")  # the user's value, on the command line as given
    assert "SAFE_SFT_DDP_TIMEOUT" not in own["env"] and own["command"][-2:] == ["--ddp_timeout", "60"]
