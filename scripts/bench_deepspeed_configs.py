"""Read real DeepSpeed configs as `safe-sft --deepspeed FILE` reads them, on sets kept in or out of this repo.

    python scripts/bench_deepspeed_configs.py [DIR ...]

Each DIR (default: tests/data/deepspeed_configs) holds `index.jsonl` and `files/`, labelled from each file
as written (tests/data/deepspeed_configs/README.md). Per file, what the unit tier holds for the set in this
repository (tests/unit/test_real_deepspeed_configs.py):
- a strict-JSON file with a batch key is placed on the ladder at the rung its labels name;
- one with neither batch key is refused, as DeepSpeed refuses it;
- a file that is not strict JSON is refused in one line that names it;
- for a placed file that DeepSpeed's own ZeRO config class takes, every rung's copy is one it takes too,
  at the rung's stage and offload;
- nothing raises anything but safe-sft's one-line error.
Markdown, for BENCHMARKS.md: the counts, and each file that misses with why.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.configs import load_templates, read_user_deepspeed  # noqa: E402
from launcher.errors import SafeSftError  # noqa: E402
from launcher.plan.ds_config import for_rung, zero_section  # noqa: E402

DEFAULT = REPO / "tests" / "data" / "deepspeed_configs"
OFFLOADED = ("cpu", "nvme")
NO_BATCH = "sets neither train_micro_batch_size_per_gpu nor train_batch_size"


def expected_rung(row: dict[str, object]) -> str:
    """The rung a file's labels name: its stage, and whether it offloads anything in either spelling (below
    stage 3 an offload is zero2_offload, so that its next rung keeps the offload)."""
    stage = row["stage"] if isinstance(row["stage"], int) else 0
    offload = row["offload_optimizer"] in OFFLOADED or row["offload_param"] in OFFLOADED or row["cpu_offload"] is True
    if offload:
        return "zero3_offload" if stage == 3 else "zero2_offload"
    return f"zero{stage}"


def _deepspeed_takes(zero: dict[str, object]) -> bool:
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from pydantic import ValidationError

    try:
        DeepSpeedZeroConfig(**zero)
    except ValidationError:
        return False
    return True


def _copies_problem(config: dict[str, object]) -> str | None:
    """Why a rung's copy of a config DeepSpeed takes is one it does not (or is at another stage or offload)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    for rung, template in load_templates().items():
        copy = for_rung(config, template, pin_memory=True)
        if not _deepspeed_takes(copy["zero_optimization"]):
            return f"its {rung} copy is refused by DeepSpeed"
        zero = DeepSpeedZeroConfig(**copy["zero_optimization"])
        offloaded = zero.offload_optimizer is not None and zero.offload_optimizer.device != "none"
        if int(zero.stage) != template["zero_optimization"]["stage"] or offloaded is not rung.endswith("_offload"):
            return f"its {rung} copy is at stage {int(zero.stage)}, offload {offloaded}"
    return None


def judge(root: Path, row: dict[str, object]) -> tuple[str, str | None]:
    """(the outcome's kind, why it misses or None)."""
    path = root / str(row["file"])
    has_batch = row["micro_batch"] is not None or row["train_batch_size"] is not None
    try:
        config = read_user_deepspeed(str(path))
    except SafeSftError as err:
        one_line = "\n" not in err.message
        if not row["valid_json"]:
            named = err.message.startswith(f"--deepspeed {path}: not a readable JSON file (")
            return "not JSON, refused", None if named and one_line else f"refused as: {err.message[:200]}"
        if not has_batch:
            return "no batch key, refused", None if NO_BATCH in err.message and one_line else err.message[:200]
        return "placed", f"refused: {err.message[:200]}"
    except Exception as err:  # the measure: anything but safe-sft's own one-line error is a miss
        return "crashed", f"{type(err).__name__}: {err}"[:200]
    if not row["valid_json"]:
        return "not JSON, refused", "read, where strict JSON refuses it"
    if not has_batch:
        return "no batch key, refused", "read, where DeepSpeed refuses it"
    if config is None or config.rung != expected_rung(row):
        return "placed", f"placed at {config.rung if config else None}, its labels say {expected_rung(row)}"
    if _deepspeed_takes(dict(zero_section(config.config))):
        return "placed", _copies_problem(config.config)
    return "placed", None


def report(root: Path) -> str:
    rows = [json.loads(line) for line in (root / "index.jsonl").read_text().splitlines() if line.strip()]
    outcomes = [(row, *judge(root, row)) for row in rows]
    kinds = ("placed", "no batch key, refused", "not JSON, refused", "crashed")
    name = "tests/data/deepspeed_configs" if root == DEFAULT else str(root)
    right = sum(1 for _, _, why in outcomes if why is None)
    out = [
        f"#### {name}: {right} of {len(rows)} read right, from {len({r['repo'] for r in rows})} repositories",
        "",
        "| outcome | files | right |",
        "| --- | --- | --- |",
    ]
    for kind in kinds:
        these = [why for _, k, why in outcomes if k == kind]
        if these:
            out.append(f"| {kind} | {len(these)} | {sum(1 for why in these if why is None)} |")
    misses = [(row, why) for row, _, why in outcomes if why is not None]
    if misses:
        out += ["", "Misses:", ""]
        out += [f"- {row['file']} ({row['repo']}): {why}" for row, why in misses]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path, default=[DEFAULT])
    for root in parser.parse_args().dirs:
        print(report(root.resolve()))
        print()


if __name__ == "__main__":
    main()
