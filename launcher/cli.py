"""The `safe-sft` command line: click only. Parse, call, map errors to exit codes.

USAGE below is what `safe-sft --help` prints. safe-sft's own options come first; the first argument
that is not one of them starts swift's arguments (split_own_options), so no option of safe-sft can be
mistaken for one of swift's, whatever swift adds.
"""

from __future__ import annotations

import copy
import errno
import functools
import json
import os
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from launcher.cli_values import YEAR, Seconds, click_error
from launcher.errors import (
    EXIT_LOST_NODE,
    EXIT_NOTHING_FITS,
    EXIT_TRAINING_FAILED,
    EXIT_USAGE,
    SafeSftError,
    not_permitted,
)

if TYPE_CHECKING:  # the run path's modules load only when a command needs them
    from launcher.model import GlobalBatch
    from launcher.plan.notice import NoticeMark, SlurmJob
    from launcher.plan.swift_args import SwiftArgs
    from launcher.prepare import Prepared
    from launcher.run.records import AttemptRecord, RunConfig, RunResult

USAGE = """safe-sft: a drop-in replacement for `swift sft` that starts runs right and survives memory failures.

    safe-sft [OPTIONS] SWIFT_ARGS...        train as `swift sft SWIFT_ARGS` would, supervised
    safe-sft plan [OPTIONS] SWIFT_ARGS...   show the launch plan (--json for scripts)
    safe-sft torchrun [OPTIONS] [--] SCRIPT ARGS...
                                            the same for an HF-Trainer script (TrainingArguments)
                                            (its plan: safe-sft plan --backend torchrun SCRIPT ARGS...)
    safe-sft llamafactory train [OPTIONS] CONFIG [key=value ...]
                                            the same for `llamafactory-cli train CONFIG ...`
                                            (its plan: safe-sft plan --backend llamafactory CONFIG ...)
    safe-sft doctor [SWIFT_ARGS...]         preflight checks, the topology and swift's values as the run
                                            reads them (the disk check at swift's --output_dir)
    safe-sft explain LOG... | DIR | -       classify saved logs
    safe-sft report [RUN_DIR] [--plot F]    the attempts of a run (its dir, output dir or report.json),
                                            and its memory timeline

safe-sft's own options come first; the first argument that is not one of them starts swift's arguments
(`--` ends them explicitly). Every option also reads an environment variable SAFE_SFT_<NAME>.
`safe-sft COMMAND --help` lists a command's options. Exit codes: docs/exit-codes.md.
"""

LLAMAFACTORY_USAGE = (
    "use it as `safe-sft llamafactory train config.yaml [key=value ...]`; "
    "run llamafactory-cli itself for its other commands"
)
NOTHING_FITS_FIX = "take one of the options above, or pass --force to launch anyway"


# set for a command given --json (or SAFE_SFT_JSON): its error goes to stdout too, as a JSON object a script
# parses where it expected the plan, the checks or the report
_JSON_OUTPUT: list[bool] = [False]


def _print_error(err: SafeSftError, json_printed: bool = False) -> None:
    """One line naming the problem, one with the fix (a path or value holding a line break stays on its line);
    under --json also `{"error": ..., "fix": ...}` on stdout, unless the command has printed its JSON there
    (a plan whose `fits` is false): stdout holds one document."""
    click.echo(f"safe-sft: error: {_one_line(err.message)}", err=True)
    if err.hint:
        click.echo(f"safe-sft: fix: {_one_line(err.hint)}", err=True)
    if _JSON_OUTPUT[0] and not json_printed:
        click.echo(json.dumps({"error": err.message, "fix": err.hint or None}))


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Print a SafeSftError as one line plus its fix; tracebacks only with SAFE_SFT_DEBUG=1. A path the file
    system cannot hold (a name over its 255 bytes, an auto-generated experiment name) is one such error,
    wherever it is first used, as is one this user may not read or enter."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (SafeSftError, OSError) as err:
            if os.environ.get("SAFE_SFT_DEBUG") == "1":
                raise
            if isinstance(err, OSError) and err.errno not in (errno.ENAMETOOLONG, errno.EACCES, errno.EPERM):
                raise
            if isinstance(err, SafeSftError):
                known = err
            elif err.errno == errno.ENAMETOOLONG:
                known = _too_long(str(err.filename or ""))
            else:  # a file or folder this user may not read or enter (a colleague's 700 model folder, say)
                where = f"{err.filename}: " if err.filename else ""
                known = not_permitted(
                    f"{where}{err.strerror or 'permission denied'} for this user", err.filename or "PATH"
                )
            _print_error(known)
            sys.exit(known.exit_code)

    return wrapper


def _too_long(path: str) -> SafeSftError:
    longest = max((len(part.encode()) for part in Path(path).parts), default=0)
    shown = path if len(path) <= 120 else f"{path[:117]}..."
    return SafeSftError(
        f"{shown}: a name in this path has {longest} bytes, more than the file system allows",
        "shorten it (most file systems take 255 bytes a name)",
    )


