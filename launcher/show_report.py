"""`safe-sft report [RUN_DIR]`: read a run's report.json and show its attempts; optionally plot memory.

RUN_DIR may be a run dir (holding report.json), the `safe-sft` folder of an output dir, or the output
dir itself; the newest run is taken. The plot needs matplotlib (`pip install 'safe-sft[plot]'`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.errors import SafeSftError
from launcher.units import GiB, fmt_bytes


def find_report(path: Path) -> Path:
    """The run dir's own report.json, else the newest one below an output dir or its safe-sft folder."""
    direct = path / "report.json"
    if direct.is_file():
        return direct
    found = [c for c in (*(path / "safe-sft").glob("*/report.json"), *path.glob("*/report.json")) if c.is_file()]
    if not found:
        raise SafeSftError(
            f"no safe-sft report.json under {path}", "give a run dir, or the output dir of a safe-sft run"
        )
    return max(found, key=lambda p: p.stat().st_mtime)


def load_report(path: Path) -> dict[str, Any]:
    report_path = find_report(path)
    try:
        data: dict[str, Any] = json.loads(report_path.read_text())
    except ValueError as err:
        raise SafeSftError(
            f"{report_path} is not valid JSON ({err})", "is the run still writing it? try again"
        ) from None
    data["_path"] = str(report_path)
    return data


def _peaks(attempt: dict[str, Any]) -> str:
    memory = attempt.get("memory") or {}
    gpus = memory.get("gpus") or []
    parts = [f"GPU{g['index']} {fmt_bytes(g['peak_bytes'])}" for g in gpus]
    if memory.get("host_peak_bytes"):
        parts.append(f"host {fmt_bytes(memory['host_peak_bytes'])}")
    return ", ".join(parts) or "-"


def render_report(data: dict[str, Any]) -> str:
    lines = [f"{data['_path']}: {data['outcome']} after {len(data['attempts'])} attempt(s)"]
    header = f"  {'#':>2}  {'duration':>9}  {'exit':>5}  {'failure':<14}  {'step':>9}  memory peaks"
    lines.append(header)
    for a in data["attempts"]:
        failure = a["failure"]["kind"] if a["failure"] else "-"
        step = a["last_step"] if a["last_step"] is not None else "-"
        resumed = f"{a['resumed_from']['step']}->" if a.get("resumed_from") else ""
        duration = f"{a['duration_s']:.1f} s" if a.get("duration_s") is not None else "-"
        steps = f"{resumed}{step}"
        code = str(a["exit_code"])
        lines.append(f"  {a['number']:>2}  {duration:>9}  {code:>5}  {failure:<14}  {steps:>9}  {_peaks(a)}")
    for a in data["attempts"]:
        if a.get("change"):
            predicted = a.get("predicted_need_bytes")
            beside = f" [predicted need {fmt_bytes(predicted)} per GPU]" if predicted else ""
            lines.append(f"  attempt {a['number']}: {a['change']['what']} ({a['change']['why']}){beside}")
        if a["failure"]:
            lines.append(f"  attempt {a['number']} {a['failure']['kind']}: {a['failure']['evidence'][0][:200]}")
        imbalance = (a.get("memory") or {}).get("imbalance")
        if imbalance:
            lines.append(f"  attempt {a['number']}: {imbalance}")
    for a in data["attempts"]:
        lost = a.get("lost")
        if lost:
            lines.append(
                f"  attempt {a['number']} lost {lost['steps']} steps, {lost['seconds']:.0f} s (back to step "
                f"{lost['back_to_step']}, {lost['reload_seconds']:.0f} s of it restarting and reloading)"
            )
    total = data.get("lost_work") or {}
    if total.get("failures"):
        hours = f" = {total['gpu_hours']:.2f} GPU-hours" if total.get("gpu_hours") is not None else ""
        lines.append(
            f"  lost to {total['failures']} failure(s): {total['steps']} steps, {total['seconds']:.0f} s{hours}"
        )
    if data.get("give_up_reason"):
        lines.append(f"  gave up: {data['give_up_reason']}")
    return "\n".join(lines)


def plot_series(data: dict[str, Any]) -> dict[str, tuple[list[float], list[float]]]:
    """The lines to draw, in GiB against seconds since the first attempt began: one per GPU, and host RAM.

    Attempts follow each other on one time axis (each attempt's samples offset by its start).
    """
    series: dict[str, tuple[list[float], list[float]]] = {}
    offset = 0.0
    for a in data["attempts"]:
        memory = a.get("memory") or {}
        timeline = memory.get("timeline") or {"t": [], "gpu_used_bytes": {}, "host_used_bytes": []}
        times = [offset + t for t in timeline["t"]]
        for index, used in sorted(timeline["gpu_used_bytes"].items(), key=lambda kv: int(kv[0])):
            xs, ys = series.setdefault(f"GPU {index}", ([], []))
            xs.extend(times)
            ys.extend(u / GiB for u in used)
        xs, ys = series.setdefault("host RAM", ([], []))
        xs.extend(times)
        ys.extend(u / GiB for u in timeline["host_used_bytes"])
        offset += float(a.get("duration_s") or (timeline["t"][-1] if timeline["t"] else 0.0))
    return series


def plot_levels(data: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """The horizontal lines to draw, (label, x from, x to, GiB): per attempt its memory estimate for its own
    settings, and the GPUs' capacity across the whole run."""
    levels: list[tuple[str, float, float, float]] = []
    offset = 0.0
    capacity = 0
    for a in data["attempts"]:
        memory = a.get("memory") or {}
        timeline = memory.get("timeline") or {"t": []}
        duration = float(a.get("duration_s") or (timeline["t"][-1] if timeline["t"] else 0.0))
        estimate = a.get("estimate") or {}
        if estimate.get("gpu_need_bytes"):
            levels.append((f"estimate #{a['number']}", offset, offset + duration, estimate["gpu_need_bytes"] / GiB))
        capacity = max([capacity, *(g.get("total_bytes") or 0 for g in memory.get("gpus") or [])])
        offset += duration
    if capacity:
        levels.append(("GPU capacity", 0.0, offset, capacity / GiB))
    return levels


def plot_report(data: dict[str, Any], out: Path) -> Any:
    """Draw the memory timeline to a PNG, failures marked, each attempt's estimate and the GPUs' capacity
    as horizontal lines; returns the figure."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SafeSftError("--plot needs matplotlib", "pip install 'safe-sft[plot]'") from None
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for label, (xs, ys) in plot_series(data).items():
        ax.plot(xs, ys, label=label, linewidth=1.5)
    for label, x0, x1, level in plot_levels(data):
        capacity = label == "GPU capacity"
        ax.hlines(level, x0, x1, colors="black" if capacity else "gray", linestyles="-" if capacity else ":",
                  linewidth=1, label=label)  # fmt: skip
    offset = 0.0
    for a in data["attempts"]:
        offset += float(a.get("duration_s") or 0.0)
        if a["failure"]:
            ax.axvline(offset, color="red", linestyle="--", linewidth=1)
            ax.annotate(f"#{a['number']} {a['failure']['kind']}", (offset, 0), rotation=90, fontsize=8,
                        xytext=(3, 5), textcoords="offset points", color="red")  # fmt: skip
    ax.set_xlabel("seconds since the first attempt started")
    ax.set_ylabel("memory used (GiB)")
    ax.set_title(f"safe-sft: {data['outcome']} after {len(data['attempts'])} attempt(s)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return fig
