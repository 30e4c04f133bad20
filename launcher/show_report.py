"""`safe-sft report [RUN_DIR]`: read a run's report.json and show its attempts; optionally plot memory.

RUN_DIR may be a run dir (holding report.json), the `safe-sft` folder of an output dir, or the output
dir itself; the newest run is taken. The plot needs matplotlib (`pip install 'safe-sft[plot]'`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from launcher.errors import SafeSftError, folder_unreadable, not_permitted
from launcher.masking import mask_text
from launcher.run.evidence import attempt_run_dir, last_logged_step
from launcher.run.lost_work import lost_line
from launcher.run.records import OUTCOMES, REPORT_SCHEMA, reason_line, set_aside_line
from launcher.units import GiB, fmt_bytes


def find_report(path: Path) -> Path:
    """_find_report(path), with a folder that cannot be listed or searched refused in one line (Python 3.11's
    is_file raises on EACCES: another user's run dir on a shared cluster)."""
    try:
        return _find_report(path)
    except OSError as err:
        raise folder_unreadable(path, err, "check its permissions") from None


def _find_report(path: Path) -> Path:
    """The report.json given, else the run dir's own, else the newest one below an output dir or its
    safe-sft folder."""
    fix = "give a run dir, or the output dir of a safe-sft run"
    if not path.exists():
        leads_nowhere = path.is_symlink()  # a loop, or a target that is gone
        raise SafeSftError(f"{path} {'is a symlink that leads nowhere' if leads_nowhere else 'does not exist'}", fix)
    if path.is_file():
        return path
    if not path.is_dir():
        raise SafeSftError(f"{path} is neither a file nor a folder (a FIFO or a device)", fix)
    direct = path / "report.json"
    if direct.is_file():
        return direct
    records = path / "safe-sft"
    found = _reports_below(path)
    if not found:  # the trainer's run dir the summary prints (swift's v<N>-<time>): the report that ran there
        found = [c for c in (path.parent / "safe-sft").glob("*/report.json") if _ran_in(c, path)]
    if not found and records.is_dir() and not os.access(records, os.R_OK | os.X_OK):  # glob skips it silently
        raise not_permitted(f"cannot read {records}: Permission denied for this user", records)
    if not found:
        raise SafeSftError(
            f"no safe-sft report.json under {path}", "give a run dir, or the output dir of a safe-sft run"
        )
    return max(found, key=lambda p: p.stat().st_mtime)


def _reports_below(path: Path) -> list[Path]:
    """The runs' report.json files of an output dir (in its safe-sft folder) or of that folder itself."""
    return [c for c in (*(path / "safe-sft").glob("*/report.json"), *path.glob("*/report.json")) if c.is_file()]


def other_runs(path: Path, shown: Path) -> str | None:
    """Where `path` is an output dir (or its safe-sft folder) that holds more runs than the one `shown`: one
    line naming them, oldest first, with their outcomes, and how to show one. None otherwise."""
    records = path / "safe-sft" if (path / "safe-sft").is_dir() else path
    try:
        found = [c for c in _reports_below(path) if c.resolve() != shown.resolve()]
        found.sort(key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    if not found:
        return None
    # another node's record of this very run (several nodes write theirs to the shared output dir) trained in
    # the run dir this one did: it is no earlier run
    final = _final_run_dir(shown)
    nodes = [c for c in found if final is not None and _ran_in(c, final)]
    earlier = [c for c in found if c not in nodes]
    lines = []
    if nodes:
        named = ", ".join(f"{c.parent.name} ({_outcome_of(c)})" for c in nodes)
        lines.append(f"  the other node(s) of this run: {named}")
    if earlier:
        named = ", ".join(f"{c.parent.name} ({_outcome_of(c)})" for c in earlier)
        lines.append(f"  {len(earlier)} earlier run(s) in {records}: {named}")
    return "\n".join(lines) + f"; `safe-sft report {records}/<run>` shows one"


def _final_run_dir(report: Path) -> Path | None:
    final = (_record(report) or {}).get("final_run_dir")
    return Path(final) if isinstance(final, str) and final else None


def _record(report: Path) -> dict[str, Any] | None:
    """A report.json as a JSON object; None where it cannot be read as one."""
    try:
        data = json.loads(report.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _outcome_of(report: Path) -> str:
    data = _record(report)
    if data is None:
        return "unreadable"
    outcome = data.get("outcome")
    if outcome == "running" and isinstance(data.get("process"), dict) and _still_running(data["process"]) is False:
        return "killed"
    return outcome if isinstance(outcome, str) and outcome in OUTCOMES else "unreadable"


def _ran_in(report: Path, run_dir: Path) -> bool:
    """Whether a report's run trained in `run_dir` (its final run dir, or an attempt's)."""
    data = _record(report)
    if data is None:
        return False
    attempts = data.get("attempts")
    listed = attempts if isinstance(attempts, list) else []
    dirs = [data.get("final_run_dir"), *(a.get("run_dir") for a in listed if isinstance(a, dict))]
    here = run_dir.resolve()
    return any(isinstance(d, str) and Path(d).resolve() == here for d in dirs)


def load_report(path: Path) -> dict[str, Any]:
    """The report as a dict, its types checked for what `report` shows and plots (else a one-line error)."""
    report_path = find_report(path)
    try:
        data = json.loads(report_path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except OSError as err:
        raise SafeSftError(f"cannot read {report_path}: {err.strerror}", "check its permissions") from None
    except (ValueError, RecursionError) as err:
        why = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise SafeSftError(
            f"{report_path} is not valid JSON ({why})",
            "give the run dir of a safe-sft run: safe-sft writes its report.json whole, never in part",
        ) from None
    problem = report_problem(data)
    if problem:
        raise SafeSftError(
            f"{report_path} is not a safe-sft report (schema 1): {problem}",
            "give the run dir of a safe-sft run; see docs/report-json.md",
        )
    data["_path"] = str(report_path)
    return dict(data)


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON: a report holding one would print as JSON no strict reader takes."""
    raise ValueError(f"{name} is not a JSON number")


def _number(value: Any) -> bool:
    """A JSON number Python can draw and format: not a bool, not NaN or infinite, not past a float's range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a float's range
        return False


MAX_SECONDS = 1e12  # 31,000 years: a time past it is no run's, and matplotlib cannot place it on an axis


def _seconds(value: Any) -> bool:
    return _number(value) and 0 <= value < MAX_SECONDS


def _whole(value: Any) -> bool:
    return _number(value) and isinstance(value, int)


def _step(value: Any) -> bool:
    return _whole(value) or isinstance(value, str)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _object(value: Any) -> bool:
    return isinstance(value, dict)


# What `report` and `--plot` read of each part, and what it must be (a missing key reads as null)
_Fields = dict[str, Callable[[Any], bool]]
_ATTEMPT_FIELDS: _Fields = {
    "number": _whole,
    "exit_code": _optional(_whole),
    "duration_s": _optional(_seconds),
    "last_step": _optional(_step),
    "failure": _optional(_object),
    "resumed_from": _optional(_object),
    "change": _optional(_object),
    "memory": _optional(_object),
    "estimate": _optional(_object),
    "predicted_need_bytes": _optional(_number),
    "lost": _optional(_object),
    "preempted": _optional(_object),
    "set_aside_checkpoint": _optional(_object),
}
_LOST_FIELDS: _Fields = {
    "steps": _whole,
    "seconds": _number,
    "reload_seconds": _number,
    "back_to_step": _optional(_step),
}
_LOST_WORK_FIELDS: _Fields = {"failures": _whole, "steps": _whole, "seconds": _number, "gpu_hours": _optional(_number)}
_PROCESS_FIELDS: _Fields = {"pid": lambda pid: _whole(pid) and 0 < pid < 2**31, "host": _optional(_text)}
_PREEMPTED_FIELDS: _Fields = {"step": _step, "checkpoint": _text}
_SET_ASIDE_FIELDS: _Fields = {"path": _text, "why": _text}


def _fields_problem(data: dict[str, Any], fields: _Fields, where: str = "") -> str | None:
    for key, check in fields.items():
        if not check(data.get(key)):
            return f"{where}'{key}' is {_shown(data.get(key))}"
    return None


def report_problem(data: Any) -> str | None:
    """What in a parsed report.json has the wrong shape for `report` and `--plot`; None when nothing."""
    if not isinstance(data, dict):
        return "the top level is not an object"
    if not isinstance(data.get("outcome"), str):
        return f"'outcome' is {_shown(data.get('outcome'))}, not a string"
    if data.get("outcome") not in OUTCOMES:
        return f"'outcome' is {_shown(data.get('outcome'))}, not one of {', '.join(OUTCOMES)}"
    schema = data.get("schema")
    if schema != REPORT_SCHEMA or isinstance(schema, bool):
        return f"'schema' is {_shown(schema)}, where this safe-sft reads {REPORT_SCHEMA} (another version's report?)"
    attempts = data.get("attempts")
    if not isinstance(attempts, list):
        return f"'attempts' is {_shown(attempts)}, not a list"
    for key, fields in (("process", _PROCESS_FIELDS), ("lost_work", _LOST_WORK_FIELDS)):
        part = data.get(key)
        if part is not None and not isinstance(part, dict):
            return f"'{key}' is {_shown(part)}, not an object"
        problem = _fields_problem(part, fields, f"{key} ") if part is not None else None
        if problem:
            return problem
    if not isinstance(data.get("give_up_reason"), str | None):
        return f"'give_up_reason' is {_shown(data.get('give_up_reason'))}"
    for index, attempt in enumerate(attempts):
        problem = _attempt_problem(attempt)
        if problem:
            return f"attempts[{index}]: {problem}"
    return None


def _attempt_problem(attempt: Any) -> str | None:
    if not isinstance(attempt, dict):
        return "not an object"
    for key in ("number", "exit_code"):
        if key not in attempt:
            return f"'{key}' is missing"
    problem = _fields_problem(attempt, _ATTEMPT_FIELDS)
    if problem:
        return problem
    failure = attempt.get("failure")
    if failure is not None:
        evidence = failure.get("evidence")
        if not isinstance(failure.get("kind"), str):
            return f"failure 'kind' is {_shown(failure.get('kind'))}"
        if not isinstance(evidence, list) or not evidence or not all(isinstance(e, str) for e in evidence):
            return f"failure 'evidence' is {_shown(evidence)}, not a list of lines"
    resumed = attempt.get("resumed_from")
    if resumed is not None and not _step(resumed.get("step")):
        return f"resumed_from 'step' is {_shown(resumed.get('step'))}"
    change = attempt.get("change")
    if change is not None and not all(isinstance(change.get(k), str) for k in ("what", "why")):
        return "change 'what'/'why' are not strings"
    estimate = attempt.get("estimate")
    if estimate is not None and not _optional(_number)(estimate.get("gpu_need_bytes")):
        return f"estimate 'gpu_need_bytes' is {_shown(estimate.get('gpu_need_bytes'))}"
    for key, fields in (
        ("lost", _LOST_FIELDS),
        ("preempted", _PREEMPTED_FIELDS),
        ("set_aside_checkpoint", _SET_ASIDE_FIELDS),
    ):
        part = attempt.get(key)
        problem = _fields_problem(part, fields, f"{key} ") if part is not None else None
        if problem:
            return problem
    memory = attempt.get("memory")
    return _memory_problem(memory) if memory is not None else None


def _memory_problem(memory: dict[str, Any]) -> str | None:
    gpus = memory.get("gpus") or []
    if not isinstance(gpus, list) or not all(
        isinstance(g, dict)
        and _whole(g.get("index"))
        and _number(g.get("peak_bytes"))
        and _optional(_number)(g.get("total_bytes"))
        for g in gpus
    ):
        return "memory 'gpus' is not a list of {index, peak_bytes, total_bytes}"
    if not _optional(_number)(memory.get("host_peak_bytes")):
        return f"memory 'host_peak_bytes' is {_shown(memory.get('host_peak_bytes'))}"
    if not isinstance(memory.get("imbalance"), (str, type(None))):
        return "memory 'imbalance' is not a string"
    timeline = memory.get("timeline")
    if timeline is None:
        return None
    if not isinstance(timeline, dict):
        return "memory 'timeline' is not an object"
    t, gpu_used, host_used = timeline.get("t"), timeline.get("gpu_used_bytes"), timeline.get("host_used_bytes")
    if not _numbers(t) or not _numbers(host_used):
        return "memory 'timeline' 't' or 'host_used_bytes' is not a list of numbers"
    wrong = next((time for time in t if not _seconds(time)), None)
    if wrong is not None:
        return f"memory 'timeline' 't' holds {_shown(wrong)}, a time no run reaches"
    if not isinstance(gpu_used, dict) or not all(
        isinstance(k, str) and k.isascii() and k.isdigit() and _numbers(v) for k, v in gpu_used.items()
    ):
        return "memory 'timeline' 'gpu_used_bytes' is not {index: [bytes]}"
    if any(len(series) != len(t) for series in (host_used, *gpu_used.values())):
        return f"memory 'timeline' has {len(t)} times but a series of another length"
    return None


def _numbers(value: Any) -> TypeGuard[list[int | float]]:
    return isinstance(value, list) and all(_number(v) for v in value)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _peaks(attempt: dict[str, Any]) -> str:
    memory = attempt.get("memory") or {}
    gpus = memory.get("gpus") or []
    parts = [f"GPU{g['index']} {fmt_bytes(g['peak_bytes'])}" for g in gpus]
    even = attempt.get("gpu_evenness")
    if isinstance(even, dict) and even.get("device_map") and _number(even.get("max_over_min")):
        parts.append(f"device_map max/min {even['max_over_min']:.2f} (GPU{even.get('highest_gpu')} highest)")
    if memory.get("host_peak_bytes"):
        parts.append(f"host {fmt_bytes(memory['host_peak_bytes'])}")
    return ", ".join(parts) or "-"


def _still_running(process: dict[str, Any]) -> bool | None:
    """Whether the safe-sft process that writes a `running` report is alive; None: another host's, unknown."""
    if process.get("host") != socket.gethostname() or not isinstance(process.get("pid"), int):
        return None
    try:
        os.kill(process["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _logged_step(attempt: dict[str, Any]) -> int | None:
    """The last step an attempt's trainer logged, read from its run dir (a killed run's report never got it)."""
    log = attempt.get("log")
    return last_logged_step(attempt_run_dir(Path(log).parent)) if isinstance(log, str) else None


def render_report(data: dict[str, Any]) -> str:
    lines = [f"{data['_path']}: {data['outcome']} after {len(data['attempts'])} attempt(s)"]
    process = data.get("process")
    killed_at: int | None = None  # the step a killed run's last attempt had logged, read from its run dir
    if data["outcome"] == "running" and isinstance(process, dict):
        who = f"safe-sft pid {process.get('pid')} on {process.get('host')}, started {process.get('started')}"
        alive = _still_running(process)
        if alive is False:
            lines.append(f"  {who}, is gone: the run was killed; the attempts below are its last recorded state")
            last = data["attempts"][-1] if data["attempts"] else {}
            logged = _logged_step(last) if last and last.get("last_step") is None else None
            if logged is not None:
                lines.append(f"  attempt {last['number']} had logged step {logged} when it was killed")
                killed_at = logged
        else:
            lines.append(f"  {who}" + ("" if alive else " (on another host: not checked)"))
    header = f"  {'#':>2}  {'duration':>9}  {'exit':>5}  {'failure':<14}  {'step':>9}  memory peaks"
    lines.append(header)
    for a in data["attempts"]:
        failure = a["failure"]["kind"] if a.get("failure") else "-"
        step = a["last_step"] if a.get("last_step") is not None else "-"
        if killed_at is not None and a is data["attempts"][-1]:  # the table shows what the line above it says
            step = killed_at
        resumed = ""
        if a.get("resumed_from"):
            resumed = "0->" if a["resumed_from"].get("started_over") else f"{a['resumed_from']['step']}->"
        duration = f"{a['duration_s']:.1f} s" if a.get("duration_s") is not None else "-"
        steps = f"{resumed}{step}"
        code = str(a["exit_code"])
        lines.append(f"  {a['number']:>2}  {duration:>9}  {code:>5}  {failure:<14}  {steps:>9}  {_peaks(a)}")
    for a in data["attempts"]:
        if a.get("change"):
            predicted = a.get("predicted_need_bytes")
            beside = f" [predicted need {fmt_bytes(predicted)} per GPU]" if predicted else ""
            lines.append(f"  attempt {a['number']}: {a['change']['what']} ({a['change']['why']}){beside}")
        resume = a.get("resumed_from") or {}
        over = resume.get("started_over")
        if isinstance(over, str):
            lines.append(f"  attempt {a['number']} did not resume from step {a['resumed_from']['step']}: {over}")
        elif resume.get("weights_only") is True:  # what the console said of it (hostile46mn F6)
            why = resume.get("why_weights_only")
            because = f" ({why})" if isinstance(why, str) and why else ""
            lines.append(
                f"  attempt {a['number']} resumed step {resume.get('step')}'s weights only{because}: the optimizer "
                "and the learning-rate schedule started over"
            )
        if a.get("failure"):
            first_line = mask_text(a["failure"]["evidence"][0])[:200]
            lines.append(f"  attempt {a['number']} {a['failure']['kind']}: {first_line}")
        if a.get("set_aside_checkpoint"):
            lines.append(set_aside_line(a["number"], a["set_aside_checkpoint"]))
        imbalance = (a.get("memory") or {}).get("imbalance")
        if imbalance:
            lines.append(f"  attempt {a['number']}: {imbalance}")
        if a.get("preempted"):
            step, checkpoint = a["preempted"]["step"], a["preempted"]["checkpoint"]
            lines.append(f"  attempt {a['number']} preempted: checkpoint at step {step}: {checkpoint}")
    for a in data["attempts"]:
        lost = a.get("lost")
        if lost:
            reloading = lost["reload_seconds"]  # 0 for the last attempt: nothing restarted after it
            reload = f", {reloading:.0f} s of it restarting and reloading" if reloading else ""
            back = lost.get("back_to_step")
            where = f"back to step {back}" if back is not None else "back to a step not recorded"
            lines.append(
                f"  attempt {a['number']} lost {lost['steps']} steps, {lost['seconds']:.0f} s ({where}{reload})"
            )
    total = data.get("lost_work") or {}
    if total.get("failures"):
        lines.append(lost_line(total, interrupted=data.get("outcome") == "interrupted"))
    if data.get("give_up_reason"):
        lines.append(reason_line(data["outcome"], data["give_up_reason"]))
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


PLOT_FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg", ".jpg": "jpeg", ".jpeg": "jpeg"}
_PLOT_FIX = "give a path in a writable folder ending in .png (or .pdf, .svg, .jpg)"


def _draw(plt: Any, data: dict[str, Any], series: dict[str, tuple[list[float], list[float]]]) -> Any:
    """The figure: each series, the estimate and capacity levels, each failure marked where it ended."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, label=label, linewidth=1.5)
    for label, x0, x1, level in plot_levels(data):
        capacity = label == "GPU capacity"
        ax.hlines(level, x0, x1, colors="black" if capacity else "gray", linestyles="-" if capacity else ":",
                  linewidth=1, label=label)  # fmt: skip
    offset = 0.0
    for a in data["attempts"]:
        offset += float(a.get("duration_s") or 0.0)
        if a.get("failure"):
            ax.axvline(offset, color="red", linestyle="--", linewidth=1)
            ax.annotate(f"#{a['number']} {_printable(a['failure']['kind'])}", (offset, 0), rotation=90, fontsize=8,
                        xytext=(3, 5), textcoords="offset points", color="red")  # fmt: skip
    ax.set_xlabel("seconds since the first attempt started")
    ax.set_ylabel("memory used (GiB)")
    ax.set_title(f"safe-sft: {_printable(data['outcome'])} after {len(data['attempts'])} attempt(s)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def plot_report(data: dict[str, Any], out: Path) -> Any:
    """Draw the memory timeline to `out` (its suffix names the format), failures marked, each attempt's
    estimate and the GPUs' capacity as horizontal lines; returns the figure.

    The picture is written beside `out` and renamed onto it, so a failed write (a full disk) leaves a file
    that was there as it was, and a symlink at `out` is replaced, not written through."""
    fmt = PLOT_FORMATS.get(out.suffix.lower())
    if not out.name or fmt is None:
        raise SafeSftError(f"--plot {out}: not a picture's file name", _PLOT_FIX)
    if out.is_dir():
        raise SafeSftError(f"--plot {out}: cannot write it (Is a directory)", _PLOT_FIX)
    series = plot_series(data)
    if not any(xs for xs, _ in series.values()):
        raise SafeSftError(
            f"--plot {out}: this run recorded no memory samples, so there is nothing to draw",
            "sampling was off (--memory-sample-interval 0) or every attempt ended before its first sample",
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SafeSftError("--plot needs matplotlib", "pip install 'safe-sft[plot]'") from None
    fig = _draw(plt, data, series)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial{out.suffix}")
    try:
        fig.savefig(partial, dpi=100, format=fmt)
        os.replace(partial, out)
    except OSError as err:  # a missing or read-only dir, a file where the dir should be, a full disk
        with contextlib.suppress(OSError):  # where the write failed, the removal may fail too (ENOTDIR, EROFS)
            partial.unlink(missing_ok=True)
        raise SafeSftError(f"--plot {out}: cannot write it ({err.strerror or err})", _PLOT_FIX) from None
    finally:
        plt.close(fig)
    return fig


def _printable(text: str) -> str:
    """A report's own text for the picture: a control character has no glyph in the plot's font."""
    return "".join(c if c.isprintable() else "?" for c in text)
