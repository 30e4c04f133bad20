"""Hold the parameter count safe-sft reads from config.json alone against real models' weights.

    python scripts/bench_model_configs.py [DIR ...]

Each DIR (default: tests/data/model_configs) holds `index.jsonl` and `files/<dir>/` (or `<dir>/`) with a
model's config.json and its weights index (tests/data/model_configs/README.md). For each unquantized model
whose config states its dtype, the reference is the index's `metadata.total_size` at that dtype; the count
is what safe-sft's probe gives for a folder holding config.json alone (launcher.probe.model_size), today's
and commit 32c1c5d's (scripts/memory_baselines/config_count_32c1c5d.py), side by side. Markdown, for
BENCHMARKS.md: the share within 2 % and 5 %, the median |error|, the models with no count, and each model
today's count misses by more than 5 %.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from memory_baselines import config_count_32c1c5d  # noqa: E402

from launcher.probe.model_size import probe_model  # noqa: E402
from launcher.probe.weight_bytes import DTYPE_BYTES  # noqa: E402

DEFAULT = REPO / "tests" / "data" / "model_configs"


def today(config_path: Path) -> int | None:
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(config_path, folder)
        return probe_model(folder, {}, Path(folder)).total_params


def before(config_path: Path) -> int | None:
    return config_count_32c1c5d.count(json.loads(config_path.read_text()))


COUNTERS: dict[str, Callable[[Path], int | None]] = {"today": today, "32c1c5d": before}


def _config(root: Path, row: dict[str, str]) -> Path:
    nested = root / "files" / row["dir"] / "config.json"
    return nested if nested.is_file() else root / row["dir"] / "config.json"


def report(root: Path) -> str:
    rows = [json.loads(line) for line in (root / "index.jsonl").read_text().splitlines() if line.strip()]
    counted = [row for row in rows if not row["quantized"] and row["torch_dtype"] in DTYPE_BYTES]
    out = [
        f"#### {root.name if root != DEFAULT else 'tests/data/model_configs'}: {len(counted)} of {len(rows)} models "
        "(the others quantized or without a dtype)",
        "",
        "| count | within 2 % | within 5 % | median abs. error | no count |",
        "| --- | --- | --- | --- | --- |",
    ]
    misses = []
    for name, counter in COUNTERS.items():
        errors: list[float] = []
        none = 0
        for row in counted:
            found = counter(_config(root, row))
            weights = int(row["total_size"]) / DTYPE_BYTES[row["torch_dtype"]]
            if not found:
                none += 1
                if name == "today":
                    misses.append(f"- {row['dir']} ({row['model_type']}): no count ({weights / 1e9:.2f}B)")
                continue
            error = found / weights - 1
            errors.append(error)
            if name == "today" and abs(error) > 0.05:
                misses.append(
                    f"- {row['dir']} ({row['model_type']}): {found / 1e9:.2f}B for {weights / 1e9:.2f}B ({error:+.1%})"
                )
        n = len(counted)
        within = [sum(abs(e) <= limit for e in errors) for limit in (0.02, 0.05)]
        median = statistics.median(abs(e) for e in errors) if errors else float("nan")
        out.append(f"| {name} | {within[0]} of {n} | {within[1]} of {n} | {median:.1%} | {none} |")
    return "\n".join([*out, "", "Today's misses (over 5 %):", "", *misses])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path, help="sets of model folders (default: tests/data/model_configs)")
    args = parser.parse_args()
    print("\n\n".join(report(root) for root in args.dirs or [DEFAULT]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
