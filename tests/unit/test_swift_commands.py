"""`swift sft` command lines that use swift's features, planned on assumed machines (issue 15).

tests/data/swift_commands/table.jsonl holds the command lines (written for this project; the `pub-*` rows
are ms-swift's own examples' set-ups, with the memory those examples publish and the quote it is read
from); models.json the models' shapes from their config.json. Each row says what the plan must do: a
strategy (`zero2`, `zero3`, `zero3_offload`, `device_map`), `user` (the user's own --deepspeed kept), `not_refused`
(launched, whichever strategy), or `refused` (exit 3: nothing fits whatever the data). A row with a
published figure must not be refused, and the figure must lie between what the estimate says no data
can change (`gpu_fixed_bytes`) and its worst case (`gpu_need_bytes`, every sample at max_length); a
packed run, always at its worst case, within 15 % of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.model import ModelFacts, Plan
from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.prepare import LaunchOptions, apply_assumptions
from launcher.units import GiB
from tests.conftest import host

DATA = Path(__file__).resolve().parents[1] / "data" / "swift_commands"
ROWS = [json.loads(line) for line in (DATA / "table.jsonl").read_text().splitlines() if line.strip()]
MODELS: dict[str, dict[str, Any]] = json.loads((DATA / "models.json").read_text())
PATHS = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")
STRATEGIES = ("zero2", "zero3", "zero3_offload", "device_map")
EXPECTATIONS = (*STRATEGIES, "user", "not_refused", "refused")
# The published figure may sit this far outside [fixed, worst case]: nvidia-smi style figures, GB vs GiB.
TOLERANCE = 0.15


def model_facts(key: str) -> ModelFacts:
    fields = {k: v for k, v in MODELS[key].items() if k not in ("url", "note")}
    h, i, vocab = fields["hidden_size"], fields["intermediate_size"], fields["vocab_size"]
    if fields.get("num_experts"):
        layer = 4 * h * h + fields["num_experts"] * 3 * h * fields["moe_intermediate_size"]
    else:
        layer = 4 * h * h + 3 * h * i
    return ModelFacts(name=key, source="config", largest_layer_params=max(vocab * h, layer), **fields)


def plan_for(row: dict[str, Any]) -> Plan:
    machine = row["machine"]
    nodes = machine.get("nodes")
    options = LaunchOptions(assume_gpus=machine["gpus"], assume_ram=machine["ram"], assume_nodes=nodes)
    # this machine has InfiniBand and a big GPU: neither may leak into the plan for the assumed one
    facts = apply_assumptions(host(ram_gib=8, ib=("mlx5_0",)), options)
    swift = parse_swift_argv(["--model", row["model"], *row["argv"]])
    env = row["env"]
    request = TopologyRequest(nnodes=nodes, allow_loopback_master=True) if nodes else TopologyRequest()
    topology = resolve_topology(request, env, facts.gpus.gpus, free_port=1)
    rung = swift.get("deepspeed")
    return build_plan(
        swift, topology, facts, model_facts(row["model"]), env=env, paths=PATHS,
        options=PlanOptions(user_deepspeed_rung=rung if rung in STRATEGIES else None),
    )  # fmt: skip


def test_the_table_has_forty_rows_or_more_each_checkable() -> None:
    assert len(ROWS) >= 40
    assert len({row["id"] for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert row["expect"] in EXPECTATIONS, row["id"]
        assert row["model"] in MODELS, row["id"]
        if "published" in row:
            assert row["expect"] != "refused", f"{row['id']}: a published, working set-up"
            assert row["published"]["url"].startswith("https://github.com/modelscope/ms-swift/blob/")
            assert row["published"]["quote"]


# Published figures the estimate misses by more than TOLERANCE, each with why; strict, so a fix shows.
KNOWN_MISSES: dict[str, str] = {
    # none now: the packed 7B zero3 run (pub-7b-full-zero3-packing) was 15.9 % above its published 54 GB
    # until the optimizer step's fp32 gradients stopped being added to the logits they never coexist with
}


def _rows() -> list[object]:
    marks = {row_id: [pytest.mark.xfail(reason=why, strict=True)] for row_id, why in KNOWN_MISSES.items()}
    return [pytest.param(row, id=row["id"], marks=marks.get(row["id"], [])) for row in ROWS]


@pytest.mark.parametrize("row", _rows())
def test_swift_command_on_an_assumed_machine(row: dict[str, Any]) -> None:
    plan = plan_for(row)
    expect = row["expect"]
    if expect == "refused":
        assert not plan.fits, plan.strategy_reason
        assert "nothing fits whatever the data" in plan.strategy_reason
    else:
        assert plan.fits, f"refused: {plan.strategy_reason}"
    if expect in STRATEGIES:
        assert plan.strategy == expect, plan.strategy_reason
    if expect == "user":
        assert plan.strategy == row["argv"][row["argv"].index("--deepspeed") + 1]
        assert plan.deepspeed_arg is None  # the user's own --deepspeed stays as given
    if plan.fits and expect != "user":
        chosen = next(e for e in plan.estimates if e.strategy.value == plan.strategy)
        worst_case_warned = any("at the worst case" in w for w in plan.warnings)
        assert chosen.fits or (chosen.fixed_fits and worst_case_warned), plan.warnings
    # the assumed machine's network is not this one's
    assert "NCCL_IB_DISABLE" not in plan.env_dict() or row["machine"]["gpus"] == ""
    published = row.get("published")
    if published:
        chosen = next(e for e in plan.estimates if e.strategy.value == plan.strategy)
        figure = published["gib_per_gpu"] * GiB
        fixed = chosen.gpu_fixed_bytes or 0
        assert fixed <= figure * (1 + TOLERANCE), (
            f"the estimate's fixed {fixed / GiB:.1f} GiB > published {published['gib_per_gpu']} GiB"
        )
        assert figure <= chosen.gpu_need_bytes * (1 + TOLERANCE), (
            f"the worst case {chosen.gpu_need_bytes / GiB:.1f} GiB < published {published['gib_per_gpu']} GiB"
        )
        if "--packing" in row["argv"]:
            # packing fills every micro-batch to max_length: the worst case is the run's real case
            assert abs(chosen.gpu_need_bytes / figure - 1) <= TOLERANCE, (
                f"packed: estimate {chosen.gpu_need_bytes / GiB:.1f} GiB vs published {published['gib_per_gpu']} GiB"
            )
