"""Simulate the ladders after a GPU OOM: attempts to the first settings that run, and their speed cost.

    python scripts/simulate_ladder.py [--scenarios N] [--seed S] [--no-peak]

Pure: the ladder (launcher/plan/degrade.py, launcher/plan/guided.py) and the estimate
(launcher/plan/estimate.py), no processes. Each seeded scenario draws a model (0.5B to 72B), full or LoRA,
1 to 16 GPUs of 24/40/80 GiB, micro-batch 1 to 16, max_length 1k to 32k, gradient checkpointing on or
off, a starting ZeRO rung, and a hidden error between 0.7x and 1.4x: the "true" need of any settings is
the estimate times that error, and settings run when it fits the GPU. An attempt that does not fit dies
while loading when its model states alone do not fit, else in the step; the measured peak it reports is
the GPU's capacity (what NVML shows when the allocator hits the wall), or none with --no-peak.

Three policies, side by side: the guided ladder, today's one-rung ladder, and a x0.9 micro-batch back-off
(HF's auto_find_batch_size). Only scenarios whose first attempt OOMs and where the one-rung ladder's
last rung fits are scored; N of them are drawn. Markdown, for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launcher.configs import load_templates
from launcher.model import FailureKind, Strategy
from launcher.plan.degrade import GiveUp, Settings, next_step
from launcher.plan.ds_config import zero_settings
from launcher.plan.estimate import (
    LORA_LINEARS,
    Adapters,
    TrainShape,
    estimate,
    inputs_of,
    layer_linears,
    lora_trainable_params,
    weight_parts,
)
from launcher.plan.guided import Memory, speed_cost

GiB = 1 << 30
MAX_ATTEMPTS = 10
# name: (params, hidden, layers, intermediate, heads, vocab), Qwen2.5's published configs
MODELS = {
    "0.5B": (494_000_000, 896, 24, 4864, 14, 151936),
    "1.5B": (1_540_000_000, 1536, 28, 8960, 12, 151936),
    "3B": (3_090_000_000, 2048, 36, 11008, 16, 151936),
    "7B": (7_620_000_000, 3584, 28, 18944, 28, 152064),
    "14B": (14_700_000_000, 5120, 48, 13824, 40, 152064),
    "32B": (32_500_000_000, 5120, 64, 27648, 40, 152064),
    "72B": (72_700_000_000, 8192, 80, 29568, 64, 152064),
}
STRATEGY = {
    None: Strategy.DDP,
    "zero2": Strategy.ZERO2,
    "zero3": Strategy.ZERO3,
    "zero3_offload": Strategy.ZERO3_OFFLOAD,
}
TEMPLATES = load_templates()


@dataclass(frozen=True)
class Scenario:
    model: str
    lora: bool
    gpus: int
    gpu_gib: int
    seq_len: int
    error: float
    start: Settings

    def shape(self, s: Settings) -> TrainShape:
        params, hidden, layers, inter, heads, vocab = MODELS[self.model]
        linears = layer_linears(None, hidden, hidden, hidden, inter)
        trainable = lora_trainable_params(linears, LORA_LINEARS, layers, 8) if self.lora else params
        adapters = Adapters(inputs_of(linears, LORA_LINEARS)) if self.lora else None
        return TrainShape(
            total_params=params,
            trainable_params=trainable,
            largest_layer_params=params // layers,
            hidden_size=hidden,
            num_layers=layers,
            vocab_size=vocab,
            micro_batch=s.micro_batch,
            seq_len=s.max_length or self.seq_len,
            gradient_checkpointing=s.gradient_checkpointing,
            gpus_per_node=min(self.gpus, 8),
            nnodes=max(self.gpus // 8, 1),
            intermediate_size=inter,
            num_heads=heads,
            adapters=adapters,
        )

    def need(self, s: Settings) -> int:
        zero = zero_settings(TEMPLATES[s.deepspeed], MODELS[self.model][1]) if s.deepspeed else None
        return estimate(STRATEGY[s.deepspeed], self.shape(s), None, None, zero).gpu_need_bytes

    def states(self, s: Settings) -> int:
        zero = zero_settings(TEMPLATES[s.deepspeed], MODELS[self.model][1]) if s.deepspeed else None
        return sum(weight_parts(STRATEGY[s.deepspeed], self.shape(s), zero).values())

    @property
    def capacity(self) -> int:
        return self.gpu_gib * GiB

    def runs(self, s: Settings) -> bool:
        return self.need(s) * self.error <= self.capacity

    def phase(self, s: Settings) -> FailureKind:
        return FailureKind.CUDA_OOM_LOAD if self.states(s) * self.error > self.capacity else FailureKind.CUDA_OOM


def draw(rng: random.Random) -> Scenario:
    model = rng.choice(list(MODELS))
    lora = rng.random() < 0.5
    gpus = rng.choice([1, 2, 4, 8, 16])
    micro = rng.choice([1, 2, 4, 8, 16])
    zero = rng.choice([None, "zero2", "zero2", "zero3"]) if gpus > 1 else rng.choice([None, "zero2"])
    start = Settings(
        micro_batch=micro,
        grad_accum=max(1, 64 // (micro * gpus)),
        world_size=gpus,
        gradient_checkpointing=rng.random() < 0.5,
        deepspeed=zero,
    )
    return Scenario(
        model, lora, gpus, rng.choice([24, 40, 80]), rng.choice([1024, 2048, 4096, 8192, 16384, 32768]),
        rng.uniform(0.7, 1.4), start,
    )  # fmt: skip


Policy = Callable[[Scenario, Settings, FailureKind, list[FailureKind]], Settings | None]


def one_rung(_: Scenario, s: Settings, kind: FailureKind, history: list[FailureKind]) -> Settings | None:
    step = next_step(s, kind, history)
    return None if isinstance(step, GiveUp) else step.settings


def guided(with_peak: bool) -> Policy:
    failed: list[Settings] = []

    def policy(sc: Scenario, s: Settings, kind: FailureKind, history: list[FailureKind]) -> Settings | None:
        if not history:
            failed.clear()
        floor = max((sc.capacity / sc.need(f) for f in failed), default=0.0)
        failed.append(s)
        memory = Memory(sc.need, sc.capacity, sc.capacity if with_peak else None, floor=floor)
        step = next_step(s, kind, history, memory=memory)
        return None if isinstance(step, GiveUp) else step.settings

    return policy


def back_off(_: Scenario, s: Settings, kind: FailureKind, history: list[FailureKind]) -> Settings | None:
    micro = int(s.micro_batch * 0.9)  # accelerate's find_executable_batch_size
    return None if micro < 1 else replace(s, micro_batch=micro)


def play(sc: Scenario, policy: Policy) -> tuple[int | None, float | None]:
    """Attempts to the first settings that run and their speed cost; (None, None) when none ran."""
    s, history = sc.start, []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        if sc.runs(s):
            return attempt, speed_cost(sc.start, s)
        kind = sc.phase(s)
        new = policy(sc, s, kind, history)
        if new is None:
            return None, None
        history.append(kind)
        s = new
    return None, None


def pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(int(q * len(ordered)), len(ordered) - 1)])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", type=int, default=300)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--no-peak", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    scenarios: list[Scenario] = []
    drawn = 0
    while len(scenarios) < args.scenarios:
        sc = draw(rng)
        drawn += 1
        if sc.runs(sc.start) or play(sc, one_rung)[0] is None:
            continue  # fits at once, or nothing on the ladder fits: the same for every policy
        scenarios.append(sc)
    policies = {
        "guided ladder": guided(not args.no_peak),
        "one-rung ladder (today)": one_rung,
        "x0.9 micro-batch back-off": back_off,
    }
    results = {name: [play(sc, p) for sc in scenarios] for name, p in policies.items()}
    reference = results["one-rung ladder (today)"]
    print(f"{len(scenarios)} scenarios (seed {args.seed}, drawn {drawn}; the others fit at once or never)")
    print("measured peak: " + ("none (estimate alone)" if args.no_peak else "the GPU's capacity at the OOM"))
    print()
    print("| policy | ran | attempts median | p95 | max | mean speed cost | slower than one-rung |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, rows in results.items():
        ran = [(a, c) for a, c in rows if a is not None and c is not None]
        attempts = [a for a, _ in ran]
        slower = sum(
            1
            for (a, c), (ra, rc) in zip(rows, reference, strict=True)
            if rc is not None and (c is None or c > rc * 1.001)
        )
        print(
            f"| {name} | {len(ran)}/{len(rows)} | {statistics.median(attempts):.0f} | {pct(attempts, 0.95):.0f} "
            f"| {max(attempts)} | x{statistics.mean(c for _, c in ran):.2f} "
            f"| {slower} ({100 * slower / len(rows):.1f}%) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