def _launch_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options that shape a plan, shared by `plan` and the run path."""
    options = [
        click.option("--gpus", envvar="SAFE_SFT_GPUS", help="auto | N | comma list of GPU indices or UUIDs."),
        click.option("--nproc", type=int, envvar="SAFE_SFT_NPROC", help="Processes per node (CPU training)."),
        click.option("--nnodes", type=int, envvar="SAFE_SFT_NNODES", help="Number of nodes."),
        click.option("--node-rank", type=int, envvar="SAFE_SFT_NODE_RANK", help="This node's rank."),
        click.option("--master-addr", envvar="SAFE_SFT_MASTER_ADDR", help="Node 0's address."),
        click.option("--master-port", type=int, envvar="SAFE_SFT_MASTER_PORT", help="Node 0's port."),
        click.option(
            "--allow-loopback-master",
            is_flag=True,
            envvar="SAFE_SFT_ALLOW_LOOPBACK_MASTER",
            help="Allow MASTER_ADDR 127.0.0.1 with several nodes (all nodes on one machine).",
        ),
        click.option("--model-params", envvar="SAFE_SFT_MODEL_PARAMS", help="Parameter count, e.g. 7.6e9."),
        click.option("--nccl-env", multiple=True, envvar="SAFE_SFT_NCCL_ENV", help="KEY=VAL, overrides a default."),
        click.option("--force", is_flag=True, envvar="SAFE_SFT_FORCE", help="Launch even when nothing fits."),
        click.option(
            "--layout",
            type=click.Choice(["auto", "device_map", "processes"]),
            envvar="SAFE_SFT_LAYOUT",
            help="Several GPUs: one process with the model split over them (device_map, what swift sft does "
            "without NPROC_PER_NODE), one process per GPU (processes), or auto (the faster that fits).",
        ),
        click.option("--assume-gpus", envvar="SAFE_SFT_ASSUME_GPUS", help="Plan for other GPUs, e.g. 8x80GiB."),
        click.option("--assume-ram", envvar="SAFE_SFT_ASSUME_RAM", help="Plan for other host RAM, e.g. 512GiB."),
        click.option("--assume-nodes", type=int, envvar="SAFE_SFT_ASSUME_NODES", help="Plan for N nodes."),
        click.option(
            "--hang-timeout",
            type=Seconds(0, YEAR),
            default=1800.0,
            show_default=True,
            envvar="SAFE_SFT_HANG_TIMEOUT",
            help="Seconds without progress of any kind (step, checkpoint, progress bar) that mean a hang; "
            "0 turns the watchdog off, and with it the --ddp_timeout it adds.",
        ),
        click.option(
            "--startup-timeout",
            type=Seconds(0, YEAR),
            default=3600.0,
            show_default=True,
            envvar="SAFE_SFT_STARTUP_TIMEOUT",
            help="The same before the first training step (loading, data prep); 0: no limit.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


_BACKEND_OPTION = click.option(
    "--backend",
    type=click.Choice(["swift", "torchrun", "llamafactory"]),
    default="swift",
    show_default=True,
    envvar="SAFE_SFT_BACKEND",
    help="The trainer: swift (SWIFT_ARGS are swift sft's), torchrun (SCRIPT ARGS: an HF-Trainer script), "
    "llamafactory (CONFIG [key=value ...]: llamafactory-cli train's).",
)


def _backend(name: str) -> Any:
    from launcher.backends import BACKENDS

    return BACKENDS[name]


def _options_from(kwargs: dict[str, Any]) -> Any:
    from launcher.plan.topology import TopologyRequest
    from launcher.plan.watchdog import Watchdog
    from launcher.prepare import LaunchOptions

    topology_fields = ("gpus", "nproc", "nnodes", "node_rank", "master_addr", "master_port")
    context = click.get_current_context(silent=True)
    from_env = frozenset(
        name
        for name in topology_fields
        if context is not None and context.get_parameter_source(name) is click.core.ParameterSource.ENVIRONMENT
    )
    return LaunchOptions(
        topology=TopologyRequest(
            **{name: kwargs[name] for name in topology_fields},
            allow_loopback_master=kwargs["allow_loopback_master"],
            from_env=from_env,
        ),
        model_params=kwargs["model_params"],
        nccl_env=tuple(kwargs["nccl_env"]),
        force=kwargs["force"],
        layout=kwargs["layout"],
        assume_gpus=kwargs["assume_gpus"],
        assume_ram=kwargs["assume_ram"],
        assume_nodes=kwargs["assume_nodes"],
        watchdog=Watchdog(kwargs["hang_timeout"], kwargs["startup_timeout"]),
    )


@click.command("plan", context_settings={"help_option_names": ["--help"]}, options_metavar="[OPTIONS] SWIFT_ARGS...")
@_launch_options
@click.option("--json", "as_json", is_flag=True, envvar="SAFE_SFT_JSON", help="Print the plan as JSON.")
@click.option(
    "--explain-memory",
    is_flag=True,
    envvar="SAFE_SFT_EXPLAIN_MEMORY",
    help="Add every part of each strategy's memory estimate, and the setting that saves the most.",
)
@_BACKEND_OPTION
@click.pass_obj
@_user_errors
def plan_command(swift_argv: list[str], as_json: bool, explain_memory: bool, backend: str, **kwargs: Any) -> None:
    """Show the launch plan for SWIFT_ARGS without starting anything."""
    from launcher.prepare import prepare
    from launcher.render import plan_to_json, render_memory, render_plan
    from launcher.run.memlock import raise_memlock

    memlock = raise_memlock()
    options = _options_from(kwargs)
    prepared = prepare(swift_argv, options, os.environ, backend=_backend(backend))
    if as_json:
        click.echo(json.dumps(plan_to_json(prepared.plan, prepared.model, os.environ, memlock), indent=2))
    else:
        click.echo(render_plan(prepared.plan, prepared.model, os.environ, memlock))
        if explain_memory:
            click.echo("")
            click.echo(render_memory(prepared.plan))
    if not options.assumes_machine:  # the run path's own check of this host's ports (hostile47env F8)
        from launcher.run.ports import check_ports_free

        try:
            check_ports_free(prepared.plan.topology, kwargs.get("coord_port"))
        except SafeSftError as err:
            click.echo(f"warning: {err.message} (the run refuses to start); fix: {err.hint}", err=True)
    if not prepared.plan.fits and not kwargs["force"]:
        _print_error(SafeSftError(prepared.plan.strategy_reason, NOTHING_FITS_FIX), json_printed=as_json)
        sys.exit(EXIT_NOTHING_FITS)


@click.command(
    "doctor", context_settings={"help_option_names": ["--help"]}, options_metavar="[OPTIONS] [SWIFT_ARGS...]"
)
@click.option("--json", "as_json", is_flag=True, envvar="SAFE_SFT_JSON", help="Print the checks as JSON.")
@click.option(
    "--check-dir",
    envvar="SAFE_SFT_CHECK_DIR",
    help="Where checkpoints will go (disk check). Default: swift's --output_dir from SWIFT_ARGS, else here.",
)
@click.option("--nproc", type=int, envvar="SAFE_SFT_NPROC", help="Processes per node (CPU training), as the run's.")
@click.pass_obj
@_user_errors
def doctor_command(swift_argv: list[str], as_json: bool, check_dir: str | None, nproc: int | None) -> None:
    """Preflight checks: the topology and the swift arguments as the run reads them, GPUs, CPU cores,
    memory, memlock, /dev/shm, network, disk, versions."""
    from pathlib import Path

    from launcher.backends.swift import read
    from launcher.doctor import Status, as_the_run_reads, run_checks
    from launcher.plan.build import output_dir_of
    from launcher.plan.topology import torchrun_word
    from launcher.prepare import with_home_expanded
    from launcher.probe import probe_host
    from launcher.run.memlock import raise_memlock
    from launcher.units import parse_count

    swift = with_home_expanded(read(swift_argv).args, lexical=True) if swift_argv else None
    if check_dir is None and swift is not None:
        check_dir = output_dir_of(swift)
    nproc_text = os.environ.get("NPROC_PER_NODE")
    per_node = parse_count(nproc_text, "NPROC_PER_NODE") if nproc_text and not torchrun_word(nproc_text) else None
    memlock = raise_memlock()
    host = probe_host(Path(check_dir or "."))
    topology, bad_args = as_the_run_reads(swift, os.environ, host, nproc)
    on_cpu = not host.gpus or (swift is not None and swift.get_bool("use_cpu", False))  # gloo: no NCCL
    pins = not on_cpu or swift is None or bool(swift.get("deepspeed"))  # gloo without DeepSpeed locks nothing
    checks = run_checks(
        host, memlock, nproc=nproc or per_node, cores=host.cpu_cores, topology=topology, swift_args=bad_args,
        on_cpu=on_cpu, pins=pins,
    )  # fmt: skip
    if as_json:
        click.echo(json.dumps([{**c.__dict__, "status": c.status.value} for c in checks], indent=2))
    else:
        for check in checks:
            click.echo(f"[{check.status.value:>4}] {check.name:<11} {check.detail}")
            if check.fix and check.status is not Status.PASS:
                click.echo(f"{'':18}fix: {check.fix}")
    if any(c.status is Status.FAIL for c in checks):
        sys.exit(EXIT_TRAINING_FAILED)


@click.command("run", context_settings={"help_option_names": ["--help"]}, options_metavar="[OPTIONS] SWIFT_ARGS...")
@_launch_options
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 100),
    default=5,
    show_default=True,
    envvar="SAFE_SFT_MAX_ATTEMPTS",
    help="Attempts in all, the first included.",
)
@click.option(
    "--grace-period",
    type=Seconds(0, 3600),
    default=30.0,
    show_default=True,
    envvar="SAFE_SFT_GRACE_PERIOD",
    help="Seconds between forwarding a signal and SIGKILL.",
)
@click.option(
    "--allow-shorter-max-length",
    is_flag=True,
    envvar="SAFE_SFT_ALLOW_SHORTER_MAX_LENGTH",
    help="Let the OOM ladder halve max_length (long samples are then truncated).",
)
@click.option(
    "--download-wait",
    type=Seconds(0, 3600),
    default=30.0,
    show_default=True,
    envvar="SAFE_SFT_DOWNLOAD_WAIT",
    help="Seconds before retrying a failed download; the next retry waits four times as long.",
)
@click.option(
    "--resume-latest",
    is_flag=True,
    envvar="SAFE_SFT_RESUME_LATEST",
    help="Resume the first attempt too from the newest complete checkpoint (a requeued job).",
)
@click.option(
    "--coord-port",
    type=click.IntRange(1, 65535),
    envvar="SAFE_SFT_COORD_PORT",
    help="Port of node 0's coordination store (several nodes). Default: MASTER_PORT + 1.",
)
@click.option(
    "--run-id",
    envvar="SAFE_SFT_RUN_ID",
    help="The same on every node of one job. Default: SLURM_JOB_ID, else MASTER_ADDR:MASTER_PORT.",
)
@click.option(
    "--node-timeout",
    type=Seconds(1, YEAR),
    default=300.0,
    show_default=True,
    envvar="SAFE_SFT_NODE_TIMEOUT",
    help="Seconds any node waits for another: node 0's store at start, every node to start, reports, decisions.",
)
@click.option(
    "--memory-sample-interval",
    type=Seconds(0, 3600),
    default=5.0,
    show_default=True,
    envvar="SAFE_SFT_MEMORY_SAMPLE_INTERVAL",
    help="Seconds between GPU/host memory samples; 0: off.",
)
@click.option(
    "--requeue/--no-requeue",
    default=None,
    envvar="SAFE_SFT_REQUEUE",
    help="After a checkpoint on notice, `scontrol requeue` the job. Default: on in a Slurm job with Requeue=1.",
)
@_BACKEND_OPTION
@click.pass_obj
@_user_errors
def run_command(
    swift_argv: list[str],
    max_attempts: int,
    grace_period: float,
    allow_shorter_max_length: bool,
    download_wait: float,
    memory_sample_interval: float,
    resume_latest: bool,
    coord_port: int | None,
    run_id: str | None,
    node_timeout: float,
    requeue: bool | None,
    backend: str,
    **kwargs: Any,
) -> None:
    """Train as `swift sft SWIFT_ARGS` would, and survive memory failures."""
    from launcher.prepare import (
        check_deepspeed_installed,
        check_launchable,
        check_swift_options,
        check_trainer_installed,
        prepare,
        refuse_assumptions,
    )
    from launcher.render import render_plan
    from launcher.run.checkpoints import checkpoint_problem, latest_complete
    from launcher.run.lock import acquire
    from launcher.run.memlock import raise_memlock
    from launcher.run.open_files import raise_open_files
    from launcher.run.ports import check_ports_free
    from launcher.run.records import RunConfig
    from launcher.run.resume import only_incomplete

    options = _options_from(kwargs)
    refuse_assumptions(options)
    memlock = raise_memlock()
    raise_open_files()
    prepared = prepare(swift_argv, options, os.environ, backend=_backend(backend))
    click.echo(render_plan(prepared.plan, prepared.model, os.environ, memlock), err=True)
    check_launchable(prepared)
    resume_arg = prepared.swift.get("resume_from_checkpoint")
    problem = checkpoint_problem(Path(resume_arg)) if resume_arg else None
    if problem and resume_arg:
        given = Path(resume_arg)
        inside = latest_complete(given)[0] if given.is_dir() else None  # a run dir given for a checkpoint
        raise SafeSftError(
            f"{prepared.swift.spelled('resume_from_checkpoint')} {resume_arg} {problem}",
            f"name its newest complete checkpoint, {inside.path}"
            if inside is not None
            else "name a complete checkpoint-<step> dir, or use --resume-latest to take the newest complete one",
        )
    if resume_arg and resume_latest:
        click.echo(
            f"safe-sft: note: --resume-latest is left aside: {prepared.swift.spelled('resume_from_checkpoint')} "
            f"names the checkpoint ({resume_arg})",
            err=True,
        )
    if resume_arg and prepared.plan.strategy and not prepared.swift.get_bool("resume_only_model", False):
        check_zero_ranks(Path(resume_arg), prepared.plan.topology.world_size)
    # a trainer that resumes on its own takes the newest checkpoint, complete or not: with no complete one
    # there, refuse before anything starts (else the supervisor names the newest complete one)
    by_itself = prepared.backend.resumes_by_itself(prepared.swift)
    newest = only_incomplete(prepared.output_dir) if by_itself and not resume_arg else None
    if newest is not None:
        raise SafeSftError(
            f"{prepared.backend.name} would resume from {newest[0]}, which is incomplete ({newest[1]}), "
            f"and no complete checkpoint is in {prepared.output_dir}",
            "move the incomplete checkpoint dirs away, or set overwrite_output_dir=true to start afresh",
        )
    check_trainer_installed(prepared.backend)
    check_deepspeed_installed(prepared)
    check_swift_options(prepared.swift, prepared.backend)
    if prepared.model_error is not None:
        raise prepared.model_error
    from launcher.plan.notice import slurm_job

    job = slurm_job(os.environ)
    requeued = requeued_mark(prepared.output_dir.resolve(), job, prepared.swift)
    if resume_latest and not resume_arg and requeued is None:
        done = check_newest_checkpoint(prepared)
        if done is not None:  # a rerun or requeue after the end: exit 0, as the run it continues did
            click.echo(f"safe-sft: {done}", err=True)
            sys.exit(0)
    if not prepared.plan.fits and not kwargs["force"]:
        _print_error(SafeSftError(prepared.plan.strategy_reason, NOTHING_FITS_FIX))
        sys.exit(EXIT_NOTHING_FITS)
    topology = prepared.plan.topology
    check_ports_free(topology, coord_port)
    output_dir = prepared.output_dir.resolve()
    if topology.nnodes.value > 1:
        run_id = run_id or (job.job_id if job else f"{topology.master_addr.value}:{topology.master_port.value}")
    lock = acquire(output_dir, run_id) if topology.node_rank.value == 0 else None  # node 0 holds it for the run
    if lock is not None and lock.stale is not None:
        click.echo(
            f"safe-sft: warning: took over the lock on {output_dir} from a run that is gone ({lock.stale.describe()})",
            err=True,
        )
    if lock is not None:
        lock.keep(lambda message: click.echo(message, err=True))
    try:
        code = _supervise(
            prepared,
            RunConfig(
                max_attempts,
                grace_period,
                allow_shorter_max_length,
                kwargs["hang_timeout"],
                kwargs["startup_timeout"],
                memory_sample_interval,
                resume_latest,
                download_wait,
            ),
            output_dir,
            coord_port,
            run_id,
            node_timeout,
            requeue,
            job,
            requeued,
        )
    finally:
        if lock is not None:
            lock.release()
    sys.exit(code)


def requeued_mark(output_dir: Path, job: SlurmJob | None, swift: SwiftArgs | None = None) -> NoticeMark | None:
    """The mark a requeued Slurm job resumes from (its earlier run saved a checkpoint on notice), or None.
    Its checkpoint must be complete: a requeued job never resumes from an incomplete one, so it is refused
    here, before anything starts. One whose run was another experiment than `swift` (the same job id on
    another cluster, or after the controller's ids began again) is left aside, with a warning."""
    if job is None:
        return None
    from dataclasses import replace

    from launcher.plan.notice import requeued_resume
    from launcher.run.checkpoints import checkpoint_at, saved_after, saved_args
    from launcher.run.notice import mark_path, read_mark
    from launcher.run.resume import other_experiment

    mark = requeued_resume(read_mark(output_dir, job.job_id), job)
    why = other_experiment(saved_args(Path(mark.checkpoint)), swift) if mark is not None and swift else None
    if mark is not None and why:
        click.echo(
            f"safe-sft: warning: {mark_path(output_dir, job.job_id)} names {mark.checkpoint}, another "
            f"experiment's ({why}): not resumed from; job {job.job_id} starts as a new run",
            err=True,
        )
        return None
    if mark is not None and checkpoint_at(Path(mark.checkpoint), mark.step) is None:
        raise SafeSftError(
            f"the checkpoint {mark.checkpoint} that job {job.job_id} saved on notice is not complete",
            f"resume by hand with --resume-latest, or move {mark_path(output_dir, job.job_id)} away",
        )
    if mark is not None and job.restarts > mark.restart_count + 1:
        # not the restart right after the notice: a later one of this job went on from the mark, and may
        # have saved since (then been requeued for another cause, a node failure say): go on from there
        later = saved_after(Path(mark.checkpoint), mark.step)
        if later is not None:
            mark = replace(mark, checkpoint=str(later.path), step=later.step)
    return mark


def check_zero_ranks(checkpoint: Path, world_size: int) -> None:
    """A DeepSpeed checkpoint's ZeRO optimizer states load only into as many ranks as saved them: on another
    count every rank stops once the model has loaded (`used a DP world size of 2 but the current world size
    is 1`)."""
    from launcher.run.checkpoints import zero_ranks

    saved = zero_ranks(checkpoint)
    if saved is not None and saved != world_size:
        raise SafeSftError(
            f"--resume_from_checkpoint {checkpoint} holds the ZeRO optimizer states of {saved} ranks, and this run "
            f"has {world_size}: DeepSpeed loads them only into as many (every rank stops after loading the model)",
            f"add --resume_only_model true to resume its weights only (a fresh optimizer), or run on {saved} ranks",
        )


def check_newest_checkpoint(prepared: Prepared) -> str | None:
    """--resume-latest takes the newest complete checkpoint in the output dir, which every experiment on a
    model shares by default: one saved by a run with another model, dataset, tuner, learning rate or seed
    than this one's is refused, before anything starts, and one whose run cannot be read is warned of. Where
    it is the last step of a run as long as this one, what to tell the user (nothing is left to train); else
    None."""
    from launcher.run.checkpoints import latest_complete, saved_args
    from launcher.run.resume import already_finished, other_experiment

    found = latest_complete(prepared.output_dir.resolve())[0]
    if found is None:
        return None
    saved = saved_args(found.path)
    why = other_experiment(saved, prepared.swift)
    if why:
        raise SafeSftError(
            f"--resume-latest would go on from {found.path}, another experiment's: {why}",
            "name the checkpoint to resume with --resume_from_checkpoint, or give this experiment its own --output_dir",
        )
    if prepared.backend.writes_args_json and not isinstance(saved.get("model"), str):
        click.echo(
            f"safe-sft: warning: --resume-latest goes on from {found.path} unchecked: no readable args.json (in "
            "it or its run dir) names the model it trained, so it cannot be told apart from another experiment's; "
            "stop now (Ctrl-C) if it is not this one's, and name the checkpoint with --resume_from_checkpoint",
            err=True,
        )
    return already_finished(found.path, saved, prepared.swift)


def _unwritable(output_dir: Path, err: OSError) -> SafeSftError:
    from launcher.probe.disk import disk_free
    from launcher.run.lock import records_not_a_folder
    from launcher.units import fmt_bytes

    if (not_a_folder := records_not_a_folder(output_dir)) is not None:
        return not_a_folder
    return SafeSftError(
        f"cannot write to the output dir {output_dir}: {err.strerror or err} ({fmt_bytes(disk_free(output_dir))} free)",
        "choose a --output_dir this user can write to, with free space",
    )


def _supervise(
    prepared: Prepared,
    config: RunConfig,
    output_dir: Path,
    coord_port: int | None,
    run_id: str | None,
    node_timeout: float,
    requeue: bool | None,
    job: SlurmJob | None,
    requeued: NoticeMark | None,
) -> int:
    """Run the supervisor with report.json kept current from the start; the exit code. `job`: the Slurm job
    this run is a step of; `requeued`: the complete checkpoint a requeued Slurm job resumes its first
    attempt from (checked by `requeued_mark`)."""
    import socket
    from datetime import datetime

    from launcher.plan.batch import as_ran
    from launcher.run.child import become_subreaper
    from launcher.run.ports import coord_port_of
    from launcher.run.records import RunResult
    from launcher.run.report import report_json, save_report, summary
    from launcher.run.supervisor import Supervisor

    topology = prepared.plan.topology
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    if topology.nnodes.value > 1:
        stamp += f"-node{topology.node_rank.value}"
    run_dir = output_dir / "safe-sft" / stamp
    try:
        run_dir.mkdir(parents=True)
    except OSError as err:
        raise _unwritable(output_dir, err) from None
    report_path = run_dir / "report.json"
    argv = sys.argv[1:]
    batch = prepared.plan.batch
    process = {"pid": os.getpid(), "host": socket.gethostname(), "started": datetime.now().astimezone().isoformat()}

    said: set[str] = set()
    unsaved: list[str] = []  # why the latest write of the report failed, if it did

    def ran(attempts: list[AttemptRecord]) -> GlobalBatch | None:  # a script may set its batch in its code
        first = attempts[0].settings if attempts else None
        return batch if batch is None or first is None else as_ran(batch, first.micro_batch, first.grad_accum)

    def save(attempts: list[AttemptRecord], result: RunResult | None = None) -> None:
        reason = save_report(
            report_path, report_json(attempts, result, argv, process, ran(attempts), prepared.backend.name)
        )
        unsaved[:] = [reason] if reason else []
        if reason and reason not in said:
            said.add(reason)
            click.echo(f"safe-sft: {reason}", err=True)

    # `running` from the start: a killed run never shows an earlier run's outcome; and where even that cannot
    # be written (a full disk), neither can the trainer's checkpoints: nothing starts
    reason = save_report(report_path, report_json([], None, argv, process, batch, prepared.backend.name))
    if reason:
        raise SafeSftError(reason, f"free space in {output_dir}, or choose another --output_dir; nothing was started")

    coordinator = None
    if topology.nnodes.value > 1:
        from launcher.prepare import first_attempt_terms
        from launcher.run.coord import Coordinator
        from launcher.run.shared import check_shared_output_dir
        from launcher.run.supervisor import FORWARDED_SIGNALS

        received: list[int] = []  # until the supervisor's handlers take over: a signal ends the wait it hits
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, lambda number, _frame: received.append(number))
        try:
            coordinator = Coordinator(
                host=topology.master_addr.value,
                port=coord_port_of(topology, coord_port),
                node=topology.node_rank.value,
                nnodes=topology.nnodes.value,
                run_id=run_id or "",
                connect_timeout=node_timeout,
                report_timeout=node_timeout,
                signals=lambda: (len(received), received[-1] if received else None),
            )
            check_shared_output_dir(coordinator, output_dir)
            coordinator.gather(first_attempt_terms(prepared, config.resume_latest, config.max_attempts))
        except OSError as err:
            raise _unwritable(output_dir, err) from None
        except SafeSftError as err:  # node 0 unreachable, a node that never started, a dir not shared, a signal
            _print_error(err)
            if coordinator is not None:  # reached node 0's store: say why, or node 0 waits --node-timeout for us
                coordinator.leave(err.message)
            code = EXIT_LOST_NODE if err.exit_code == EXIT_USAGE else err.exit_code
            save([], RunResult("interrupted" if code > 128 else "failed", [], code, err.message))
            return code
        except Exception as err:
            save([], _internal_error(err, []))
            raise
        if received:  # between two waits: stop before the first attempt all the same
            from launcher.run.poll import WaitInterrupted

            stopped = WaitInterrupted(received[-1], "the first attempt")
            save([], RunResult("interrupted", [], stopped.exit_code, stopped.message))
            raise stopped

    if requeued is not None and job is not None:
        click.echo(
            f"safe-sft: job {job.job_id} was requeued (restart {job.restarts}): resuming from {requeued.checkpoint}",
            err=True,
        )

    become_subreaper()
    supervisor = Supervisor(
        prepared, config, os.environ, run_dir=run_dir, on_attempt=lambda attempts: save(attempts),
        coordinator=coordinator,
        requeued=requeued,
    )  # fmt: skip
    supervisor.install_signal_handlers()
    try:
        result = supervisor.run()
    except SafeSftError as err:  # lost node 0, or a checkpoint the nodes do not share: the run ends here
        _print_error(err)
        code = EXIT_LOST_NODE if err.exit_code == EXIT_USAGE else err.exit_code
        result = RunResult("interrupted" if code > 128 else "failed", supervisor.attempts, code, err.message)
    except OSError as err:  # safe-sft's own read or write failed (a full disk, say): a summary, not a traceback
        result = RunResult("failed", supervisor.attempts, EXIT_TRAINING_FAILED, own_io_failure(err, output_dir))
    except Exception as err:
        save(supervisor.attempts, _internal_error(err, supervisor.attempts))
        raise
    if job is not None and result.outcome == "interrupted" and result.exit_code == 128 + signal.SIGTERM:
        result = _with_slurms_reason(result, job, config.resume_latest)
    save(result.attempts, result)
    click.echo(summary(result, report_path, ran(result.attempts), unsaved=unsaved[0] if unsaved else None), err=True)
    if result.outcome == "preempted" and job is not None:
        _after_preemption(output_dir, job, result, requeue, supervisor.notice)
    elif result.outcome == "preempted":  # outside Slurm nothing requeues it: the user goes on (hostile46slurm F7)
        saved = result.attempts[-1].preempted or {}
        click.echo(f"safe-sft: go on: rerun with --resume-latest; it resumes from step {saved.get('step')}", err=True)
    return int(result.exit_code)


