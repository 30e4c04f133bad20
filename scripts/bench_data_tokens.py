"""Hold safe-sft's token estimate of real datasets against swift's own encoding with real tokenizers.

    python scripts/bench_data_tokens.py [DIR ...]

Each DIR (default: tests/data/datasets) holds `index.jsonl` and the dataset files (in `files/` or beside
it). For every file: whether safe-sft reads as many rows as swift's loader loads; for every text-only
file and each tokenizer of tests/data/tokenizers (Qwen3's with swift's `qwen` template, Llama-2's with
its `llama` template, Falcon's with `qwen`): the estimate / real tokens at the 50th, 95th and 100th
percentile (scripts/data_tokens.py). Markdown, for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from data_tokens import REPO, Encoder, compare, estimated

from launcher.plan.data_lengths import wide_char_tokens

DEFAULT = REPO / "tests" / "data" / "datasets"
TOKENIZERS = REPO / "tests" / "data" / "tokenizers"
# name: (folder, swift template, config family that picks the tokenizer class, the model's own
# (model_type, vocab_size), which the estimate's rate for wide characters is chosen by)
FAMILIES = {
    "Qwen3 (151k), qwen": ("root-hypercube__qwen3-mlx", "qwen", "qwen2", ("qwen3", 151_936)),
    "Llama-2 (32k), llama": ("Radhikabhrara__llama_chatbot", "llama", "llama", ("llama", 32_000)),
    "Falcon (65k), qwen": ("Decentralised-AI__falcon-40b", "qwen", "llama", ("falcon", 65_024)),
}


def _file(root: Path, name: str) -> Path:
    nested = root / "files" / name
    return nested if nested.is_file() else root / name


def report(root: Path) -> str:
    rows = [json.loads(line) for line in (root / "index.jsonl").read_text().splitlines() if line.strip()]
    text = [row for row in rows if not row["multimodal"]]
    out = [f"#### {root.name}: {len(rows)} files, {len(text)} of them text only", ""]
    out += ["| tokenizer, template | files whose rows agree | est/real p50 (median over files) | "
            "files with p95 and p100 >= 0.9 | lowest p100 |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, (folder, template, family, model) in FAMILIES.items():
        wide = wide_char_tokens(*model)
        estimates = {row["file"]: estimated(_file(root, row["file"]), wide, template) for row in rows}
        encoder = Encoder(TOKENIZERS / folder, template, family)
        try:
            agree, p50s, safe, lowest = 0, [], 0, float("inf")
            for row in rows:
                real = encoder.lengths(_file(root, row["file"])) if row in text else None
                if real is None:
                    continue
                mine = estimates[row["file"]]
                agree += (mine.rows, mine.dropped) == (real.rows, 0)
                if real.lengths and mine.lengths:
                    ratio = compare(mine, real)
                    p50s.append(ratio[50])
                    safe += ratio[95] >= 0.9 and ratio[100] >= 0.9
                    lowest = min(lowest, ratio[100])
        finally:
            encoder.close()
        median = statistics.median(p50s)
        out.append(f"| {name} | {agree} of {len(text)} | {median:.2f} | {safe} of {len(p50s)} | {lowest:.2f} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path, help="sets of dataset files (default: tests/data/datasets)")
    args = parser.parse_args()
    print("\n\n".join(report(root) for root in args.dirs or [DEFAULT]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
