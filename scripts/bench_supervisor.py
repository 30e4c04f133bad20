#!/usr/bin/env python3
"""Benchmarks of the run path, each measured side by side in one run:

relay     output relay throughput: a child writing 512 MB of log lines, through safe-sft's relay
          (terminal + console.log) against the child writing straight to the same sink. Target >= 0.9x.
restart   time from a failed attempt's exit to the next attempt's start. Target <= 2 s + grace period.
overhead  wall time of a real tiny run through safe-sft against `swift sft` with the same arguments
          (NPROC_PER_NODE=2, CPU). Target <= 1.05x.

  python scripts/bench_supervisor.py [relay|restart|overhead ...]
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# A chatty trainer: log lines through Python's own buffered stdout, as print() and logging write them.
WRITER = r"""
import sys
line = "[INFO:swift] {'loss': '5.8', 'grad_norm': '2.0', 'global_step/max_steps': '1/6', 'epoch': '0.25'}\n"
write = sys.stdout.write
for _ in range(int(sys.argv[1]) // len(line) + 1):
    write(line)
"""
RELAY_BYTES = 512 * 10**6


@contextlib.contextmanager
def sink(kind: str, tmp: Path) -> Iterator[BinaryIO]:
    """Where the output ends up: /dev/null, a file on disk, or a terminal (a pty drained by a reader)."""
    if kind == "devnull":
        with open(os.devnull, "wb") as handle:
            yield handle
    elif kind == "file":
        path = tmp / "terminal.log"
        with path.open("wb") as handle:
            yield handle
        path.unlink()
    else:
        master, slave = os.openpty()
        tty.setraw(slave)
        drain = threading.Thread(target=lambda: _drain(master), daemon=True)
        drain.start()
        with os.fdopen(slave, "wb", closefd=True) as handle:
            yield handle
        drain.join(timeout=5)
        os.close(master)


def _drain(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 1 << 20):
            pass


def bench_relay(runs: int = 3) -> None:
    from launcher.run.child import TrainingProcess

    argv = [sys.executable, "-c", WRITER, str(RELAY_BYTES)]
    print(f"relay: {RELAY_BYTES / 1e6:.0f} MB of log lines written by a chatty Python child, median of {runs}")
    for kind in ("pty", "file", "devnull"):
        direct, relayed = [], []
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            for _ in range(runs):
                with sink(kind, tmp) as handle:
                    start = time.perf_counter()
                    subprocess.run(argv, stdout=handle, check=True)
                    direct.append(time.perf_counter() - start)
                log = tmp / "console.log"
                with sink(kind, tmp) as handle:
                    start = time.perf_counter()
                    TrainingProcess(argv, dict(os.environ), log, handle, handle).finish()
                    relayed.append(time.perf_counter() - start)
                assert log.stat().st_size >= RELAY_BYTES
                log.unlink()
        d, r = statistics.median(direct), statistics.median(relayed)
        print(
            f"  sink {kind:<8} direct {d:6.2f} s ({RELAY_BYTES / d / 1e6:4.0f} MB/s)   through safe-sft "
            f"{r:6.2f} s ({RELAY_BYTES / r / 1e6:4.0f} MB/s, plus console.log)   ratio {d / r:.2f}x"
        )
    print("  target >= 0.90x")


FAILING_CHILD = r"""
import sys, time, pathlib
marks = pathlib.Path(sys.argv[1])
n = len(list(marks.glob("exit-*")))
if n < 3:
    print("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:")
    print("Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 1)")
    print("  traceback : Traceback (most recent call last):\n    torch.OutOfMemoryError: CUDA out of memory.")
    print("=" * 20, flush=True)
    (marks / f"exit-{n}").write_text(repr(time.time()))
    sys.exit(1)
"""


def bench_restart() -> None:
    from launcher.plan.build import LaunchPaths, build_plan
    from launcher.plan.swift_args import parse_swift_argv
    from launcher.plan.topology import TopologyRequest, resolve_topology
    from launcher.prepare import Prepared
    from launcher.probe import probe_host
    from launcher.run.child import TrainingProcess
    from launcher.run.records import RunConfig
    from launcher.run.supervisor import Supervisor

    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "wb") as sink:
        out, marks = Path(tmp) / "out", Path(tmp) / "marks"
        marks.mkdir()
        swift = parse_swift_argv(["--model", "m", "--use_cpu", "true", "--per_device_train_batch_size", "8",
                                  "--output_dir", str(out)])  # fmt: skip
        host = probe_host(Path(tmp))
        topo = resolve_topology(TopologyRequest(), {}, (), free_port=1, use_cpu=True)
        plan = build_plan(swift, topo, host, None, env={}, paths=LaunchPaths(sys.executable, "w.py", "/cfg"))
        starts: list[float] = []

        def spawn(argv: list[str], env: dict[str, str], log: Path) -> TrainingProcess:
            starts.append(time.time())
            return TrainingProcess([sys.executable, "-c", FAILING_CHILD, str(marks)], env, log, sink, sink)

        grace = 30.0
        sup = Supervisor(Prepared(swift, host, None, plan), RunConfig(5, grace), dict(os.environ),
                         run_dir=out / "safe-sft" / "bench", spawn=spawn)  # fmt: skip
        result = sup.run()
        exits = [float((marks / f"exit-{n}").read_text()) for n in range(3)]
        gaps = [starts[n + 1] - exits[n] for n in range(3)]
        print(f"restart: {len(result.attempts)} attempts ({result.outcome}); grace period {grace:.0f} s")
        print("  failure exit -> next attempt start: " + ", ".join(f"{g:.3f} s" for g in gaps))
        print(f"  worst {max(gaps):.3f} s   (target <= 2 s + grace period; the grace period is not spent when")
        print("  the failed attempt leaves no process behind)")


def bench_overhead(runs: int = 3) -> None:
    tmp = Path(tempfile.mkdtemp())
    made = subprocess.run([sys.executable, str(REPO / "scripts" / "make_tiny_model.py"), str(tmp / "tiny")],
                          capture_output=True, text=True, check=True)  # fmt: skip
    tiny = json.loads(made.stdout.strip().splitlines()[-1])
    args = ["--model", tiny["model"], "--model_type", "qwen2", "--template", "qwen", "--check_model", "false",
            "--use_cpu", "true", "--fp16", "false", "--report_to", "none", "--dataset", tiny["dataset"],
            "--tuner_type", "full", "--max_steps", "6", "--save_steps", "3",
            "--dataloader_num_workers", "0"]  # fmt: skip
    env = {**os.environ, "NPROC_PER_NODE": "2"}
    swift = str(Path(sys.executable).parent / "swift")
    timings: dict[str, list[float]] = {"swift sft": [], "safe-sft": []}
    for run in range(runs):
        for name, cmd in (("swift sft", [swift, "sft"]), ("safe-sft", [sys.executable, "-m", "launcher"])):
            start = time.perf_counter()
            subprocess.run([*cmd, *args, "--output_dir", str(tmp / f"{name[:5]}-{run}")], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            timings[name].append(time.perf_counter() - start)
    s, o = statistics.median(timings["swift sft"]), statistics.median(timings["safe-sft"])
    print(f"overhead: a real 6-step tiny run, NPROC_PER_NODE=2 on the CPU, median of {runs} (alternating)")
    print(f"  swift sft:  {s:6.2f} s   {[round(t, 2) for t in timings['swift sft']]}")
    print(f"  safe-sft:   {o:6.2f} s   {[round(t, 2) for t in timings['safe-sft']]}")
    print(f"  ratio safe-sft / swift sft: {o / s:.3f}x   (target <= 1.05x)")


if __name__ == "__main__":
    chosen = sys.argv[1:] or ["relay", "restart", "overhead"]
    for name in chosen:
        {"relay": bench_relay, "restart": bench_restart, "overhead": bench_overhead}[name]()