def _internal_error(err: Exception, attempts: list[AttemptRecord]) -> RunResult:
    """The run's outcome where safe-sft itself stopped on an error it does not know (a bug: its traceback
    follows): the report must not go on saying `running`."""
    from launcher.run.records import RunResult

    what = f"safe-sft stopped on an internal error ({type(err).__name__}: {err}); please report it with the traceback"
    return RunResult("failed", attempts, EXIT_TRAINING_FAILED, what)


def own_io_failure(err: OSError, output_dir: Path) -> str:
    """The give-up line where safe-sft's own read or write failed: the disk's free space, or, where the
    open-files limit ran out, that limit and its fix (the disk's words had misled: hostile47env F6)."""
    where = Path(err.filename) if err.filename else output_dir
    if err.errno == errno.EMFILE:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return (
            f"safe-sft could not open {where}: too many open files (ulimit -n is {soft}); raise the open-files "
            "limit (ulimit -n 65536; a container's --ulimit nofile=65536), then rerun with --resume-latest"
        )
    from launcher.probe.disk import free_words

    said = err.strerror or err
    return f"safe-sft could not read or write {where}: {said} ({output_dir} has {free_words(output_dir)})"


def _with_slurms_reason(result: RunResult, job: SlurmJob, resume_latest: bool) -> RunResult:
    """A SIGTERM to a Slurm step says nothing of why: Slurm's own record of the job does (a node that
    failed, the time limit, a scancel). Asked briefly: Slurm kills what is left after its KillWait."""
    from dataclasses import replace

    from launcher.plan.notice import why_slurm_stopped
    from launcher.run.notice import show_job

    said = why_slurm_stopped(show_job(job.job_id, timeout_s=5), job, resume_latest)
    if said is None:
        return result
    return replace(result, give_up_reason=f"{result.give_up_reason}; {said}" if result.give_up_reason else said)


