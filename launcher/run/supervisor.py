"""The restart loop: prepare an attempt, run it, decide from its record, degrade, resume; record everything.

Reads like torchrun's agent: each attempt returns an AttemptRecord (run by launcher.run.attempt), and the
loop decides from it, alone or, over several nodes, with node 0's decision. The process spawner, clock
and sleep are injected so the loop is testable without processes.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from launcher.configs import config_dir, load_templates, write_config
from launcher.errors import EXIT_LOST_NODE, EXIT_TRAINING_FAILED, SafeSftError
from launcher.masking import mask_value
from launcher.model import FailureKind, Strategy
from launcher.plan.consensus import MAX_EVIDENCE, MAX_TEXT, Decision, NodeReport, decide, peer_signal
from launcher.plan.degrade import (
    DOWNLOAD_ENV,
    MAX_REBALANCES,
    GiveUp,
    Rung,
    Settings,
    Step,
    next_step,
    wait_before_retry,
)
from launcher.plan.device_map import place, rebalance
from launcher.plan.ds_config import zero_settings
from launcher.plan.estimate import corrected, estimate, measured_correction
from launcher.plan.guided import Memory
from launcher.plan.notice import EXIT_PREEMPTED, NoticeMark, sigterm_is_notice
from launcher.plan.script_args import FRESH_DIR_ENV, LAST_CHECKPOINT_ENV, SCRIPT_ARGS_ENV, script_args_env
from launcher.plan.settings import Resume, attempt_args, initial_settings, plan_swift_args
from launcher.plan.sizing import attempt_estimate, device_map_estimate, device_map_pieces, is_device_map, train_shape
from launcher.plan.swift_args import SwiftArgs
from launcher.prepare import Prepared
from launcher.probe.disk import file_size_limit, free_words, which_disk_is_full
from launcher.run import evidence as ev
from launcher.run import resolved
from launcher.run.attempt import AttemptRunner, Spawn
from launcher.run.checkpoints import (
    Snapshot,
    checkpoint_at,
    checkpoint_step,
    is_complete,
    later_by_name,
    latest_complete,
    missing_rng_states,
    saved_args,
    snapshot,
)
from launcher.run.child import TrainingProcess
from launcher.run.coord import CoordinationLost, Coordinator
from launcher.run.notice import NOTICE_DIR_ENV, last_timing, mark_path
from launcher.run.oom_figures import oom_figures
from launcher.run.poll import WaitInterrupted, wait_until
from launcher.run.records import AttemptRecord, RunConfig, RunResult
from launcher.run.resume import (
    batch_change,
    batch_kept,
    canonical,
    complete_checkpoints,
    given_resume,
    other_experiment,
    relative_to,
    resume_point,
    shared_resume,
    weights_only_reason,
)
from launcher.run.saves import steps_saved
from launcher.units import fmt_bytes
from launcher.worker_tie import LAUNCHER_PID_ENV

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
# What a checkpoint that cannot be loaded looks like to the classifier (JSONDecodeError, a safetensors or
# pickle error, a native crash); memory and communication failures while loading are not its fault.
LOAD_SUSPECTS = frozenset({FailureKind.USER_ERROR, FailureKind.UNKNOWN, FailureKind.CRASH})


INTERRUPTED_REPORT_SLACK = 15.0  # seconds beyond the grace period for a signalled peer's report


class Supervisor:
    def __init__(
        self,
        prepared: Prepared,
        config: RunConfig,
        base_env: Mapping[str, str],
        *,
        run_dir: Path,
        spawn: Spawn | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_attempt: Callable[[list[AttemptRecord]], None] | None = None,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        nvml: ModuleType | None = None,
        coordinator: Coordinator | None = None,
        requeued: NoticeMark | None = None,
    ) -> None:
        self.prepared = prepared
        self.config = config
        self.base_env = dict(base_env)
        self.run_dir = run_dir
        self.on_attempt = on_attempt or (lambda _: None)
        self.clock = clock
        self.sleep = sleep
        out = stdout or sys.stdout.buffer
        err = stderr or sys.stderr.buffer
        spawn = spawn or (lambda argv, env, log: TrainingProcess(argv, env, log, out, err))
        self.received: int | None = None
        self.received_at: float | None = None  # when (epoch seconds): a rank's failure before it stays the cause
        self.signal_count = 0  # every signal, so that a wait can tell a new one from the one it began after
        self.notice: int | None = None  # SIGUSR1, or a SIGTERM with time to checkpoint (plan/notice.py)
        self.requeued = requeued  # a requeued Slurm job: the checkpoint its preempted run saved
        self.coordinator = coordinator
        if coordinator is not None:
            coordinator.signals = lambda: (self.signal_count, self.received)
        self.output_dir = prepared.output_dir.resolve()
        self.config_dir = str(config_dir())
        self.templates = load_templates()
        self.before: Snapshot = {}
        self.attempts: list[AttemptRecord] = []  # so far: what the report shows if the loop is cut short
        # checkpoints that failed to load in an attempt (resume.canonical paths) -> why
        self.set_aside: dict[Path, str] = {}
        topology = prepared.plan.topology
        self.runner = AttemptRunner(
            config,
            spawn,
            output_dir=self.output_dir,
            gpus=topology.gpus,
            node_rank=topology.node_rank.value,
            nproc_per_node=topology.nproc_per_node.value,
            received=lambda: self.received,
            received_at=lambda: self.received_at,
            notice=lambda: self.notice,
            clock=clock,
            sleep=sleep,
            nvml=nvml,
            coordinator=coordinator,
        )

    # ---- signals ---------------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.received is None and self.notice is None and self._is_notice(signum):
            self.notice = signum
            return
        if signum == signal.SIGUSR1:  # a repeated notice; a SIGUSR1 never stops training at once
            return
        if self.received is None:
            self.received_at = time.time()
        self.received = signum
        self.signal_count += 1

    def _is_notice(self, signum: int) -> bool:
        if signum == signal.SIGUSR1:
            return True
        if signum != signal.SIGTERM:
            return False
        save_s, step_s = last_timing(self.run_dir)
        return sigterm_is_notice(save_s, step_s, self.config.grace_seconds)

    def install_signal_handlers(self) -> None:
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self._on_signal)

    # ---- the loop ----------------------------------------------------------------------------------

    def run(self) -> RunResult:
        plan = self.prepared.plan
        self.before = snapshot(self.output_dir)  # an earlier run's checkpoints are not this run's resume points
        base = plan_swift_args(self.prepared.swift, plan)
        initial = initial_settings(
            self.prepared.swift,
            plan,
            self.prepared.model,
            self.base_env,
            self.config.allow_shorter_max_length,
            self.prepared.user_deepspeed,
            self.prepared.missing,
            self.prepared.backend.budget_args,
        )
        settings = initial
        history: list[FailureKind] = []
        attempts = self.attempts
        change: tuple[str, str] | None = None
        predicted: int | None = None
        decided_resume: Resume | None = None
        for number in range(1, self.config.max_attempts + 1):
            if number > 1 and self.received is not None and self.coordinator is None:
                # the signal came after the attempt before had failed: no attempt starts. (On several nodes the
                # agreed attempt starts and stops at once, so that node 0 hears of the signal.)
                name = signal.Signals(self.received).name
                why = f"{name} received after attempt {number - 1} failed: no attempt follows"
                sys.stderr.write(f"safe-sft: {why}\n")
                return self._interrupted(attempts, why)
            changed = self._changed_inputs() if number > 1 else None
            if changed is not None:
                return RunResult("failed", attempts, 1, changed)
            skipped: dict[str, str] = {}
            if self.coordinator is not None and number > 1:
                resume = shared_resume(decided_resume, self._swift_output_dir(attempts), self._users_own_start())
            else:
                resume, skipped = self._resume_point(number, settings, attempts)
            # never back to step 0 from the user's own checkpoint, nor with its argument still loading it
            given = self.prepared.swift.get("resume_from_checkpoint")
            if number > 1 and resume is None and given:
                return RunResult("failed", attempts, 1, self._nothing_to_go_on_from(given))
            if number == 1 and resume is not None and self.prepared.backend.has("per_device_train_batch_size"):
                kept = batch_kept(Path(resume.checkpoint), settings)
                if kept is not None:  # the checkpoint's global batch, or the data's skip is off by the difference
                    change = (
                        f"gradient_accumulation_steps {settings.grad_accum} -> {kept.grad_accum}",
                        f"keep the checkpoint's global batch {kept.global_batch} on {kept.world_size} process(es), so "
                        "that the resume skips exactly the samples its steps trained",
                    )
                    settings = kept
            correction = measured_correction(_measured(attempts))
            record = self._run_attempt(
                number, base, initial, settings, resume, change, skipped, attempts, correction, predicted
            )
            if number == 1:  # a script's batch as it ran it, where its own code set it
                initial = self._as_run(initial, record)
                record.settings = settings = self._as_run(settings, record)
            attempts.append(record)
            self.on_attempt(attempts)
            if record.preempted is not None:  # every node sees its ranks stop at the same step
                return RunResult("preempted", attempts, EXIT_PREEMPTED)
            if self.notice is not None and record.failure is not None:  # no checkpoint in time: no restart
                name, grace = signal.Signals(self.notice).name, self.config.grace_seconds
                why = f"the checkpoint on notice ({name}) was not saved within --grace-period {grace:g} s"
                return RunResult("interrupted", attempts, 128 + self.notice, why)
            if self.coordinator is not None:
                memory = self._memory(base, initial, record, attempts)
                try:
                    agreed = self._agree(self.coordinator, number, record, settings, history, attempts, memory)
                except WaitInterrupted as err:  # Ctrl-C while waiting for the other nodes: stop now
                    sys.stderr.write(f"safe-sft: {err.message}\n")
                    return self._interrupted(attempts, err.message)
                self.on_attempt(attempts)
                if isinstance(agreed, RunResult):
                    return agreed
                settings, change, decided_resume, kind, predicted = agreed
                if (stopped := self._wait_before_retry(kind, history, number)) is not None:
                    return self._interrupted(attempts, stopped)
                history.append(kind)
                continue
            failure = record.failure
            if failure is None:
                return RunResult("succeeded", attempts, 0)
            if failure.kind is FailureKind.INTERRUPTED:
                return self._interrupted(attempts)
            aside = self._set_aside_if_unloadable(record)
            if aside is not None:  # not the settings' fault: the same settings, from the checkpoint before it
                before_it = self._resume_point(number + 1, settings, attempts)[0]
                where = (
                    f"resume from {before_it.checkpoint} (step {before_it.step}), the newest complete one before it"
                    if before_it
                    else "no complete checkpoint is before it: from step 0"
                )
                change = ("no change", f"{aside} failed to load; {where}")
                continue
            step = next_step(
                settings,
                failure.kind,
                history,
                gpus_have_room_for_zero3=self._zero3_fits(attempts),
                memory=self._memory(base, initial, record, attempts),
                rebalance=self._rebalance(base, initial, record),
                nccl=bool(self.prepared.plan.topology.gpus),  # none under --use_cpu: the ranks talk over gloo
            )
            if isinstance(step, GiveUp):
                reason = step.reason
                if failure.kind is FailureKind.DISK_FULL:
                    limit = file_size_limit()  # where set, the limit, not the disk, stops the write
                    env = {**os.environ, **self.base_env}
                    reason = (
                        f"{reason} ({which_disk_is_full(self.output_dir, failure.evidence, env)})"
                        if limit is None
                        else f"a file-size limit: ulimit -f allows files of {fmt_bytes(limit)}, and a checkpoint "
                        f"file grows past it ({self.output_dir} has {free_words(self.output_dir)}); raise it "
                        "(ulimit -f unlimited), then rerun with --resume-latest"
                    )
                    if self._resume_point(number + 1, settings, attempts)[0] is None:
                        reason += "; no complete checkpoint was saved: a rerun starts from step 0"
                if failure.kind is FailureKind.DOWNLOAD:
                    reason += f" ({_download_env({**self.prepared.swift.config_env, **self.base_env})})"
                if failure.kind is FailureKind.USER_ERROR and record.change and record.change != "no change":
                    # the arguments were the user's until safe-sft's change: the error may be the change's
                    reason += (
                        f"; attempt {number} ran with safe-sft's change ({record.change}), which the attempt before "
                        "did not: the error may be that change's, not your arguments'"
                    )
                return RunResult("failed", attempts, 1, reason)
            if (stopped := self._wait_before_retry(failure.kind, history, number)) is not None:
                return self._interrupted(attempts, stopped)
            history.append(failure.kind)
            reason = step.reason + self._best_model_note(settings, step.settings, attempts)
            settings, change, predicted = step.settings, (step.change, reason), step.predicted_need_bytes
        return RunResult("failed", attempts, 1, f"--max-attempts {self.config.max_attempts} reached")

    def _wait_before_retry(self, kind: FailureKind, history: list[FailureKind], number: int) -> str | None:
        """Wait as the ladder says before attempt `number` + 1 (a failed download); the line that says a
        signal ended the wait, or None."""
        seconds = wait_before_retry(kind, history, self.config.download_wait)
        if seconds <= 0 or number >= self.config.max_attempts:  # no attempt follows: nothing to wait for
            return None
        sys.stderr.write(f"safe-sft: waiting {seconds:g} s before attempt {number + 1}: {kind.value} failed\n")
        try:
            wait_until(
                lambda: False, seconds, sleep=self.sleep, clock=self.clock, interrupted=lambda: self.received,
                what=lambda: f"attempt {number + 1}",
            )  # fmt: skip
        except WaitInterrupted as err:
            sys.stderr.write(f"safe-sft: {err.message}\n")
            return err.message
        return None

    # ---- several nodes ------------------------------------------------------------------------------

    def _agree(
        self,
        coordinator: Coordinator,
        number: int,
        record: AttemptRecord,
        settings: Settings,
        history: list[FailureKind],
        attempts: list[AttemptRecord],
        memory: Memory | None = None,
    ) -> RunResult | tuple[Settings, tuple[str, str], Resume | None, FailureKind, int | None]:
        """Report this node's outcome, get node 0's decision, and turn it into the next step or the end."""
        failure = record.failure
        if failure is not None:
            coordinator.request_stop(number)
        load_failed = self._set_aside_if_unloadable(record) is not None  # node 0 decides for every node
        report = NodeReport(
            run_id=coordinator.run_id,
            attempt=number,
            node=coordinator.node,
            kind=failure.kind.value if failure else None,
            exit_code=failure.exit_code if failure else record.exit_code,
            evidence=tuple(line[:MAX_TEXT] for line in (failure.evidence if failure else ())[:MAX_EVIDENCE]),
            checkpoints=tuple(complete_checkpoints(self._swift_output_dir(attempts))),
            capacity_bytes=memory.capacity_bytes if memory else None,
            peak_bytes=memory.peak_bytes if memory else None,
            load_failed=load_failed,
        )
        interrupted = failure is not None and failure.kind is FailureKind.INTERRUPTED
        if interrupted and coordinator.node != 0:
            coordinator.exchange_report_only(number, report)
            return self._interrupted(attempts)

        def decide_next(reports: list[NodeReport]) -> Decision:
            self._set_aside_for_nodes(record, [r.node for r in reports if r.load_failed])
            return decide(
                coordinator.run_id, number, reports, coordinator.nnodes, settings, history,
                max_attempts=self.config.max_attempts,
                resume_for=lambda new: relative_to(
                    self._resume_point(number + 1, new, attempts)[0], self._swift_output_dir(attempts)
                ),
                gpus_have_room_for_zero3=self._zero3_fits(attempts),
                memory=memory,
            )  # fmt: skip

        # Interrupted, node 0 stops every node whatever they report: it waits only as long as a peer signalled
        # with it takes to stop its training and report, not --node-timeout for a peer that is gone.
        patience = self.config.grace_seconds + INTERRUPTED_REPORT_SLACK if interrupted else None
        decision = coordinator.exchange(number, report, decide_next, report_timeout=patience)
        record.decision = {
            "action": decision.action, "reason": decision.reason, "root_node": decision.root_node,
            "root_kind": decision.root_kind, "change": decision.change,
            "resume_from": decision.resume.checkpoint if decision.resume else None,
        }  # fmt: skip
        sys.stderr.write(f"safe-sft: node 0 decided: {decision.action} ({decision.reason})\n")
        if decision.action != "retry" or decision.settings is None:
            coordinator.acknowledge(number)
            if interrupted:
                return self._interrupted(attempts)
            if decision.action == "finish":
                return RunResult("succeeded", attempts, 0)
            if decision.root_kind == FailureKind.INTERRUPTED.value:  # a peer's Ctrl-C or scancel: no failure here
                signum = signal.Signals.__members__.get(peer_signal(decision), signal.SIGTERM)
                return RunResult("interrupted", attempts, 128 + signum, f"stopped: {decision.reason}")
            lost = bool(coordinator.silent)  # a node whose report never came is lost, as a node that never answered
            return RunResult("failed", attempts, EXIT_LOST_NODE if lost else EXIT_TRAINING_FAILED, decision.reason)
        kind = FailureKind(decision.root_kind) if decision.root_kind else FailureKind.UNKNOWN
        reason = decision.reason + self._best_model_note(settings, decision.settings, attempts)
        change = (decision.change or "no change", reason)
        return decision.settings, change, decision.resume, kind, decision.predicted_need_bytes

    # ---- the guided ladder's view of memory ---------------------------------------------------------

    def _memory(
        self, base: SwiftArgs, initial: Settings, record: AttemptRecord, attempts: list[AttemptRecord]
    ) -> Memory | None:
        """After a GPU OOM: the estimate of any settings, the GPU's room, and what the failed attempt measured
        (NVML's peak, else the OOM message's figures). None for other failures or without a model size."""
        failure = record.failure
        if failure is None or not failure.kind.value.startswith("cuda_oom") or self.prepared.model is None:
            return None
        figures = oom_figures(failure.evidence)
        gpus = self.prepared.plan.topology.gpus
        capacity = min((g.free_bytes for g in gpus), default=0) or figures.capacity_bytes
        measured = max(record.memory.gpu_peak.values(), default=0) if record.memory is not None else 0
        cache: dict[Settings, int | None] = {}

        def need(s: Settings) -> int | None:
            if s not in cache:
                cache[s] = self._need(base, initial, s)
            return cache[s]

        floor = 0.0
        for earlier in attempts[:-1]:  # each earlier OOM proved its need was above the GPU's room
            earlier_need = need(earlier.settings)
            if capacity and earlier_need and earlier.failure and earlier.failure.kind.value == "cuda_oom":
                floor = max(floor, capacity / earlier_need)
        return Memory(need, capacity, measured or figures.in_use_bytes, floor=floor)

    def _need(self, base: SwiftArgs, initial: Settings, settings: Settings) -> int | None:
        """The estimate's per-GPU need of `settings` as an attempt would run them (no GPU facts needed)."""
        model = self.prepared.model
        if model is None or not model.total_params:
            return None
        args = attempt_args(
            base, initial, settings, None, user_deepspeed=self.prepared.user_deepspeed, templates=self.templates,
            config_dir=self.config_dir, output_dir=str(self.output_dir), fresh_version_dir=False,
            missing=self.prepared.missing,
            budget_args=self.prepared.backend.budget_args,
        )  # fmt: skip
        config = args.deepspeed_file[1] if args.deepspeed_file is not None else self._config_of(settings.deepspeed)
        env = {**self.prepared.swift.config_env, **self.base_env, **args.env}
        if config is None and is_device_map(self.prepared.plan.topology):
            found = device_map_estimate(args.swift, model, self.prepared.plan.topology, None, env)
            return found[0].gpu_need_bytes if found is not None else None
        shape = train_shape(args.swift, model, self.prepared.plan.topology, env)
        if config is None:
            return estimate(Strategy.DDP, shape, None, None).gpu_need_bytes
        zero = zero_settings(config, shape.hidden_size)
        strategy = Strategy.ZERO2
        if zero.stage == 3:
            strategy = Strategy.ZERO3_OFFLOAD if zero.offload_param or zero.offload_optimizer else Strategy.ZERO3
        return estimate(strategy, shape, None, None, zero).gpu_need_bytes

    def _rebalance(self, base: SwiftArgs, initial: Settings, record: AttemptRecord) -> Rung | None:
        """A device_map run's first rung after a CUDA OOM: move layers off the GPU that ran out, read from this
        attempt's per-GPU peaks (launcher.plan.device_map.rebalance). None without peaks or a model size."""
        topology = self.prepared.plan.topology
        if not is_device_map(topology) or record.memory is None or not record.memory.gpu_peak:
            return None
        peaks = tuple(record.memory.gpu_peak.get(g.index, 0) for g in topology.gpus)
        capacities = tuple(g.total_bytes for g in topology.gpus)
        env = {**self.prepared.swift.config_env, **self.base_env}
        found = device_map_pieces(base, self.prepared.model, topology, env)
        if found is None:
            return None
        shape, pieces = found

        def step(s: Settings) -> Step | None:
            if not s.max_memory or s.rebalanced >= MAX_REBALANCES:
                return None
            now, moved = place(pieces, s.max_memory), rebalance(shape, pieces, s.max_memory, peaks, capacities)
            if now is None or moved is None:
                return None
            hot = max(range(len(peaks)), key=lambda i: peaks[i] / max(capacities[i], 1))
            old, new = (",".join(str(k) for k in layout.layers) for layout in (now, moved))
            return Step(
                replace(s, max_memory=moved.max_memory, rebalanced=s.rebalanced + 1),
                f"device_map layers per GPU {old} -> {new} (--max_memory rebalanced)",
                f"GPU {hot} peaked at {fmt_bytes(peaks[hot])} of {fmt_bytes(capacities[hot])} while GPU "
                f"{min(range(len(peaks)), key=lambda i: peaks[i])} peaked at {fmt_bytes(min(peaks))}: "
                "move layers off the GPU that ran out",
            )

        return step

    def _interrupted(self, attempts: list[AttemptRecord], why: str | None = None) -> RunResult:
        """A user's or scheduler's signal ends the run: exit 128 + that signal, never a restart. `why`: the
        line that said so where the signal came between attempts (the report's give_up_reason)."""
        return RunResult("interrupted", attempts, 128 + (self.received or signal.SIGTERM), why)

    def _zero3_fits(self, attempts: list[AttemptRecord] | None = None) -> bool:
        """Whether zero3 fits the GPUs, its estimate corrected by what this run's attempts measured."""
        factor = measured_correction(_measured(attempts or []))
        return any(e.strategy is Strategy.ZERO3 and corrected(e, factor).gpu_fits for e in self.prepared.plan.estimates)

    def _resume_point(
        self, number: int, settings: Settings, attempts: list[AttemptRecord]
    ) -> tuple[Resume | None, dict[str, str]]:
        swift = self.prepared.swift
        only_model = swift.get_bool("resume_only_model", False)  # for every checkpoint this run did not write
        if number == 1:
            if self.requeued is not None:
                return self._requeued_resume(self.requeued, settings), {}
            given = self._users_own_start()
            if given:  # the user's own (checked complete before anything started): recorded as this run's start
                fresh = only_model and swift.get_bool("ignore_data_skip", False)
                return given_resume(Path(given), only_model, fresh), {}
            # a trainer that resumes on its own would take the newest checkpoint, complete or not
            by_itself = self.prepared.backend.resumes_by_itself(swift)
            if not (self.config.resume_latest or by_itself):
                return None, {}
            # a requeued job (or such a trainer: with only incomplete ones there, run_command refused to start),
            # an earlier checkpoint under the output dir predicted from the argv
            return resume_point([self.output_dir], settings, {}, only_model=only_model)
        return resume_point(
            [Path(a.run_dir) for a in attempts if a.run_dir],
            settings,
            {Path(path): a.settings for a in attempts for path in a.checkpoints_written},
            before=self.before,
            started_from=attempts[0].resumed_from,
            earlier=None if self._users_own_start() else self.output_dir,
            set_aside=self.set_aside,
            same_experiment=lambda checkpoint: other_experiment(saved_args(checkpoint), swift) is None,
            only_model=only_model,
        )

    def _as_run(self, settings: Settings, record: AttemptRecord) -> Settings:
        """A script (the torchrun backend) may set its batch in its own code, or take it from options of its
        own, and its arguments' class may have defaults of its own (trl's SFTConfig checkpoints): the
        micro-batch, accumulation and checkpointing the worker reported are the ones the ladder changes, not
        the argv's defaults (it had halved transformers' 8 for a script that ran 2, and spent an attempt
        turning on checkpointing that was on). Given on the command line, they are the argv's."""
        ran = record.resolved
        swift = self.prepared.swift
        if not self.prepared.backend.own_parser or ran is None:
            return settings
        micro = ran.per_device_train_batch_size if not swift.has("per_device_train_batch_size") else None
        accum = ran.gradient_accumulation_steps if not swift.has("gradient_accumulation_steps") else None
        checkpointing = ran.gradient_checkpointing if not swift.has("gradient_checkpointing") else None
        return replace(
            settings,
            micro_batch=micro if micro and micro > 0 else settings.micro_batch,
            grad_accum=accum if accum and accum > 0 else settings.grad_accum,
            gradient_checkpointing=settings.gradient_checkpointing if checkpointing is None else checkpointing,
        )

    def _changed_inputs(self) -> str | None:
        """Why no retry starts where a file the trainer reads again at each attempt changed since the run
        started (an edited LLaMA-Factory config would train another experiment from this one's checkpoint,
        silently: hostile47lf F13); None where none did."""
        from launcher.prepare import file_digest

        for path, digest in self.prepared.reread:
            if file_digest(path) != digest:
                return (
                    f"{path} changed since this run started: the next attempt would train what it says now from a "
                    "checkpoint of what it said before, so none starts: restore it and rerun with --resume-latest "
                    "to go on, or start the edited experiment in another output_dir"
                )
        return None

    def _nothing_to_go_on_from(self, given: str) -> str:
        # still complete, yet not resumed: set aside here, or by node 0 after another node failed loading it
        aside = canonical(Path(given)) in self.set_aside or is_complete(Path(given))
        state = "failed to load" if aside else "is no longer complete"
        return (
            f"the checkpoint you gave (--resume_from_checkpoint {given}) {state}, and this run saved none of its "
            "own: safe-sft does not go on from another run's checkpoint, or from step 0, in its place"
        )

    def _users_own_start(self) -> str | None:
        """The user's own --resume_from_checkpoint, where this run started from it (not from a search)."""
        swift = self.prepared.swift
        given = swift.get("resume_from_checkpoint") if swift.has("resume_from_checkpoint") else None
        return given if given and self.requeued is None else None

    def _set_aside_if_unloadable(self, record: AttemptRecord) -> str | None:
        """The checkpoint an attempt died loading, set aside for the rest of the run (left where it is)."""
        failure, resumed = record.failure, record.resumed_from
        if failure is None or resumed is None or record.load_failure is None or failure.kind not in LOAD_SUSPECTS:
            return None
        self._set_aside(
            record, resumed.checkpoint, f"attempt {record.number} failed loading it: {record.load_failure[:300]}"
        )
        return resumed.checkpoint

    def _set_aside_for_nodes(self, record: AttemptRecord, nodes: list[int]) -> None:
        """On node 0: the checkpoint every node resumed from, set aside when another node died loading it."""
        resumed = record.resumed_from
        if not nodes or resumed is None or canonical(Path(resumed.checkpoint)) in self.set_aside:
            return
        self._set_aside(record, resumed.checkpoint, f"node(s) {nodes} failed loading it in attempt {record.number}")

    def _set_aside(self, record: AttemptRecord, checkpoint: str, why: str) -> None:
        """Leave `checkpoint` out of every later resume point (it stays where it is), and say so."""
        self.set_aside[canonical(Path(checkpoint))] = why
        record.set_aside = {"path": checkpoint, "why": why}
        sys.stderr.write(f"safe-sft: set aside {checkpoint} for the rest of this run ({why}); not deleted\n")

    def _best_model_note(self, before: Settings, after: Settings, attempts: list[AttemptRecord]) -> str:
        """What a ZeRO stage change costs --load_best_model_at_end: transformers loads the best checkpoint at
        the end under the final stage, and one saved under another (an earlier attempt's) does not load
        (swift warns and keeps the last model)."""
        if before.deepspeed == after.deepspeed or not self.prepared.swift.get_bool("load_best_model_at_end", False):
            return ""
        if not any(a.checkpoints_written for a in attempts):
            return ""
        return (
            f"; with --load_best_model_at_end, a best checkpoint saved so far (under {before.deepspeed or 'no ZeRO'})"
            f" does not load under {after.deepspeed or 'no ZeRO'} at the end: the final model may be the last, "
            "not the best (best_model_checkpoint in trainer_state.json names it)"
        )

    def _would_overwrite(self, base: SwiftArgs, resume: Resume | None, output_dir: Path) -> str | None:
        """Why an attempt with --add_version false must write to a versioned dir instead, or None. `output_dir`:
        where the trainer writes, as the latest attempt reported it (else as safe-sft read the arguments).

        It writes into output_dir itself, as plain `swift sft` does, unless a checkpoint dir there is newer
        than its resume point and is one the attempt will save (launcher/run/saves.py; every one newer where
        its arguments do not say which): it would save over that one (an earlier attempt's half-written or
        unreadable checkpoint, or an earlier run's), and safe-sft never overwrites a checkpoint. The first
        attempt too: `--resume-latest` that found only incomplete checkpoints, or a rerun into the same dir,
        would otherwise train from step 0 over them.
        """
        if base.get_bool("add_version", True):
            return None
        # a script that ignores its resume point trains from step 0 and saves over every checkpoint there
        floor = resume.step if resume and self.prepared.backend.resumes_as_told else 0
        saves = steps_saved(base, floor)
        at_risk = sorted(
            (step, p)
            for p in output_dir.glob("checkpoint-*")  # a file of that name too: the trainer's save fails on it
            if (step := checkpoint_step(p)) is not None and step > floor and (saves is None or step in saves)
        )
        if not at_risk:
            return None
        more = f" (and {len(at_risk) - 1} more)" if len(at_risk) > 1 else ""
        return f"it would save over {at_risk[0][1]}{more}"

    def _swift_output_dir(self, attempts: list[AttemptRecord]) -> Path:
        """swift's output dir as the latest attempt reported it; before any did, the one predicted from the argv."""
        reported = next((a.resolved.output_dir for a in reversed(attempts) if a.resolved is not None), None)
        return reported if reported is not None else self.output_dir

    def _requeued_resume(self, mark: NoticeMark, settings: Settings) -> Resume:
        checkpoint = checkpoint_at(Path(mark.checkpoint), mark.step)
        if checkpoint is None:  # never resume from an incomplete one
            raise SafeSftError(
                f"the checkpoint {mark.checkpoint} that job {mark.job_id} saved on notice is not complete",
                f"resume by hand with --resume-latest, or move {mark_path(self.output_dir, mark.job_id)} away",
            )
        why = weights_only_reason(checkpoint, settings, {})
        return Resume(str(checkpoint.path), checkpoint.step, bool(why), why)

    def _run_attempt(
        self,
        number: int,
        base: SwiftArgs,
        initial: Settings,
        settings: Settings,
        resume: Resume | None,
        change: tuple[str, str] | None,
        skipped: dict[str, str],
        attempts: list[AttemptRecord],
        correction: float = 1.0,
        predicted: int | None = None,
    ) -> AttemptRecord:
        plan = self.prepared.plan
        attempt_dir = self.run_dir / f"attempt-{number}"
        attempt_dir.mkdir(parents=True, exist_ok=False)
        swift_output_dir = self._swift_output_dir(attempts)
        versioned_because = self._would_overwrite(base, resume, swift_output_dir)
        args = attempt_args(
            base,
            initial,
            settings,
            resume,
            user_deepspeed=self.prepared.user_deepspeed,
            templates=self.templates,
            config_dir=self.config_dir,
            output_dir=str(swift_output_dir),
            fresh_version_dir=versioned_because is not None,
            missing=self.prepared.missing,
            budget_args=self.prepared.backend.budget_args,
            # a trainer without add_version: a fresh dir beside the ones swift would name, this run's own
            fresh_output_dir=str(swift_output_dir / f"v{number}-{self.run_dir.name}"),
        )
        written = None
        if args.deepspeed_file is not None:  # no pinning, or the user's config on another rung
            written = str(write_config(Path(args.deepspeed_file[0]), args.deepspeed_file[1]))
        swift = args.swift
        env_set = {**plan.env_dict(), **args.env}
        trainer_argv = swift.argv()
        if self.prepared.backend.own_parser:  # a user's script: its TrainingArguments get it, through the worker
            env_set.pop(SCRIPT_ARGS_ENV, None)
            env_set.update({setting.name: setting.value for setting in script_args_env(self.prepared.swift, swift)})
            # the name of a dir of this attempt's own, where the script's own output dir holds earlier checkpoints
            env_set[FRESH_DIR_ENV] = f"v{number}-{self.run_dir.name}"
            newest = latest_complete(swift_output_dir)[0] if resume is None and versioned_because else None
            if newest is not None:  # the script's own get_last_checkpoint gets it, where the fresh dir has none
                env_set[LAST_CHECKPOINT_ENV] = str(newest.path)
            trainer_argv = self.prepared.swift.argv()
        config = self.prepared.swift
        from_config = {**config.config_env, "SWIFT_CONFIG_FILE": config.config_file} if config.config_file else {}
        env = {
            **from_config,
            **self.base_env,
            **env_set,
            "PET_LOG_DIR": str(attempt_dir / "torchelastic"),
            resolved.ENV_NAME: str(resolved.path_in(attempt_dir)),  # where the worker reports swift's arguments
            NOTICE_DIR_ENV: str(attempt_dir),
            LAUNCHER_PID_ENV: str(os.getpid()),  # a rank whose torchrun died before it tied itself stops
        }
        argv = [*plan.command[: len(plan.command) - len(plan.swift_argv)], *trainer_argv]
        ds_config = args.deepspeed_file[1] if args.deepspeed_file is not None else self._config_of(settings.deepspeed)
        record = AttemptRecord(
            number=number,
            settings=settings,
            command=argv,
            env_set=env_set,
            log_path=str(attempt_dir / "console.log"),
            started=ev.now_iso(),
            change=self.prepared.backend.spelled(change[0]) if change else None,
            change_reason=change[1] if change else None,
            resumed_from=resume,
            skipped_incomplete=skipped,
            deepspeed_config_written=written,
            versioned_because=versioned_because,
            estimate=attempt_estimate(
                swift, self.prepared.model, plan.topology, self.prepared.host, ds_config, env, plan.assumed_length
            ),
            predicted_need_bytes=predicted,
        )
        self._announce(record)
        self.on_attempt([*self.attempts, record])  # the report shows the attempt under way, should we be killed
        try:
            self.runner.run(record, argv, env, attempt_dir, resume)
        except CoordinationLost:  # the run ends here: the attempt, filled in to its end, is still part of it
            self.attempts.append(record)
            raise
        trained_from = record.resolved.trained_from if record.resolved is not None else None
        if resume is None and trained_from is not None:  # the script's own resume: it went on from there
            record.resumed_from = given_resume(Path(trained_from), weights_only=False)
        if resume is not None and record.started_over is not None:
            why = record.started_over
            sys.stderr.write(f"safe-sft: attempt {number} did not resume from step {resume.step}: {why}\n")
        return record

    def _config_of(self, rung: str | None) -> Mapping[str, Any] | None:
        """The DeepSpeed config an attempt at `rung` runs with: the user's own while on its rung, else the
        shipped one (swift's own names below zero2 by their stage alone)."""
        if rung is None:
            return None
        own = self.prepared.user_deepspeed
        if own is not None and own.rung == rung:
            return own.config
        if rung in self.templates:
            return self.templates[rung]
        stage = int(rung[4]) if rung[4:5].isdigit() else 0
        offload = {"offload_optimizer": {"device": "cpu"}} if rung.endswith("_offload") else {}
        return {"zero_optimization": {"stage": stage, **offload}}

    def _announce(self, record: AttemptRecord) -> None:
        lines = [f"safe-sft: attempt {record.number}/{self.config.max_attempts}"]
        if record.change:
            lines.append(f"safe-sft:   change: {record.change} ({record.change_reason})")
        if record.predicted_need_bytes:
            lines.append(f"safe-sft:   predicted need: {fmt_bytes(record.predicted_need_bytes)} per GPU")
        if record.resumed_from:
            how = (  # resume_only_model loads the weights alone: the warm-up and decay begin again
                f" (weights only: {record.resumed_from.why_weights_only}; the optimizer and the learning-rate "
                "schedule start over)"
                if record.resumed_from.weights_only
                else ""
            )
            lines.append(
                f"safe-sft:   resume from {record.resumed_from.checkpoint} (step {record.resumed_from.step}){how}"
            )
        if record.number == 1 and record.resumed_from:
            changed = batch_change(Path(record.resumed_from.checkpoint), record.settings)
            if changed:
                lines.append(f"safe-sft:   note: {changed}")
            if self.config.resume_latest and (later := later_by_name(Path(record.resumed_from.checkpoint))):
                lines.append(
                    f"safe-sft:   note: {later} is at a higher step, in a run swift numbered later, though its files "
                    "are older (a copy that did not keep their times?): to go on from it, rerun with "
                    f"--resume_from_checkpoint {later} in place of --resume-latest"
                )
        if record.resumed_from and (missing := missing_rng_states(Path(record.resumed_from.checkpoint))):
            files = ", ".join(f"rng_state_{r}.pth" for r in missing)
            lines.append(
                f"safe-sft:   note: the checkpoint has no {files}: rank(s) {', '.join(map(str, missing))} go on with "
                "a fresh random state (dropout and other random draws differ from an exact resume there; the data "
                "order, drawn from the sampler's seed, does not)"
            )
        for path, why in record.skipped_incomplete.items():
            lines.append(f"safe-sft:   skipped unreadable checkpoint {path} ({why})")
        # a requeue mark and the user's own --resume_from_checkpoint always give the first attempt a resume point
        if record.number == 1 and record.resumed_from is None and self.config.resume_latest:
            found = "no complete checkpoint" if record.skipped_incomplete else "no checkpoint"
            lines.append(f"safe-sft:   --resume-latest: {found} under {self.output_dir}: training from step 0")
        if record.versioned_because and self.prepared.backend.has("add_version"):
            lines.append(f"safe-sft:   --add_version true for this attempt: {record.versioned_because}")
        elif record.versioned_because:
            lines.append(f"safe-sft:   a fresh output dir for this attempt: {record.versioned_because}")
        if record.deepspeed_config_written:
            lines.append(f"safe-sft:   deepspeed config written: {record.deepspeed_config_written}")
        lines.append(f"safe-sft:   log: {record.log_path}")
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()


def _download_env(env: Mapping[str, str]) -> str:
    """The variables that chose where the failed downloads went, as set for the run (a proxy's password masked)."""
    chosen = [f"{name}={mask_value(env[name])}" for name in DOWNLOAD_ENV if env.get(name)]
    return "set here: " + ", ".join(chosen) if chosen else "none of USE_HF, HF_ENDPOINT, HTTPS_PROXY is set here"


def _measured(attempts: list[AttemptRecord]) -> list[tuple[int | None, int, bool]]:
    """(measured per-GPU peak, estimate, died of OOM) of each attempt that has an estimate."""
    out = []
    for a in attempts:
        if a.estimate is None:
            continue
        peak = max(a.memory.gpu_peak.values(), default=0) if a.memory is not None else None
        oom = a.failure is not None and a.failure.kind.value.startswith("cuda_oom")
        out.append((peak or None, a.estimate.gpu_need_bytes, oom))
    return out
