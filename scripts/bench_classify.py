"""Measure the classifier on corpora of real failure logs: a confusion matrix and per-kind accuracy.

    python scripts/bench_classify.py [CORPUS_DIR ...] [--markdown] [--big-log]

Each corpus dir holds logs and an index.jsonl (file, label, repo, number, ...), as tests/data/real/ does.
Each log goes through `safe-sft explain`'s own path (launcher.explain.explain_logs). Printed per corpus:
accuracy, per-kind recall, the confusion matrix, and the safety counts the classifier must keep at 0:
user errors called retryable, OOMs called user errors, `unknown` where the log holds a signal.
--big-log also times three 200 MB logs (seconds and peak RSS of a separate `safe-sft explain` process for
each: training chatter, a log whose every line holds a keyword, a log without line breaks) and the
start-up of `safe-sft explain`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.explain import explain_logs  # noqa: E402
from launcher.model import FailureKind  # noqa: E402
from launcher.plan.degrade import GIVE_UP_KINDS  # noqa: E402
from launcher.run.launcher_output import parse_launcher_output  # noqa: E402

OOM_KINDS = {"cuda_oom", "cuda_oom_load", "cuda_oom_save", "host_oom"}
RETRYABLE = {kind.value for kind in FailureKind if kind not in GIVE_UP_KINDS and kind is not FailureKind.DISK_FULL}


def load_index(corpus: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (corpus / "index.jsonl").read_text().splitlines() if line.strip()]


def classify_corpus(corpus: Path) -> list[tuple[dict[str, object], str, bool]]:
    """(index row, predicted kind, whether the log holds a signal the parser reads) for every log."""
    results = []
    for row in load_index(corpus):
        path = corpus / str(row["file"])
        failure, _ = explain_logs([str(path)])
        predicted = "none" if failure is None else failure.kind.value
        lines = path.read_text(errors="replace").splitlines()
        failures = parse_launcher_output(lines).rank_failures
        # a signal is the cause where no rank failed first with an exit status of its own
        signalled = any((f.exit_code or 0) < 0 for f in failures) and not any((f.exit_code or 0) > 0 for f in failures)
        results.append((row, predicted, signalled))
    return results


def report(name: str, results: list[tuple[dict[str, object], str, bool]], markdown: bool) -> str:
    labels = sorted({str(row["label"]) for row, _, _ in results} | {p for _, p, _ in results})
    confusion = Counter((str(row["label"]), predicted) for row, predicted, _ in results)
    right = sum(n for (label, predicted), n in confusion.items() if label == predicted)
    total = len(results)
    user_retryable = sum(1 for row, p, _ in results if row["label"] == "user_error" and p in RETRYABLE)
    oom_as_user = sum(1 for row, p, _ in results if row["label"] in OOM_KINDS and p == "user_error")
    unknown_with_signal = sum(1 for _, p, signalled in results if p == "unknown" and signalled)
    out = [
        f"### {name}: {right}/{total} right ({100 * right / max(total, 1):.1f}%)",
        "",
        f"- user errors called retryable: {user_retryable}",
        f"- OOMs called user errors: {oom_as_user}",
        f"- `unknown` where the log holds a signal the parser reads: {unknown_with_signal}",
        "",
        "| label | logs | right | recall |",
        "| --- | --- | --- | --- |",
    ]
    for label in labels:
        n = sum(1 for row, _, _ in results if row["label"] == label)
        if n:
            ok = confusion[(label, label)]
            out.append(f"| {label} | {n} | {ok} | {100 * ok / n:.0f}% |")
    out += ["", "Confusion (rows: label, columns: predicted; only kinds that occur):", ""]
    out.append("| label \\ predicted | " + " | ".join(labels) + " |")
    out.append("| --- |" + " --- |" * len(labels))
    for label in labels:
        if any(row["label"] == label for row, _, _ in results):
            cells = [str(confusion[(label, p)] or "") for p in labels]
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    misses = [(row, p) for row, p, _ in results if row["label"] != p]
    if misses and not markdown:
        out += ["", "misses:"] + [f"  {row['file']}: {row['label']} -> {p}" for row, p in misses]
    return "\n".join(out)


def _lines_for_big_log() -> Iterable[str]:
    step = "{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'global_step/max_steps': '%d/999999'}\n"
    warning = "[rank3]:[W1123 10:00:00 ProcessGroupNCCL.cpp:4561] Warning: something benign, retrying\n"
    for i in range(2_100_000):
        yield step % i
        if i % 1000 == 0:
            yield warning
    yield from _save_oom()


def _lines_of_nccl_info() -> Iterable[str]:
    """NCCL_DEBUG=INFO: every line holds a keyword (NCCL), so every line is looked at."""
    line = "node01:12345:12399 [%d] NCCL INFO Channel %02d/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
    for i in range(2_800_000):
        yield line % (i % 8, i % 32)
    yield from _save_oom()


def _one_line_log() -> Iterable[str]:
    """A log with no line break until its end (a progress display that never ends its line)."""
    for _ in range(200):
        yield "x" * (1 << 20)
    yield " torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB\n"


def _save_oom() -> Iterable[str]:
    yield "[rank3]: Traceback (most recent call last):\n"
    yield '[rank3]:   File "/x/transformers/trainer.py", line 3331, in _save_checkpoint\n'
    yield "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB\n"


# One process per log, which reports its child's peak RSS: RUSAGE_CHILDREN of this process would be the
# largest of all the logs' runs.
_MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout\n"
    "print(json.dumps([time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,\n"
    "                  json.loads(out)['kind']]))\n"
)


def big_log_benchmark() -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    logs = (
        ("2.1M step lines, the OOM at the end", _lines_for_big_log),
        ("2.8M NCCL INFO lines, each a keyword line", _lines_of_nccl_info),
        ("no line break before its end", _one_line_log),
    )
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for what, make in logs:
            path = Path(tmp) / "big.log"
            with path.open("w") as handle:
                handle.writelines(make())
            size_mb = path.stat().st_size / 2**20
            command = [sys.executable, "-m", "launcher", "explain", "--json", str(path)]
            measured = subprocess.run([sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True,
                                      env=env, check=True)  # fmt: skip
            seconds, rss_kb, kind = json.loads(measured.stdout)
            lines.append(
                f"- a {size_mb:.0f} MB log ({what}): {seconds:.2f} s, peak RSS {rss_kb / 1024:.0f} MB, "
                f"classified `{kind}`"
            )
            path.unlink()
        small = Path(tmp) / "small.log"
        small.write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
        starts = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "launcher", "explain", str(small)], env=env, capture_output=True)
            starts.append(time.perf_counter() - start)
    lines.append(
        f"- `safe-sft explain` on a one-line log, whole process: median {1000 * sorted(starts)[2]:.0f} ms of 5"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="*", type=Path, default=[REPO / "tests" / "data" / "real"])
    parser.add_argument("--markdown", action="store_true", help="no list of misses")
    parser.add_argument("--big-log", action="store_true", help="also time a 200 MB log and explain's start-up")
    args = parser.parse_args()
    for corpus in args.corpora:
        print(
            report(
                str(corpus.relative_to(REPO) if corpus.is_relative_to(REPO) else corpus),
                classify_corpus(corpus),
                args.markdown,
            )
        )
        print()
    if args.big_log:
        print(big_log_benchmark())


if __name__ == "__main__":
    main()