def _after_preemption(output_dir: Any, job: SlurmJob, result: Any, requeue: bool | None, notice: int | None) -> None:
    """Leave the checkpoint's mark for the requeued job, then requeue (Slurm ends this job's processes). Not
    after a SIGTERM (`notice`): that asks the job to stop (a plain scancel, a time limit); requeued, a
    cancelled job had come back. Slurm requeues a preempted job itself, and the mark serves it then."""
    from launcher.plan.notice import NoticeMark, job_allows_requeue, requeue_wanted, slurm_requeued
    from launcher.run.notice import requeue as scontrol_requeue
    from launcher.run.notice import show_job, write_mark

    job_id = job.job_id
    saved = result.attempts[-1].preempted
    mark = NoticeMark(job_id, job.restarts, saved["checkpoint"], saved["step"], cluster=job.cluster)
    where = write_mark(output_dir, mark)
    if notice == signal.SIGTERM:
        restart = slurm_requeued(show_job(job_id), job)
        if restart is not None:  # `scontrol requeue` sends the SIGTERM itself, the job already back in the queue
            click.echo(
                f"safe-sft: Slurm requeued job {job_id} (restart {restart}): it resumes from step {mark.step} "
                f"({where})",
                err=True,
            )
            return
        click.echo(
            f"safe-sft: job {job_id} is not requeued: a SIGTERM (scancel, a time limit) asks it to stop; should "
            f"Slurm requeue it itself (a preemption), it resumes from step {mark.step} ({where}); else rerun "
            "with --resume-latest",
            err=True,
        )
        return
    allows = job_allows_requeue(show_job(job_id)) if requeue is None else None
    if not requeue_wanted(requeue, job_id, allows):
        why = "--no-requeue" if requeue is False else "the job does not allow it (Requeue=0)"
        click.echo(
            f"safe-sft: job {job_id} is not requeued ({why}): rerun with --resume-latest, or requeue it yourself "
            f"(scontrol requeue {job_id}): it resumes from step {mark.step} ({where})",
            err=True,
        )
        return
    click.echo(f"safe-sft: the requeued job resumes from step {mark.step}: {where}", err=True)
    click.echo(f"safe-sft: scontrol requeue {job_id}", err=True)
    sys.stderr.flush()
    failed = scontrol_requeue(job_id)
    if failed:
        click.echo(f"safe-sft: could not requeue job {job_id}: {failed}", err=True)


