"""From the command line to a Plan: parse swift's argv once, probe (or assume) the facts, plan.

The glue between the impure probes and the pure planner, shared by `safe-sft plan` and the run path.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from launcher.backends import Backend
from launcher.backends.swift import SWIFT
from launcher.configs import config_dir, load_templates, read_user_deepspeed
from launcher.errors import SafeSftError, not_permitted
from launcher.model import (
    DataFacts,
    DatasetSample,
    GpuFacts,
    GpuInfo,
    HostFacts,
    HostMemory,
    Limits,
    ModelFacts,
    NetworkFacts,
    Plan,
)
from launcher.model_checks import model_checks
from launcher.plan.build import LaunchPaths, PlanOptions, build_plan, output_dir_of
from launcher.plan.ds_config import RUNG_NAMES, UserConfig
from launcher.plan.model_type import SwiftNaming
from launcher.plan.python_env import raised_deprecations
from launcher.plan.swift_args import SWIFT_OPTIONS_DOC, SwiftArgs
from launcher.plan.topology import OWN, TopologyRequest, run_topology
from launcher.plan.watchdog import Watchdog
from launcher.probe import probe_host
from launcher.probe.dataset import check_sample_count, probe_datasets
from launcher.probe.model_size import probe_model
from launcher.probe.network import loopback_among, resolve, route_interface
from launcher.units import parse_param_count, parse_size

WORKER = SWIFT.worker


@dataclass(frozen=True)
class LaunchOptions:
    """safe-sft's own flags that shape the plan (parsed by the CLI)."""

    topology: TopologyRequest = field(default_factory=TopologyRequest)
    model_params: str | None = None
    nccl_env: tuple[str, ...] = ()
    force: bool = False
    layout: str | None = None  # --layout: auto | device_map | processes
    assume_gpus: str | None = None
    assume_ram: str | None = None
    assume_nodes: int | None = None
    watchdog: Watchdog = field(default_factory=Watchdog)

    @property
    def assumes_machine(self) -> bool:
        """The plan is for another machine (--assume-*): this one's network, limits and files are not its."""
        return bool(self.assume_gpus or self.assume_ram) or self.assume_nodes is not None


@dataclass(frozen=True)
class Prepared:
    swift: SwiftArgs
    host: HostFacts
    model: ModelFacts | None
    plan: Plan
    user_deepspeed: UserConfig | None = None  # the user's own --deepspeed file or inline JSON, read once
    backend: Backend = SWIFT  # the trainer the arguments are for
    # swift would stop on the model's type, its template or LoRA targets it lacks (the run refuses)
    model_error: SafeSftError | None = None

    deepspeed_installed: bool = True  # DeepSpeed is there for the Python every rank runs
    reread: tuple[tuple[str, str], ...] = ()  # files the trainer reads at each attempt, with their sha256 now

    @property
    def output_dir(self) -> Path:
        return Path(output_dir_of(self.swift))

    @property
    def missing(self) -> frozenset[str]:
        """The knobs the ladder leaves alone: the trainer's missing ones, and the ZeRO stage where DeepSpeed is
        not installed (a rung to it stopped every rank on its import: hostile47lf F3)."""
        return self.backend.missing | (frozenset() if self.deepspeed_installed else frozenset({"deepspeed"}))


MAX_GPUS_PER_NODE = 64  # more than any node has; a cluster is --assume-nodes nodes of these


