"""Preflight checks from probed facts: each passes, warns or fails, with the fix. Pure.

Beside the machine's facts, doctor checks what the run would refuse before it starts (exit 2 there): the
topology as the run resolves it from the environment, a swift config's ENV block and Slurm, the swift
arguments' values, and the model's type and template as swift decides them. Each such problem is a
failing check here, with the run's own message and fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from launcher.errors import SafeSftError
from launcher.model import HostFacts, Topology
from launcher.plan.shm import SHM_FIX, SHM_MIN_BYTES
from launcher.plan.swift_args import SwiftArgs
from launcher.plan.topology import TopologyRequest, run_topology
from launcher.run.memlock import MemlockStatus
from launcher.run.ports import check_ports_free
from launcher.units import GiB, fmt_bytes


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


DISK_FAIL_BYTES = 10 * GiB
DISK_WARN_BYTES = 50 * GiB
REQUIRED = ("torch", "ms-swift", "deepspeed", "transformers")


def run_checks(
    host: HostFacts,
    memlock: MemlockStatus,
    *,
    nproc: int | None = None,
    cores: int | None = None,
    topology: Topology | SafeSftError | None = None,
    swift_args: SafeSftError | None = None,
    on_cpu: bool = False,
    pins: bool = True,
) -> list[Check]:
    """Every check; `nproc` is NPROC_PER_NODE as given (None: unset), `cores` the usable CPU cores,
    `topology` the run's topology or why the run would refuse it (None: not resolved), `swift_args` why the
    run would refuse the swift arguments' values (None: it would not, or none were given), `on_cpu` whether
    the run trains on the CPU (gloo, no NCCL variable set), `pins` whether it may lock host memory (GPUs, or
    DeepSpeed: a CPU run without it pins none)."""
    run = [_topology(topology)] if topology is not None else []
    if swift_args is not None:
        run.append(Check("swift_args", Status.FAIL, swift_args.message, swift_args.hint))
    return [
        *run,
        _gpus(host),
        _cpu_cores(nproc, cores),
        _gpu_free(host),
        _memlock(memlock, pins),
        _shm(host),
        _host_ram(host),
        _network(host, on_cpu),
        _disk(host),
        _versions(host),
        _hang_stacks(host),
    ]


def as_the_run_reads(
    swift: SwiftArgs | None, env: Mapping[str, str], host: HostFacts, nproc: int | None = None
) -> tuple[Topology | SafeSftError, SafeSftError | None]:
    """What the run would make of these arguments on this machine before it starts: its topology (with the
    run's --nproc, where given), or the error that stops it there; and the error the arguments' value checks
    raise, or None."""
    bad_args = None
    try:
        if swift is not None:
            from launcher.backends.swift import SWIFT
            from launcher.model_checks import swift_model_checks
            from launcher.prepare import check_swift_options, read_named_inputs
            from launcher.probe.model_size import probe_model

            check_swift_options(swift, SWIFT)  # an option swift sft does not have: the run refuses it too
            read_named_inputs(swift)
            model_name = swift.get("model")
            if model_name:  # what swift decides from the model before it trains: type, template, LoRA targets
                model_error = swift_model_checks(swift, model_name, probe_model(model_name, env, Path.home())).error
                if model_error is not None:
                    raise model_error
    except SafeSftError as err:
        bad_args = err
    topology: Topology | SafeSftError
    try:
        topology = run_topology(TopologyRequest(nproc=nproc), env, host, swift)
        check_ports_free(topology, None)  # a port in use on this host: the run refuses it (hostile47env F8)
    except SafeSftError as err:
        topology = err
    return topology, bad_args


def _topology(topology: Topology | SafeSftError) -> Check:
    if isinstance(topology, SafeSftError):
        return Check("topology", Status.FAIL, topology.message, topology.hint)
    shown = (
        f"{topology.nnodes.value} node(s) ({topology.nnodes.source.value}), this is node "
        f"{topology.node_rank.value}, {topology.nproc_per_node.value} process(es) per node "
        f"({topology.nproc_per_node.source.value}), master {topology.master_addr.value}:{topology.master_port.value}"
    )
    if topology.warnings:
        return Check("topology", Status.WARN, f"{shown}; {'; '.join(topology.warnings)}")
    return Check("topology", Status.PASS, shown)


def _gpus(host: HostFacts) -> Check:
    gpus = host.gpus.gpus
    if not gpus:
        why = host.gpus.warnings[0] if host.gpus.warnings else "NVML lists no GPU"
        return Check(
            "gpus",
            Status.WARN,
            f"no GPU visible ({why}); only CPU training (--use_cpu true) can run",
            "install the NVIDIA driver, or check the container's --gpus option",
        )
    kinds = {(g.name, g.total_bytes) for g in gpus}
    detail = f"{len(gpus)} x {gpus[0].name} ({fmt_bytes(gpus[0].total_bytes)}), driver {host.gpus.driver_version}"
    if len(kinds) > 1:
        return Check(
            "gpus",
            Status.WARN,
            f"GPUs differ: {sorted(kinds)}; the smallest sets the per-GPU budget",
            "select alike GPUs with --gpus",
        )
    return Check("gpus", Status.PASS, detail)


def _gpu_free(host: HostFacts) -> Check:
    busy = [g for g in host.gpus.gpus if g.free_bytes < 0.5 * g.total_bytes]
    if not host.gpus.gpus:
        return Check("gpu_memory", Status.WARN, "no GPU to check")
    if busy:
        names = ", ".join(
            f"GPU {g.index}: {fmt_bytes(g.free_bytes)} free, {g.compute_processes} processes" for g in busy
        )
        return Check(
            "gpu_memory",
            Status.WARN,
            f"already in use: {names}",
            "`--gpus auto` leaves busy GPUs out; or stop the other processes",
        )
    return Check("gpu_memory", Status.PASS, "every GPU has at least half its memory free")


def _memlock(memlock: MemlockStatus, pins: bool = True) -> Check:
    if memlock.problem is None:
        return Check("memlock", Status.PASS, "RLIMIT_MEMLOCK unlimited" + (" (raised)" if memlock.raised else ""))
    if not pins:  # as the plan says it (hostile47env F9): the limit is low, and this run locks nothing
        return Check(
            "memlock", Status.PASS, f"{memlock.problem} (not by this run: CPU training without DeepSpeed pins none)"
        )
    soft = fmt_bytes(memlock.before.soft) if memlock.before.soft is not None else "unlimited"
    detail = f"{memlock.problem} (soft was {soft}" + (", raised to the hard limit)" if memlock.raised else ")")
    return Check("memlock", Status.WARN, detail, memlock.fix or "")


def _shm(host: HostFacts) -> Check:
    shm = host.limits.shm_bytes
    if shm is None:
        return Check("shm", Status.WARN, "size of /dev/shm unknown")
    if shm < SHM_MIN_BYTES:
        return Check(
            "shm",
            Status.FAIL,
            f"/dev/shm is {fmt_bytes(shm)}: NCCL and dataloader workers will fail",
            SHM_FIX,
        )
    return Check("shm", Status.PASS, f"/dev/shm is {fmt_bytes(shm)}")


def _host_ram(host: HostFacts) -> Check:
    mem = host.memory
    if mem.available_bytes is None:
        return Check("host_ram", Status.WARN, "available RAM unknown")
    cap = f", capped by the cgroup limit {fmt_bytes(mem.cgroup_limit_bytes)}" if mem.cgroup_limit_bytes else ""
    return Check("host_ram", Status.PASS, f"{fmt_bytes(mem.available_bytes)} available{cap}")


def _network(host: HostFacts, on_cpu: bool = False) -> Check:
    ib = host.network.ib_devices
    if on_cpu:  # as the plan says: gloo talks over TCP, and safe-sft sets no NCCL variable
        return Check("network", Status.PASS, "CPU training: gloo over TCP sockets (no NCCL variable is set)")
    if ib:
        return Check("network", Status.PASS, f"InfiniBand: {', '.join(ib)}")
    return Check("network", Status.PASS, "no InfiniBand: NCCL will use TCP sockets (safe-sft sets NCCL_IB_DISABLE=1)")


def _disk(host: HostFacts) -> Check:
    free = host.disk_free_bytes
    where = host.disk_path or "the output dir"
    shown = f"{fmt_bytes(free)} free" if free is not None else "free space unknown"
    if host.disk_problem:
        return Check(
            "disk",
            Status.FAIL,
            f"{host.disk_problem} ({shown}): nothing can be written there",
            "point --output_dir at a writable directory",
        )
    if free is None:
        return Check("disk", Status.WARN, f"free disk at {where} unknown")
    if free < DISK_FAIL_BYTES:
        return Check(
            "disk",
            Status.FAIL,
            f"{shown} at {where}: checkpoints will not fit",
            "free space or point --output_dir at a larger disk",
        )
    if free < DISK_WARN_BYTES:
        return Check("disk", Status.WARN, f"{shown} at {where}", "large models need more")
    return Check("disk", Status.PASS, f"{shown} at {where}")


def _cpu_cores(nproc: int | None, cores: int | None) -> Check:
    if cores is None:
        return Check("cpu_cores", Status.WARN, "number of usable CPU cores unknown")
    if nproc is not None and nproc > cores:
        return Check(
            "cpu_cores",
            Status.WARN,
            f"NPROC_PER_NODE={nproc} with {cores} usable CPU core(s): each training process needs a core "
            "of its own, and runs crawl far above that",
            f"lower NPROC_PER_NODE to at most {cores}, or give the job more cores (Slurm: --cpus-per-task)",
        )
    shown = f", NPROC_PER_NODE={nproc}" if nproc is not None else ""
    return Check("cpu_cores", Status.PASS, f"{cores} usable CPU core(s){shown}")


def _versions(host: HostFacts) -> Check:
    missing = [name for name in REQUIRED if not host.versions.get(name)]
    shown = ", ".join(f"{k} {v}" for k, v in host.versions.items() if v)
    if missing:
        return Check(
            "versions",
            Status.FAIL,
            f"missing: {', '.join(missing)} (found {shown or 'nothing'})",
            "pip install torch first (the right CUDA build), then `pip install 'safe-sft[swift]'`",
        )
    swift = host.versions.get("ms-swift") or ""
    if not swift.split(".")[0].isdigit() or int(swift.split(".")[0]) < 4:
        return Check(
            "versions",
            Status.WARN,
            f"ms-swift {swift}: safe-sft is built for ms-swift 4.x",
            "pip install 'ms-swift>=4.6'",
        )
    return Check("versions", Status.PASS, shown)


def _hang_stacks(host: HostFacts) -> Check:
    version = host.versions.get("py-spy")
    if version:
        return Check("hang_stacks", Status.PASS, f"py-spy {version}: a hung attempt's Python stacks are collected")
    return Check(
        "hang_stacks",
        Status.WARN,
        "py-spy not installed: a hang is still detected and stopped, but without Python stacks",
        "pip install 'safe-sft[diagnose]'",
    )
