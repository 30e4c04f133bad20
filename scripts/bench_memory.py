"""Hold the memory estimates against tables of published, measured runs.

    python scripts/bench_memory.py [TABLE ...] [--summary | --scales]

For each table (default: the joined table, tests/data/calibration/*.jsonl as one) and each estimator (the
new estimate in launcher/plan/estimate.py, the estimate at commit 566cec5, DeepSpeed's estimate_zero2/zero3 functions,
accelerate's estimate-memory rule): the fit/OOM agreement, the rows where the estimate says "fits" and
the source ran out of GPU memory, the median estimate/measured ratio and the share within 15 % (rows
with a peak below the card), and the at-the-limit rows (peak >= 95 % of the card) where the estimate is
more than 10 % low. Then, for the new estimate, the same per source group and the rows it calls wrong.
Markdown, for BENCHMARKS.md. Measurement only: nothing is fitted here (scripts/fit_memory.py fits).
--summary prints only the estimators' lines (for a held-out table whose rows stay out of the repository).
--scales prints the new estimate multiplied by one factor for every row (SCALES), and the factor each OOM row
would need to be called OOM: what no uniform correction of the estimate can reach, since a constant is
what a fit could change.
Rows without a card size, a model size, a GPU count or a figure are counted in the title and not scored.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_memory import HEADER, line
from memory_calibration import ESTIMATORS, JOINED, Row, estimate_new, load, load_all, score


def report(paths: Sequence[Path], summary: bool = False) -> str:
    rows = load(paths)
    skipped = len(load_all(paths)) - len(rows)
    sources = sorted({row.source for row in rows})
    name = " + ".join(f"{path.parent.name}/{path.name}" for path in paths)
    title = f"### {name}: {len(rows)} runs from {len(sources)} source groups"
    if skipped:
        title += f" ({skipped} more without a card size, a model size, a GPU count or a figure: not scored)"
    out = [title, "", HEADER]
    for name, estimator in ESTIMATORS.items():
        out.append(line(name, score(rows, estimator)))
    if summary:
        return "\n".join(out)
    out += ["", "The new estimate per source group:", "", HEADER]
    for source in sources:
        out.append(line(source, score([row for row in rows if row.source == source], estimate_new)))
    wrong = []
    for row in rows:
        est = estimate_new(row)
        if est is None:  # a device_map row without the shapes to place its layers
            continue
        fits = est <= row.card_gib
        peak = row.measured_gib
        if row.oom and fits:
            wrong.append(
                f"- {row.id}: estimate {est:.1f} GiB fits a {row.card_gib:g} GiB card, the run ran out of memory"
            )
        elif not row.oom and not fits:
            wrong.append(f"- {row.id}: estimate {est:.1f} GiB > {row.card_gib:g} GiB card, measured {peak:.1f} GiB")
    out += ["", f"Rows where the new estimate calls fit/OOM wrong ({len(wrong)}):", "", *wrong]
    return "\n".join(out)


# the uniform factors --scales holds the estimate to: a margin a fit could take, a few times over
SCALES = (0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0)


def scales(paths: Sequence[Path]) -> str:
    """The new estimate times each factor in SCALES, scored; then how many OOM rows each factor calls OOM."""
    rows = load(paths)
    out = [HEADER]
    for factor in SCALES:

        def scaled(row: Row, factor: float = factor) -> float | None:
            est = estimate_new(row)
            return None if est is None else est * factor

        out.append(line(f"new x {factor:g}", score(rows, scaled)))
    needed = sorted(row.card_gib / est for row in rows if row.oom and (est := estimate_new(row)))
    above = [f for f in needed if f > 1]
    out += [
        "",
        f"The factor each of the {len(needed)} OOM rows needs before the estimate exceeds its card: "
        f"{len(above)} need more than 1, the largest {max(above, default=1):.2f}; "
        + ", ".join(f"{f:.2f}" for f in above),
    ]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="*", type=Path, help="JSON Lines tables (default: the joined table)")
    parser.add_argument("--summary", action="store_true", help="only the estimators' lines")
    parser.add_argument("--scales", action="store_true", help="the new estimate under uniform factors")
    args = parser.parse_args()
    missing = [str(path) for path in args.tables if not path.is_file()]
    if missing:
        parser.error(f"no such table: {', '.join(missing)}")
    summary = args.summary
    tables = [[path] for path in args.tables] or [list(JOINED)]
    if args.scales:
        print("\n\n".join(scales(table) for table in tables))
        return 0
    print("\n\n".join(report(table, summary) for table in tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