def parse_assumed_gpus(text: str) -> tuple[GpuInfo, ...]:
    """`8x80GiB` -> eight idle 80 GiB GPUs; `24GiB` -> one."""
    match = re.match(r"^\s*(?:(\d+)\s*[xX*]\s*)?(.+)$", text)
    count = int(match.group(1)) if match and match.group(1) else 1
    size = parse_size(match.group(2) if match else text, "--assume-gpus")
    if count < 1:
        raise SafeSftError(f"--assume-gpus {text!r} has no GPUs", "write it like 8x80GiB")
    if count > MAX_GPUS_PER_NODE:
        raise SafeSftError(
            f"--assume-gpus {text!r}: {count} GPUs in one node",
            f"write one node's GPUs (at most {MAX_GPUS_PER_NODE}) and the number of nodes with --assume-nodes",
        )
    if size < 1:
        raise SafeSftError(f"--assume-gpus {text!r} gives GPUs of no memory", "write it like 8x80GiB")
    return tuple(
        GpuInfo(index=i, uuid=f"GPU-assumed-{i}", name="assumed", total_bytes=size, free_bytes=size, used_bytes=0)
        for i in range(count)
    )


NCCL_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_")


def parse_nccl_env(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--nccl-env` pairs: NCCL's own variables and torch's TORCH_NCCL_* ones, nothing else.

    Anything else (CUDA_VISIBLE_DEVICES, LD_PRELOAD) would bypass the topology's checks or change far more
    than NCCL; such variables belong in the environment safe-sft is started with.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not re.match(r"^[A-Z_][A-Z0-9_]*$", name):
            raise SafeSftError(f"--nccl-env {pair!r} is not KEY=VALUE", "write it like --nccl-env NCCL_P2P_DISABLE=1")
        if not name.startswith(NCCL_ENV_PREFIXES):
            raise SafeSftError(
                f"--nccl-env {pair!r}: {name} is not an NCCL variable (only NCCL_* and TORCH_NCCL_*)",
                f"set it in the environment instead: `{name}=... safe-sft ...`",
            )
        out[name] = value
    return out


def apply_assumptions(host: HostFacts, options: LaunchOptions) -> HostFacts:
    """Another machine's facts in place of this one's. Its network (InfiniBand, interfaces), limits
    (memlock, /dev/shm) and, without --assume-ram, its RAM are unknown: nothing of this machine stands in
    for them."""
    if options.assumes_machine:
        host = replace(
            host,
            network=NetworkFacts(known=False),
            limits=Limits(memlock=None, nofile=None, shm_bytes=None),
            memory=HostMemory(
                None, None, warnings=("the assumed machine's host RAM is unknown: not checked (pass --assume-ram)",)
            ),
        )
    if options.assume_gpus:
        host = replace(host, gpus=GpuFacts(gpus=parse_assumed_gpus(options.assume_gpus), driver_version="assumed"))
    if options.assume_ram:
        ram = parse_size(options.assume_ram, "--assume-ram")
        if ram < 1:
            raise SafeSftError(f"--assume-ram {options.assume_ram!r} is no memory", "write it like 512GiB")
        host = replace(host, memory=HostMemory(available_bytes=ram, total_bytes=ram))
    return host


def prepare(
    swift_argv: list[str] | tuple[str, ...],
    options: LaunchOptions,
    env: Mapping[str, str],
    host: HostFacts | None = None,
    backend: Backend = SWIFT,
) -> Prepared:
    """The plan for the user's arguments to `backend`'s trainer (swift's argv by default)."""
    read = backend.read(list(swift_argv))
    swift = with_home_expanded(read.args, backend.lexical_paths)
    # A plan for an assumed machine may name that machine's files: missing ones stay the probes' warnings.
    named = read_named_inputs(swift, backend, assumed=options.assumes_machine, check_named=read.check_named)
    user_deepspeed, data = named.user_deepspeed, named.data
    output_dir = Path(output_dir_of(swift))
    host = apply_assumptions(host or probe_host(output_dir), options)

    request = options.topology
    if options.assume_nodes is not None:
        if options.assume_nodes < 1:  # named as typed: the topology would say NNODES=0 (flag)
            raise SafeSftError(f"--assume-nodes {options.assume_nodes} is no machine", "plan for 1 or more nodes")
        request = replace(request, nnodes=options.assume_nodes, allow_loopback_master=True)
    topology = run_topology(request, env, host, swift)
    params = parse_param_count(options.model_params) if options.model_params else None
    model_name = swift.get(backend.model_key)
    model = probe_model(model_name, env, Path.home(), params) if model_name else None
    checked = model_checks(backend, swift, model_name, model, here=not options.assumes_machine)
    naming = checked.naming
    if model is not None and naming is not None:
        model = replace(model, swift_model_type=naming.model_type)
    if data is not None and backend.name == "swift":
        data = replace(data, default_system=default_system_chars(swift, naming))
    probe_route = topology.nnodes.value > 1 and host.network.known
    master_addresses = resolve(topology.master_addr.value) if probe_route else ()
    if probe_route and topology.node_rank.value > 0 and not request.allow_loopback_master:
        check_master_not_loopback(topology.master_addr.value, master_addresses, topology.node_rank.value)
    iface = route_interface(master_addresses)
    plan = build_plan(
        swift,
        topology,
        host,
        model,
        env=env,
        paths=LaunchPaths(
            python=sys.executable,
            worker=str(backend.worker),
            config_dir=str(config_dir()),
            worker_args=read.worker_args,
        ),
        options=PlanOptions(
            force=options.force,
            nccl_overrides=parse_nccl_env(options.nccl_env),
            route_interface=iface,
            user_deepspeed_rung=user_deepspeed.rung if user_deepspeed else None,
            user_deepspeed_config=user_deepspeed.config if user_deepspeed else None,
            user_deepspeed_stem=user_deepspeed.stem if user_deepspeed else None,
            deepspeed_configs=load_templates(),
            watchdog=options.watchdog,
            layout=options.layout,
            nproc_given=options.topology.nproc is not None,
            own_parser=backend.own_parser,
            backend=backend.name,
            device_map_allowed=backend.device_map,
            backend_notes=backend.notes(),
            backend_env=backend.launch_env(env),
            ddp_timeout_by_env=backend.own_parser,
        ),
        data=data,
    )
    refusal = [f"{checked.error} (the run refuses to start)"] if checked.error else []
    raised = raised_deprecations(env) if backend.name == "swift" else None
    empty = swift.get("output_dir") == ""  # a script's `--output_dir "$OUT"` with OUT unset, most often
    cwd = [f"output_dir is empty: the trainer writes its runs into {Path.cwd()}"] if empty else []
    warnings = (*read.warnings, *named.warnings, *checked.warnings, *refusal, *([raised] if raised else []), *cwd)
    if warnings:
        plan = replace(plan, warnings=(*plan.warnings, *warnings))
    reread = tuple((path, file_digest(path)) for path in read.reread)
    return Prepared(swift, host, model, plan, user_deepspeed, backend, checked.error, deepspeed_installed(), reread)


def file_digest(path: str) -> str:
    """A file's sha256 ("" where it cannot be read: gone or unreadable is a change too)."""
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


HOME_PATHS = ("output_dir", "resume_from_checkpoint")  # swift's to_abspath and transformers expand `~` in these


def with_home_expanded(swift: SwiftArgs, lexical: bool = False) -> SwiftArgs:
    """The output and resume dirs as the trainer reads them: safe-sft's lock, report, checkpoint checks and
    overwrite guard then look where the trainer writes. A `~` that no shell expanded (`--output_dir=~/out`, a
    config file's value) expanded, as the trainers do themselves, not a `./~` dir of safe-sft's own. And for a
    `lexical` trainer (swift: os.path.abspath), a `..` taken out of the text: `lnk/../out` is `./out` to swift
    but, past a symlink, another dir to the file system, where safe-sft had looked for checkpoints, locked and
    guarded while swift saved over the checkpoints in `./out`. swift gets the value it would make itself."""
    updates = {}
    for key in HOME_PATHS:
        value = swift.get(key)
        if not value:
            continue
        read = os.path.expanduser(value) if value[:1] == "~" else value
        if lexical and ".." in Path(read).parts:
            read = os.path.abspath(read)
        if read != value:
            updates[key] = read
    return swift.with_values(updates) if updates else swift


@dataclass(frozen=True)
class NamedInputs:
    """What the arguments name, read once: the user's own DeepSpeed config and the datasets' sample."""

    user_deepspeed: UserConfig | None
    data: DataFacts | None
    warnings: tuple[str, ...] = ()  # what a plan for another machine found missing here


def read_named_inputs(
    swift: SwiftArgs,
    backend: Backend = SWIFT,
    *,
    assumed: bool = False,
    check_named: Callable[[], None] | None = None,
) -> NamedInputs:
    """The run's checks of the trainer's values and of what they name, in this order: the values, the
    --deepspeed config, the model's path, the datasets' sample counts and files, the trainer's own check of
    its files (`check_named`) (SafeSftError at the first bad one). `assumed`: a plan for another machine,
    whose model and dataset files need not be here (the trainer's own check's error is a warning then)."""
    swift.check_values()
    check_deepspeed_name(swift, backend)
    user_deepspeed = read_user_deepspeed(
        swift.get("deepspeed"), repair=backend.name == "swift", names=backend.deepspeed_names
    )
    model_name = swift.get(backend.model_key)
    if model_name == "" and backend.name in ("swift", "llamafactory"):  # the trainer stops on it, retried or not
        raise SafeSftError(
            f"{swift.spelled(backend.model_key)} is empty",
            "give the model's folder or hub id (is the shell variable that should hold it set?)",
        )
    if model_name and not assumed:
        check_model_path(model_name, swift.spelled(backend.model_key))
    data = checked_data(swift, backend.dataset_key, assumed) if backend.dataset_key else None
    for key in backend.checked_data_keys:  # the evaluation's files: checked alike, not in the estimate
        checked_data(swift, key, assumed)
    warnings: tuple[str, ...] = ()
    try:
        if check_named is not None:
            check_named()
    except SafeSftError as err:
        if not assumed:
            raise
        warnings = (f"{err.message} (not checked further: the plan is for another machine)",)
    return NamedInputs(user_deepspeed, data, warnings)


def first_attempt_terms(prepared: Prepared, resume_latest: bool, max_attempts: int) -> dict[str, str]:
    """What every node's first attempt must share (launcher.plan.consensus.launch_terms): the trainer's
    options as given here (a config file's values under the command line's: each node may read its own
    copy of the file), the planned strategy, the processes per node, --resume-latest, --max-attempts, NNODES."""
    from launcher.plan.consensus import launch_terms  # several nodes only

    swift = prepared.swift
    given = {swift.key_of(flag): " ".join(values) for flag, values in swift.items if flag.startswith("--")}
    options = {**swift.config_values, **given}
    topology = prepared.plan.topology
    return launch_terms(
        options, prepared.plan.strategy, topology.nproc_per_node.value, resume_latest, max_attempts,
        topology.nnodes.value,
    )  # fmt: skip


def refuse_assumptions(options: LaunchOptions) -> None:
    """The run path trains on the hardware that is here: `--assume-*` belongs to `safe-sft plan` alone."""
    for flag, value in (
        ("--assume-gpus", options.assume_gpus),
        ("--assume-ram", options.assume_ram),
        ("--assume-nodes", options.assume_nodes),
    ):
        if value is not None:
            raise SafeSftError(
                f"{flag} {value} on the run path: training uses the hardware that is here, not assumed hardware",
                f"use `safe-sft plan {flag} {value} ...` to plan for other hardware; drop it to train",
            )


def check_launchable(prepared: Prepared) -> None:
    """What the plan may show but the run path must not start: CPU training nobody asked for, an output
    dir nothing can be written to."""
    if prepared.host.disk_problem:
        raise SafeSftError(
            f"--output_dir {prepared.output_dir}: {prepared.host.disk_problem}",
            "point --output_dir at a writable directory",
        )
    # a script of the user's may set use_cpu in its own code: its --nproc (CPU processes) says the same
    nproc = prepared.plan.topology.nproc_per_node.source in OWN and prepared.backend.own_parser
    if not prepared.plan.topology.gpus and not prepared.swift.get_bool("use_cpu", False) and not nproc:
        why = next((w for w in prepared.host.gpus.warnings), "NVML lists no GPU")
        spelling = prepared.swift.spelling  # a trainer's own overrides (LLaMA-Factory's `use_cpu=true`)
        add = (spelling.token("use_cpu", ("true",)) if spelling else None) or "--use_cpu true"
        raise SafeSftError(
            f"no GPU visible ({why}) and {prepared.swift.spelled('use_cpu')} not given",
            f"add {add} to train on the CPU (a script that sets it itself: give safe-sft its --nproc), or fix "
            "the GPU driver (`safe-sft doctor`)",
        )


def check_trainer_installed(backend: Backend) -> None:
    """The trainer's package is there for this Python, which every rank runs: without it each rank stops on
    its first import, after torchrun has started them all."""
    if backend.trainer is None:
        return
    import importlib.util
    import sys

    module, distribution = backend.trainer
    if importlib.util.find_spec(module) is None:
        raise SafeSftError(
            f"{backend.command}: no {module} package for {sys.executable}, the Python every rank runs",
            f"run safe-sft from the environment that has {distribution} installed (pip install safe-sft there)",
        )


def deepspeed_installed() -> bool:
    """Whether DeepSpeed is there for this Python, which every rank runs (found, not imported)."""
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


def check_deepspeed_installed(prepared: Prepared) -> None:
    """A DeepSpeed config of the user's where DeepSpeed is not installed stops every rank on its import."""
    if prepared.deepspeed_installed or prepared.user_deepspeed is None:
        return
    import sys

    raise SafeSftError(
        f"{prepared.swift.spelled('deepspeed')} is given, and DeepSpeed is not installed for {sys.executable}, "
        "the Python every rank runs",
        f"pip install deepspeed there, or leave {prepared.swift.spelled('deepspeed')} out",
    )


def check_swift_options(swift: SwiftArgs, backend: Backend) -> None:
    """An option the installed swift sft does not have stops every rank at start (`remaining_argv`), unless
    --ignore_args_error true: refused before anything starts, where the installed ms-swift is the version
    safe-sft's option table was read from (another version may have the option: the plan warns only)."""
    ambiguous = swift.ambiguous_flags() if backend.name == "swift" else ()
    if ambiguous:
        flag, matches = ambiguous[0]
        shown = ", ".join(f"--{m}" for m in matches[:4]) + (", ..." if len(matches) > 4 else "")
        raise SafeSftError(
            f"{flag} is the start of {len(matches)} options of swift sft ({shown}): its parser stops on it in "
            "every rank as ambiguous, --ignore_args_error or not",
            "write the option whole",
        )
    unknown = swift.unknown_flags() if backend.name == "swift" else ()  # none under --ignore_args_error true
    if not unknown:
        return
    from launcher.backends.swift import table_version
    from launcher.backends.swift_models import installed_swift_like
    from launcher.plan.swift_args import unknown_flag_warning

    installed = installed_swift_like(table_version())
    if installed is None:
        return
    raise SafeSftError(
        unknown_flag_warning(unknown[0], swift.options, f"swift sft {installed}"),
        f"write the option as swift sft spells it ({SWIFT_OPTIONS_DOC}), or drop it",
    )


def default_system_chars(swift: SwiftArgs, naming: SwiftNaming | None) -> tuple[int, int, int, int] | None:
    """The system prompt swift writes into a row without its own, as characters by script: --system (its
    text, or the .txt file it names, as swift reads it), else the template's default; None where unknown."""
    from launcher.backends.swift_models import swift_models
    from launcher.probe.dataset import chars

    given = swift.get("system")
    if given is not None:
        if not given.endswith(".txt"):
            return chars(given.replace("\\n", "\n"))
        try:
            return chars(Path(given).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as err:
            why = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
            raise SafeSftError(
                f"--system {given!r} names a .txt file that cannot be read ({why})",
                "give the path of the system prompt's file, or the prompt itself (without .txt at its end)",
            ) from None
    template = naming.template if naming else None
    return swift_models().system_chars.get(template) if template else None


def check_deepspeed_name(swift: SwiftArgs, backend: Backend) -> None:
    """swift's names for a ZeRO config (`--deepspeed zero2`) are swift's own: transformers under another
    trainer takes a file or inline JSON, and stops on the name in every rank after the start."""
    name = swift.get("deepspeed")
    if backend.deepspeed_names or name not in RUNG_NAMES:
        return
    shipped = sorted(p.name for p in config_dir().glob("*.json"))
    key = swift.spelled("deepspeed")
    raise SafeSftError(
        f"{key} {name} is one of swift's names, which {backend.command} does not take (a file or inline JSON)",
        f"give a config file: safe-sft ships {', '.join(shipped)} in {config_dir()}",
    )


def check_master_not_loopback(master_addr: str, addresses: tuple[str, ...], node_rank: int) -> None:
    """On a node other than node 0, a MASTER_ADDR name that resolves (to `addresses`) to this host's
    loopback (a host name /etc/hosts maps to 127.0.1.1) leads nowhere: node 0's store is on another host.
    (On node 0 it may: the store listens on every address.)"""
    loopback = loopback_among(addresses)
    if loopback is not None:
        raise SafeSftError(
            f"MASTER_ADDR={master_addr} resolves to {loopback} on this host, node {node_rank}: its own loopback, "
            "where node 0's safe-sft is not",
            "set MASTER_ADDR to node 0's address (its IP, or a name every node resolves to it), or pass "
            "--allow-loopback-master when every node runs on this one machine",
        )


def checked_data(swift: SwiftArgs, key: str, assumed: bool) -> DataFacts | None:
    """The files of one data option (--dataset, --val_dataset) sampled, each value checked as swift's loader
    will take it (check_dataset_files; not the files where the plan is for another machine). swift strips a
    value's spaces (DatasetSyntax.parse): `' data.jsonl'` from a YAML list is the local file. A value that
    names nothing (`''`, spaces, `#500` alone: a script's `--dataset "$DATA"` with DATA unset) leaves swift
    no dataset, and every rank stops on a TypeError once the model has loaded."""
    specs = tuple(spec.strip() for spec in swift.get_values(key))
    empty = next((given for given in swift.get_values(key) if not given.strip().partition("#")[0]), None)
    if empty is not None:
        raise SafeSftError(
            f"--{key} {empty!r} names no dataset",
            "give the dataset's file or hub id (is the shell variable that should hold it set?)",
        )
    for spec in specs:
        check_sample_count(spec, Path.cwd(), f"--{key}")
    if not specs:
        return None
    data = probe_datasets(specs, Path.cwd(), swift.get("columns"))
    if not assumed:
        check_dataset_files(data, f"--{key}")
    return data


def check_model_path(model: str, name: str) -> None:
    """A model written as a path (`/`, `./`, `../`, `~`) must be there: swift would take a missing one for a
    hub id (or refuse an absolute one) only after its start-up."""
    if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().exists():
        raise SafeSftError(
            f"{name} {model!r} is no directory here",
            "check the path (a relative one is read from where safe-sft runs); a hub id is written like "
            "Qwen/Qwen2.5-7B-Instruct",
        )
    if Path(model).expanduser().is_file():
        raise SafeSftError(
            f"{name} {model!r} is a file, not a model's directory",
            "give the directory that holds its config.json and weights",
        )


COMPRESSED = frozenset({"gz", "bz2", "xz", "zst", "zip", "tgz", "lz4"})


def _extension(suffix: str) -> str:
    return f"its extension {suffix!r}" if suffix else "a name without an extension"


def _suffix_fix(path: Path) -> str:
    suffix = path.suffix.lstrip(".")
    if suffix.lower() in COMPRESSED:
        return f"decompress it and give the file inside (as {path.with_suffix('')})"
    if suffix.lower() in ("jsonl", "json", "csv", "txt", "parquet"):
        return f"rename it to {path.with_suffix('.' + suffix.lower()).name}"
    return "give it as .jsonl, .json, .csv, .txt or .parquet"


def _reencode_fix(sample: DatasetSample) -> str:
    name = sample.path or sample.spec
    if sample.encoding == "UTF-8 with BOM":
        return f"save it without the byte-order mark (sed -i '1s/^\\xEF\\xBB\\xBF//' {name}), or as JSON Lines"
    utf8 = Path(name).with_suffix(f".utf8{Path(name).suffix}")
    return f"save it as UTF-8: iconv -f {sample.encoding} -t UTF-8 {name} > {utf8}, and give that"


def _check_folders_enterable(path: Path) -> None:
    """A file that looks missing because a folder above it may not be entered: that folder, named."""
    for folder in reversed(path.absolute().parents):
        if folder.is_dir() and not os.access(folder, os.X_OK):
            raise not_permitted(
                f"{path}: this user may not enter {folder}, so the file cannot be read (Permission denied)", path
            )


def check_dataset_files(data: DataFacts, option: str = "--dataset") -> None:
    """A `--dataset` with a file's name (the probe marks it `missing`) must be a file: swift would take a
    missing one for a hub dataset id and fail only after trying to download it. A local file must have a
    row (the probe marks one of whitespace or `[]` `empty`): swift's loader stops on it, after the model
    has loaded, with an error that names no file."""
    missing = next((d for d in data.datasets if d.missing), None)
    if missing is not None:
        _check_folders_enterable(Path(missing.spec).expanduser())
        where = "" if Path(missing.spec).expanduser().is_absolute() else f" in {Path.cwd()}"
        raise SafeSftError(
            f"{option} {missing.spec!r} is no file{where} (swift would look for it on the hub)",
            "check the path: a relative one is read from where safe-sft runs; a hub dataset id takes ms:: or hf::",
        )
    named = next((d for d in data.datasets if d.unloadable_suffix is not None), None)
    if named is not None:
        raise SafeSftError(
            f"{option} {named.spec!r}: swift loads a file with the datasets loader its extension names, as "
            f"written, and {_extension(named.unloadable_suffix or '')} names none (it looks that up on the hub "
            "once the model has loaded, and stops)",
            _suffix_fix(Path(named.path or named.spec)),
        )
    encoded = next((d for d in data.datasets if d.encoding), None)
    if encoded is not None:
        raise SafeSftError(
            f"{option} {encoded.spec!r} is {encoded.note}, which swift's loader cannot read: it stops on the "
            "whole file after the model has loaded",
            _reencode_fix(encoded),
        )
    broken = next((d for d in data.datasets if d.not_json), None)
    if broken is not None:
        encoding = "is not UTF-8" in (broken.not_json or "")
        name = broken.path or broken.spec
        raise SafeSftError(
            f"{option} {broken.spec!r} has a line that is "
            f"{'not UTF-8' if encoding else 'not a JSON object'}: {broken.not_json}",
            f"save it as UTF-8 (iconv -f latin1 -t UTF-8 {name} > {Path(name).with_suffix('.utf8.jsonl').name}, "
            "for Latin-1 text), and give that"
            if encoding
            else "fix or remove that line: swift's loader stops on the whole file there, after the model has loaded",
        )
    empty = next((d for d in data.datasets if d.empty), None)
    if empty is not None:
        raise SafeSftError(
            f"{option} {empty.spec!r} is empty (swift's loader finds no rows in it and stops)",
            f"give a file with rows, or leave it out of {option}",
        )