@click.command("explain", context_settings={"help_option_names": ["--help"]})
@click.argument("logs", nargs=-1, required=True, type=str)
@click.option("--json", "as_json", is_flag=True, envvar="SAFE_SFT_JSON", help="Print kind and evidence as JSON.")
@_user_errors
def explain_command(logs: tuple[str, ...], as_json: bool) -> None:
    """Classify saved logs (files merged into one diagnosis, an attempt's folder, or - for stdin) and say
    what safe-sft would change."""
    from launcher.explain import explain, explain_json, explain_text

    said = explain(logs)
    if as_json:
        click.echo(json.dumps(explain_json(said.failure, said.ladder, said.preempted), indent=2))
    else:
        click.echo(explain_text(said.failure, said.ladder, said.preempted))


@click.command("report", context_settings={"help_option_names": ["--help"]})
@click.argument("run_dir", default=".", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, envvar="SAFE_SFT_JSON", help="Print report.json.")
@click.option("--plot", "plot_path", type=click.Path(path_type=str), help="Write a PNG (.pdf, .svg, .jpg) here.")
@_user_errors
def report_command(run_dir: str, as_json: bool, plot_path: str | None) -> None:
    """Show the attempts of a safe-sft run (and plot the memory timeline)."""
    from pathlib import Path

    from launcher.show_report import load_report, other_runs, plot_report, render_report

    data = load_report(Path(run_dir))
    if plot_path is not None:
        plot_report(data, Path(plot_path))
    if as_json:
        click.echo(json.dumps({k: v for k, v in data.items() if k != "_path"}, indent=2))
    else:
        click.echo(render_report(data))
        if (others := other_runs(Path(run_dir), Path(data["_path"]))) is not None:
            click.echo(others)
        if plot_path is not None:
            click.echo(f"plot: {plot_path}")


def split_own_options(command: click.Command, args: list[str]) -> tuple[list[str], list[str]]:
    """Leading safe-sft options vs swift's arguments: the first unknown argument starts swift's."""
    takes_value: dict[str, bool] = {"--help": False}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                takes_value[name] = not (param.is_flag or param.count)
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return args[:index], args[index + 1 :]
        name = arg.split("=", 1)[0]
        if name not in takes_value:
            break
        index += 1 if ("=" in arg or not takes_value[name]) else 2
    return args[:index], args[index:]


SUGGEST_CUTOFF = 0.85  # no swift or transformers field comes closer than 0.79 to a safe-sft option (a test checks)


def option_names(command: click.Command) -> list[str]:
    return [
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
        if name.startswith("--")
    ]


def _spelling(name: str) -> str:
    return name.lstrip("-").replace("-", "_")


TRAINER_WORDS = {"swift": "swift", "llamafactory": "LLaMA-Factory", "torchrun": "the script"}  # for messages


def check_swift_argv(command: click.Command, swift_argv: list[str], backend: str = "swift") -> None:
    """Catch safe-sft's own options among swift's arguments before anything starts.

    A safe-sft option after the first swift argument would reach swift (which fails after the model
    loads), and so would a misspelt one: both are one-line errors here, the second with "did you mean".
    Swift's own arguments pass: none shares a name with a safe-sft option, and none is as close to one as
    SUGGEST_CUTOFF (tests/stack/test_plan_real.py checks both against the installed ms-swift).
    """
    import difflib

    if backend == "torchrun" and swift_argv:
        from launcher.backends.hf_trainer import check_not_torchruns

        check_not_torchruns(swift_argv[0])  # a torchrun option placed first: its own error, not "comes after"
    mine = set(option_names(command))
    owner: dict[str, click.Command] = {}
    for cmd, _ in COMMANDS.values():
        for name in option_names(cmd):
            owner.setdefault(name, cmd)
    by_spelling = {_spelling(name): name for name in owner}
    for position, arg in enumerate(swift_argv):
        if not arg.startswith("--") or arg == "--":
            continue
        name = arg.split("=", 1)[0]
        where = f"safe-sft {command.name}"
        if name in owner and name not in mine:
            raise SafeSftError(
                f"{name} is an option of `safe-sft {owner[name].name}`, not of `{where}`", f"drop {name} here"
            )
        if name in mine:
            after = " ".join(swift_argv[:position]) if position <= 4 else " ".join(swift_argv[:3]) + " ..."
            trainer = TRAINER_WORDS.get(backend, backend)
            raise SafeSftError(
                f"safe-sft's option {name} comes after {trainer}'s arguments ({after}), so {trainer} would get it",
                f"put safe-sft's options first: `{where} {name} ... {swift_argv[0]} ...`",
            )
        close = difflib.get_close_matches(_spelling(name), list(by_spelling), n=1, cutoff=SUGGEST_CUTOFF)
        if close:
            match = by_spelling[close[0]]
            other = "" if match in mine else f" (an option of `safe-sft {owner[match].name}`)"
            raise SafeSftError(
                f"unknown option {name}: did you mean {match}{other}?",
                f"safe-sft's options come first, spelt as in `safe-sft --help`; "
                f"{TRAINER_WORDS.get(backend, backend)}'s arguments follow",
            )


def _backends_given(own: list[str]) -> list[str]:
    """Every --backend among safe-sft's own options (`--backend X`, `--backend=X`), in order."""
    found = []
    for position, arg in enumerate(own):
        if arg == "--backend" and position + 1 < len(own):
            found.append(own[position + 1])
        elif arg.startswith("--backend="):
            found.append(arg.split("=", 1)[1])
    return found


def _backend_named(own: list[str]) -> str:
    """The backend safe-sft's own options name (the first --backend, else SAFE_SFT_BACKEND), for the words of
    an argument error raised before click reads them. A backend command's word (`safe-sft torchrun`) comes
    first; another --backend after it is refused (`_invoke`)."""
    given = _backends_given(own)
    return given[0] if given else os.environ.get("SAFE_SFT_BACKEND") or "swift"


def _invoke(command: click.Command, args: list[str], takes_swift_args: bool) -> None:
    own, swift_argv = split_own_options(command, args) if takes_swift_args else (args, [])
    takes_json = any(param.name == "as_json" for param in command.params)
    explicit_end = len(own) < len(args) and args[len(own)] == "--"  # after `--`, everything is swift's
    # --json after swift's arguments is refused below, and its error is the JSON that script waits for
    json_asked = "--json" in own or (not explicit_end and "--json" in swift_argv)
    _JSON_OUTPUT[0] = takes_json and (json_asked or os.environ.get("SAFE_SFT_JSON", "") not in ("", "0"))
    given = _backends_given(own)
    if command in (TORCHRUN_COMMAND, LLAMAFACTORY_COMMAND) and len(set(given)) > 1:
        # `safe-sft llamafactory train --backend torchrun`: the option had beaten the command word
        _print_error(
            SafeSftError(
                f"--backend {given[-1]} contradicts `safe-sft {command.name}`, which runs {given[0]}",
                f"drop --backend: `safe-sft {command.name}` names its trainer",
            )
        )
        sys.exit(EXIT_USAGE)
    if takes_swift_args and not explicit_end:
        backend = _backend_named(own)
        if backend == "swift" and ("--help" in swift_argv or "-h" in swift_argv):
            # `safe-sft sft --help`: swift's own --help would run in every rank under torchrun (a "run" that
            # prints the usage of swift's pre-parser alone); this command's help is what was asked for
            command.main(args=["--help"], prog_name=f"safe-sft {command.name}", standalone_mode=False)
            from launcher.plan.swift_args import SWIFT_OPTIONS_DOC

            click.echo(f"\nswift's own options (`swift sft --help` lists few): {SWIFT_OPTIONS_DOC}")
            return
        try:
            check_swift_argv(command, swift_argv, backend)
        except SafeSftError as err:
            _print_error(err)
            sys.exit(EXIT_USAGE)
    try:
        command.main(args=own, prog_name=f"safe-sft {command.name}", obj=swift_argv, standalone_mode=False)
    except click.ClickException as err:
        _print_error(click_error(err, str(command.name)))
        sys.exit(EXIT_USAGE)
    except click.Abort:  # Ctrl-C while click reads its options
        click.echo("safe-sft: aborted", err=True)
        sys.exit(130)


def _backend_command(name: str, metavar: str, summary: str) -> click.Command:
    """run_command as `safe-sft torchrun` and `safe-sft llamafactory train` present it: their own name in
    usage, help and errors, and --backend hidden (main passes it)."""
    command = copy.copy(run_command)
    command.name, command.options_metavar, command.help = name, metavar, summary
    command.params = [copy.copy(param) for param in run_command.params]
    for param in command.params:
        if isinstance(param, click.Option) and param.name == "backend":
            param.hidden = True
    return command


TORCHRUN_COMMAND = _backend_command(
    "torchrun",
    "[OPTIONS] [--] SCRIPT ARGS...",
    "Run an HF-Trainer script (TrainingArguments) under torchrun as `torchrun SCRIPT ARGS` would, and survive "
    "memory failures. Its plan: `safe-sft plan --backend torchrun SCRIPT ARGS...`.",
)
LLAMAFACTORY_COMMAND = _backend_command(
    "llamafactory train",
    "[OPTIONS] CONFIG [key=value ...]",
    "Train as `llamafactory-cli train CONFIG [key=value ...]` would, and survive memory failures. Its plan: "
    "`safe-sft plan --backend llamafactory CONFIG ...`.",
)

COMMANDS: dict[str, tuple[click.Command, bool]] = {
    "run": (run_command, True),
    "plan": (plan_command, True),
    "doctor": (doctor_command, True),
    "explain": (explain_command, False),
    "report": (report_command, False),
}

READERS = ("plan", "doctor", "explain", "report")  # the commands that only read and print


def main(argv: list[str] | None = None) -> None:
    if argv is None:  # the console entry (tests call main in-process, with their own streams)
        from launcher.streams import guard_std_streams

        guard_std_streams()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        os.getcwd()
    except FileNotFoundError:  # the shell stood in a folder since removed (an old run dir)
        _print_error(
            SafeSftError("the working directory no longer exists", "cd to a directory that does, and run again")
        )
        sys.exit(EXIT_USAGE)
    if not args:  # as `swift sft` alone fails: a script's `safe-sft $ARGS` with ARGS unset must not pass
        click.echo(USAGE, err=True)
        _print_error(SafeSftError("no arguments given", "give swift's arguments: `safe-sft --model M --dataset D ...`"))
        sys.exit(EXIT_USAGE)
    if args[0] in ("-h", "--help"):
        click.echo(USAGE)
        return
    if args[0] == "--version":
        from launcher import __version__

        click.echo(f"safe-sft {__version__}")
        return
    if args[0] == "torchrun":  # `safe-sft torchrun [OPTIONS] [--] SCRIPT ARGS`: the run path, HF-Trainer backend
        _invoke(TORCHRUN_COMMAND, ["--backend", "torchrun", *args[1:]], True)
        return
    if args[0] == "llamafactory":  # `safe-sft llamafactory train [OPTIONS] CONFIG [key=value ...]`
        if args[1:2] in (["--help"], ["-h"]):
            _invoke(LLAMAFACTORY_COMMAND, ["--help"], False)
            return
        if args[1:2] != ["train"]:
            given = f"`{args[1]}`" if len(args) > 1 else "nothing"
            _print_error(SafeSftError(f"safe-sft llamafactory takes `train`, not {given}", LLAMAFACTORY_USAGE))
            sys.exit(EXIT_USAGE)
        _invoke(LLAMAFACTORY_COMMAND, ["--backend", "llamafactory", *args[2:]], True)
        return
    if args[0] in COMMANDS:
        command, takes_swift_args = COMMANDS[args[0]]
        # `safe-sft plan | head -1`: end as cat and grep do when the reader goes (SIGPIPE, 141), not with
        # click's exit 1, which means a failed run; a training run goes on whatever its stdout does
        before = signal.signal(signal.SIGPIPE, signal.SIG_DFL) if args[0] in READERS else None
        try:
            _invoke(command, args[1:], takes_swift_args)
        finally:
            if before is not None:  # main() called in-process (the tests) hands the process back as it was
                signal.signal(signal.SIGPIPE, before)
        return
    _invoke(run_command, args, True)
