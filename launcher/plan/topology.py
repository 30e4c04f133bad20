"""Resolve who trains where: processes per node, nodes, rank, master address and port, GPUs.

Precedence for every value: safe-sft flag > the user's environment > the swift config's ENV block >
Slurm > default. Each value carries its source. DeepSpeed needs one process per GPU, so the process
count and the GPU selection are decided together; NPROC_PER_NODE=1 with several visible GPUs is swift's
one process over them (device_map), kept as such.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.errors import SafeSftError
from launcher.model import GpuInfo, HostFacts, Source, Sourced, Topology
from launcher.plan.slurm import SlurmEnv
from launcher.plan.swift_args import SwiftArgs
from launcher.units import parse_count

TORCHRUN_PORT = 29500  # torchrun's --master-port default, which plain `swift sft` on several nodes uses
# The least each variable can be (NODE_RANK: 0), and the least a fix suggests where the values between have
# words of their own (NPROC_PER_NODE=0: a count, not GPU 0; MASTER_PORT=0: out of range).
LEAST = {"NNODES": 1}
USABLE = {"NPROC_PER_NODE": 1, "MASTER_PORT": 1024}
AUTO_MIN_FREE_FRACTION = 0.5  # `--gpus auto` leaves out a GPU with less than half its memory free
# NPROC_PER_NODE words torchrun counts itself (torch.distributed.run determine_local_world_size): `gpu` is one
# process per visible GPU (none: it stops), `cpu` one per CPU core (os.cpu_count()), `auto` one per GPU where
# CUDA sees any, else one per core. Plain `swift sft` passes NPROC_PER_NODE to torchrun as it is.
TORCHRUN_WORDS = frozenset({"auto", "gpu", "cpu"})


def torchrun_word(nproc_per_node: str) -> bool:
    """NPROC_PER_NODE is a word torchrun turns into a count (auto, gpu, cpu)."""
    return nproc_per_node.strip() in TORCHRUN_WORDS  # torchrun compares them as they are: `GPU` fails there


@dataclass(frozen=True)
class TopologyRequest:
    """safe-sft's own launch flags (None: not given)."""

    gpus: str | None = None  # auto | N | comma list of indices or UUIDs
    nproc: int | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    allow_loopback_master: bool = False
    from_env: frozenset[str] = frozenset()  # the fields above given by a SAFE_SFT_<NAME> variable, not a flag

    def source_of(self, field: str) -> Source:
        """Where a given field came from: the flag itself, or its SAFE_SFT_ variable."""
        return Source.SAFE_SFT_ENV if field in self.from_env else Source.FLAG


OWN = (Source.FLAG, Source.SAFE_SFT_ENV)  # safe-sft's own options, typed or exported
NO_GPU_WARNING = (
    "no GPU visible and --use_cpu not given: the run path refuses to start (add --use_cpu true to train on the CPU)"
)


def run_topology(
    request: TopologyRequest, env: Mapping[str, str], host: HostFacts, swift: SwiftArgs | None
) -> Topology:
    """The topology a run of these arguments resolves on this host (doctor's and the plan's one reading):
    the swift config's ENV block and `--use_cpu` come from the arguments."""
    return resolve_topology(
        request,
        env,
        host.gpus.gpus,
        free_port=host.free_port,
        config_env=swift.config_env if swift is not None else {},
        use_cpu=swift is not None and swift.get_bool("use_cpu", False),
        cpu_count=host.cpu_count,
    )


def resolve_topology(
    request: TopologyRequest,
    env: Mapping[str, str],
    gpus: tuple[GpuInfo, ...],
    *,
    free_port: int,
    config_env: Mapping[str, str] | None = None,
    use_cpu: bool = False,
    cpu_count: int | None = None,
) -> Topology:
    """`cpu_count`: os.cpu_count(), what torchrun starts for NPROC_PER_NODE=cpu."""
    slurm = SlurmEnv.from_env(env)
    layers = _Layers(env, config_env or {}, slurm)
    layers.check_one_task_per_node()

    nnodes = layers.pick_int(request.nnodes, "NNODES", layers.slurm_nnodes(), request.source_of("nnodes")) or Sourced(
        1, Source.DEFAULT
    )
    node_rank = layers.pick_int(
        request.node_rank, "NODE_RANK", layers.slurm_node_id(), request.source_of("node_rank")
    ) or Sourced(0, Source.DEFAULT)
    warnings = _check_slurm(slurm, nnodes, node_rank)
    # One node needs no address of node 0: loopback, as torchrun's own default. Slurm's first node of the job
    # is not where a shell of `salloc` (no srun) runs, and torchrun would wait an hour for it there.
    slurm_addr = layers.slurm_master_addr() if nnodes.value > 1 else None
    master_addr = layers.pick_str(request.master_addr, "MASTER_ADDR", slurm_addr, request.source_of("master_addr"))
    default_note = ""
    if master_addr is not None and master_addr.source not in OWN and not master_addr.value.strip():
        # exported empty (a cluster profile, an image): no address, as torchrun reads it; Slurm's or the default
        master_addr = Sourced(slurm_addr, Source.SLURM) if slurm_addr else None
        default_note = "MASTER_ADDR is set empty: the default, as torchrun takes it"
    master_addr = master_addr or Sourced("127.0.0.1", Source.DEFAULT, default_note)
    # One node picks any free port; several must agree without talking, as torchrun's default lets them.
    default_port = (
        Sourced(free_port, Source.DEFAULT, "a free local port")
        if nnodes.value <= 1
        else Sourced(TORCHRUN_PORT, Source.DEFAULT, "torchrun's default, the same on every node")
    )
    master_port = (
        layers.pick_int(request.master_port, "MASTER_PORT", layers.slurm_port(), request.source_of("master_port"))
        or default_port
    )
    if master_port.source is Source.SLURM and layers.slurm is not None:
        master_port = Sourced(master_port.value, Source.SLURM, layers.slurm.master_port_rule)

    if nnodes.value < 1:
        raise SafeSftError(f"NNODES={nnodes.value} ({nnodes.source.value})", "NNODES must be at least 1")
    if node_rank.value >= nnodes.value:
        slurm_nodes = layers.slurm_nnodes()
        if slurm is not None and slurm_nodes is not None and slurm_nodes != nnodes.value:  # a stale NNODES
            raise SafeSftError(
                f"NODE_RANK={node_rank.value} ({node_rank.source.value}) is not below NNODES={nnodes.value} "
                f"({nnodes.source.value}), which overrides Slurm's {slurm.nnodes_var}={slurm_nodes}",
                "unset NNODES (a value left in the shell, say) to take the job's nodes from Slurm",
            )
        raise SafeSftError(
            f"NODE_RANK={node_rank.value} ({node_rank.source.value}) is not below NNODES={nnodes.value}",
            f"give each node a rank from 0 to {nnodes.value - 1}",
        )
    if not 1 <= master_port.value <= 65535:
        raise SafeSftError(
            f"MASTER_PORT={master_port.value} ({master_port.source.value}) is out of range",
            "choose a port from 1024 to 65535",
        )
    if not master_addr.value or any(char.isspace() for char in master_addr.value):
        raise SafeSftError(
            f"MASTER_ADDR={master_addr.value!r} ({master_addr.source.value}) is no address",
            "set MASTER_ADDR to node 0's address or host name, or unset it on a single node",
        )
    problem = address_problem(master_addr.value)
    if problem is not None:
        why, fix = problem
        raise SafeSftError(f"MASTER_ADDR={master_addr.value!r} ({master_addr.source.value}) {why}", fix)
    if node_rank.value < 0:
        raise SafeSftError(
            f"NODE_RANK={node_rank.value} ({node_rank.source.value}) is negative",
            f"give each node a rank from 0 to {nnodes.value - 1}",
        )
    kind = _only_here(master_addr.value)
    if nnodes.value > 1 and kind and not request.allow_loopback_master:
        if (
            slurm is not None
            and not slurm.nodelist
            and nnodes.source is Source.SLURM
            and master_addr.source is Source.DEFAULT
        ):
            raise SafeSftError(  # Slurm's variables without its node list: set by hand, or left by an sbatch
                f"{slurm.nnodes_var}={nnodes.value} with no node list ({slurm.nodelist_var} is not set) to take "
                f"node 0's address from: MASTER_ADDR is the default {master_addr.value}, which other nodes "
                "cannot reach",
                "run it as a step of the job (`srun safe-sft ...` sets the node list); outside a step, unset the "
                "SLURM_* variables left in this shell, or set MASTER_ADDR to node 0's address",
            )
        raise SafeSftError(
            f"MASTER_ADDR={master_addr.value} ({master_addr.source.value}) with NNODES={nnodes.value}: "
            f"other nodes cannot reach {kind}",
            "set MASTER_ADDR to node 0's address, or pass --allow-loopback-master when every node runs "
            "on this one machine",
        )

    word = layers.torchrun_word("NPROC_PER_NODE")
    per_core = word == "cpu" or (word == "auto" and not gpus)
    per_gpu_word = word if word is not None and not per_core else None
    if per_gpu_word == "gpu" and not gpus:
        raise SafeSftError(
            "NPROC_PER_NODE=gpu without a GPU: torchrun stops on it (CUDA is not available)",
            "set NPROC_PER_NODE to the number of CPU processes to train with, or to cpu (one per core)",
        )
    if per_gpu_word is not None and use_cpu:
        raise SafeSftError(
            f"NPROC_PER_NODE={per_gpu_word} with --use_cpu true: torchrun would start one process per GPU",
            "set NPROC_PER_NODE to the number of CPU processes to train with, or to cpu (one per core)",
        )
    if per_core and not cpu_count:
        raise SafeSftError(
            f"NPROC_PER_NODE={word}: torchrun would start one process per CPU core, and this machine's are not known",
            "set NPROC_PER_NODE to the number of CPU processes to train with",
        )
    cores = (
        Sourced(cpu_count, layers.source_of("NPROC_PER_NODE"), f"NPROC_PER_NODE={word}: one per CPU core, as torchrun")
        if per_core and cpu_count
        else None
    )
    if request.nproc is None and word is not None:  # the word's count: per GPU below, per core here
        nproc_hint = cores
    else:
        nproc_hint = layers.pick_int(request.nproc, "NPROC_PER_NODE", None, request.source_of("nproc"))
    set_nproc = layers.pick_int(None, "NPROC_PER_NODE", None) if word is None else None
    if request.nproc is not None and set_nproc is not None and set_nproc.value != request.nproc:
        warnings += (
            f"--nproc {request.nproc} beats NPROC_PER_NODE={set_nproc.value} ({set_nproc.source.value}): using "
            f"{request.nproc}, with the accumulation that keeps the global batch `swift sft` would train",
        )
    # plain `swift sft` starts torchrun only for NPROC_PER_NODE or NNODES, else ONE process (torchrun: 1 per node)
    swift_given = cores or set_nproc
    swift_nproc = swift_given.value if swift_given is not None else 1
    if use_cpu or not gpus:
        reason = "CPU training (--use_cpu)" if use_cpu else "no GPU visible"
        if request.gpus is not None and request.gpus != "auto":
            raise SafeSftError(
                f"--gpus {request.gpus} but "
                + ("--use_cpu true trains on the CPU" if use_cpu else "no GPU is visible on this machine"),
                "drop --gpus to train on the CPU" + ("" if use_cpu else ", or check the driver with `safe-sft doctor`"),
            )
        if not use_cpu:
            warnings += (NO_GPU_WARNING,)
        nproc = nproc_hint or Sourced(1, Source.DEFAULT)
        if nproc.value < 1:
            raise SafeSftError(f"NPROC_PER_NODE={nproc.value}", "run at least one process per node")
        return Topology(
            nproc_per_node=Sourced(nproc.value, nproc.source, reason),
            nnodes=nnodes,
            node_rank=node_rank,
            master_addr=master_addr,
            master_port=master_port,
            visible_devices=None,
            gpus=(),
            swift_nproc_per_node=swift_nproc,
            warnings=warnings,
        )

    single_node = nnodes.value == 1
    selected, visible = _select_gpus(request, layers, gpus, nproc_hint, single_node)
    if nproc_hint is not None and nproc_hint.value == 1 and len(selected) > 1:
        # swift's own layout: one process, several GPUs (visible, or picked with --gpus), the model split over
        # them (device_map)
        nproc = Sourced(1, nproc_hint.source, f"one process over {len(selected)} GPUs (device_map)")
        swift_nproc = 1
    else:
        if nproc_hint is not None and nproc_hint.value != len(selected):
            raise SafeSftError(
                f"NPROC_PER_NODE={nproc_hint.value} ({nproc_hint.source.value}) but {len(selected)} GPU(s) "
                f"selected ({visible.value})",
                "safe-sft runs one process per GPU (or NPROC_PER_NODE=1 over all of them, device_map): make --gpus "
                "/ CUDA_VISIBLE_DEVICES and NPROC_PER_NODE agree",
            )
        nproc_source = nproc_hint.source if nproc_hint is not None else visible.source
        nproc = Sourced(len(selected), nproc_source, "one process per selected GPU")
        if per_gpu_word is not None:  # torchrun's count: every visible GPU (the selection leaves out busy ones)
            swift_nproc = len(selected)
            nproc = Sourced(
                len(selected),
                layers.source_of("NPROC_PER_NODE"),
                f"NPROC_PER_NODE={per_gpu_word}: one process per selected GPU",
            )
    return Topology(
        nproc_per_node=nproc,
        nnodes=nnodes,
        node_rank=node_rank,
        master_addr=master_addr,
        master_port=master_port,
        visible_devices=visible,
        gpus=selected,
        swift_nproc_per_node=swift_nproc,
        warnings=warnings,
    )


def _check_slurm(slurm: SlurmEnv | None, nnodes: Sourced[int], node_rank: Sourced[int]) -> tuple[str, ...]:
    """Slurm variables that mean a hang are errors; a value of ours that beats Slurm's is a warning."""
    if slurm is None:
        return ()
    problem = slurm.hang_problem()
    if problem is not None and nnodes.source is Source.SLURM:
        raise problem
    if nnodes.source is Source.SLURM and nnodes.value > 1 and not slurm.in_step:
        raise SafeSftError(
            f"{slurm.nnodes_var}={nnodes.value} but SLURM_STEP_ID is not set: this is the job's batch script, "
            "which runs on one node only, and torchrun would wait for the others",
            "start safe-sft on every node with `srun --ntasks-per-node=1 safe-sft ...` in the batch script",
        )
    note = slurm.step_note() if nnodes.source is Source.SLURM else None
    warnings = [note] if note else []
    beaten = (
        (nnodes, "NNODES", "--nnodes", slurm.nnodes_var, slurm.nnodes),
        (node_rank, "NODE_RANK", "--node-rank", "SLURM_NODEID", slurm.node_id),
    )
    wheres = {Source.ENV: "your environment", Source.CONFIG: "the swift config's ENV block"}
    for ours, name, flag, slurm_name, slurm_value in beaten:
        if slurm_value is None or ours.value == slurm_value:
            continue
        if ours.source in OWN:  # under srun every task gets the same flag: one rank for every node
            warnings.append(
                f"{flag} {ours.value} beats Slurm's {slurm_name}={slurm_value}: using {ours.value} (drop {flag} "
                "to use Slurm's; every srun task is given the same one)"
            )
        elif ours.source in wheres:
            warnings.append(
                f"{name}={ours.value} from {wheres[ours.source]} beats Slurm's {slurm_name}={slurm_value}: using "
                f"{ours.value} (unset {name} to use Slurm's)"
            )
    return tuple(warnings)


def _select_gpus(
    request: TopologyRequest,
    layers: _Layers,
    gpus: tuple[GpuInfo, ...],
    nproc_hint: Sourced[int] | None,
    single_node: bool = True,
) -> tuple[tuple[GpuInfo, ...], Sourced[str]]:
    user_visible = layers.pick_str(None, "CUDA_VISIBLE_DEVICES", layers.slurm_step_gpus())
    candidates = gpus
    hidden_by = None
    if user_visible is not None:
        # Slurm's GPUs of the step where CUDA_VISIBLE_DEVICES is unset: named as the variable they came from
        name = "SLURM_STEP_GPUS" if user_visible.source is Source.SLURM else "CUDA_VISIBLE_DEVICES"
        where = f"{name} ({user_visible.source.value})"
        if not user_visible.value.strip() or user_visible.value.strip() == "-1":
            raise SafeSftError(
                f"{name}={user_visible.value!r} ({user_visible.source.value}) hides every GPU",
                f"unset {name}, or pass --use_cpu true to train on the CPU",
            )
        candidates = _match_devices(user_visible.value, gpus, where)
        hidden_by = f"{name}={user_visible.value} ({user_visible.source.value})"

    choice = request.gpus
    source = request.source_of("gpus") if choice is not None else Source.AUTO
    one_over_several = nproc_hint is not None and nproc_hint.value == 1 and len(candidates) > 1 and single_node
    if choice is None and nproc_hint is not None and not one_over_several:
        # NPROC_PER_NODE=N picks the first N visible GPUs, except 1 with several visible on one node: swift runs
        # that as one process over all of them (device_map; on several nodes it would be MP + DDP, not planned)
        choice, source = str(nproc_hint.value), nproc_hint.source

    if choice is None or choice == "auto":
        selected = tuple(g for g in candidates if g.free_bytes >= AUTO_MIN_FREE_FRACTION * g.total_bytes)
        if not selected:
            raise SafeSftError(
                "every visible GPU is already more than half full (--gpus auto)",
                "free a GPU, or name the GPUs with --gpus 0,1",
            )
        note = "GPUs with at least half their memory free"
        if len(selected) < len(candidates):
            busy = ",".join(str(g.index) for g in candidates if g not in selected)
            note += f" (left out busy GPU {busy})"
    elif choice.isdigit():
        count = int(choice)
        given = f"--gpus {choice}" if source in OWN else f"NPROC_PER_NODE={choice} ({source.value})"
        if count < 1:
            raise SafeSftError(
                f"{given} is read as a count of GPUs, and 0 GPUs cannot train",
                "a plain number is how many GPUs; to name GPU 0 alone write --gpus 0, (a list); "
                "to train on the CPU pass --use_cpu true",
            )
        if count > len(candidates) and source in OWN:
            named = _has_index(candidates, count)
            alone = f", or name GPU {count} alone with a comma: --gpus {choice}," if named else ""
            raise SafeSftError(
                f"{given} is read as a count: {count} GPU(s) asked for but {len(candidates)} visible",
                f"ask for 1 to {len(candidates)} GPUs{alone}",
            )
        if count > len(candidates):  # NPROC_PER_NODE names no GPU: it is a count of processes, one per GPU
            raise SafeSftError(
                f"{given} asks for {count} processes, one per GPU, but {len(candidates)} GPU(s) are visible",
                f"set NPROC_PER_NODE to 1 to {len(candidates)}, the GPUs of this node",
            )
        selected = candidates[:count]
        note = f"the first {count} visible GPU(s) ({'--gpus N' if source in OWN else 'N'} is a count)"
    else:
        selected = _match_devices(choice, candidates, "--gpus", every=gpus, hidden_by=hidden_by)
        note = "named GPUs"

    if user_visible is not None and selected == candidates:
        return selected, Sourced(user_visible.value, user_visible.source, note)
    return selected, Sourced(",".join(str(g.index) for g in selected), source, note)


def _match_devices(
    spec: str,
    gpus: tuple[GpuInfo, ...],
    what: str,
    *,
    every: tuple[GpuInfo, ...] = (),
    hidden_by: str | None = None,
) -> tuple[GpuInfo, ...]:
    """The GPUs a comma list names (NVML indices or UUIDs; one trailing comma allowed: `3,` is GPU 3).

    `every` is all the machine's GPUs when `gpus` is only those CUDA_VISIBLE_DEVICES (`hidden_by`) leaves:
    a GPU that exists but is hidden is named as hidden, not as missing.
    """
    tokens = [t.strip() for t in spec.split(",")]
    if len(tokens) > 1 and tokens[-1] == "":
        tokens.pop()
    kinds = {"uuid" if token.startswith("GPU-") else "index" for token in tokens}
    if len(kinds) > 1 and not what.startswith("--gpus"):
        # CUDA (and torch, which copies it) reads a list of one kind: the first of the other kind ends it
        first = "UUIDs" if tokens[0].startswith("GPU-") else "indices"
        raise SafeSftError(
            f"{what} mixes GPU indices and UUIDs in {spec!r}: CUDA reads a list of {first} and stops at the "
            "first entry of the other kind, so the GPUs after it would not be visible",
            "name every GPU the same way: all indices, or all UUIDs from `nvidia-smi -L`",
        )
    chosen: list[GpuInfo] = []
    for token in tokens:
        gpu = _device_named(token, gpus)
        if gpu is None:
            known = ",".join(str(g.index) for g in gpus) or "none"
            if hidden_by and _device_named(token, every) is not None:
                raise SafeSftError(
                    f"{what} names GPU {token!r}, which {hidden_by} hides (visible: {known})",
                    "name GPUs among the visible ones (NVML indices, as `nvidia-smi` shows them), "
                    "or change CUDA_VISIBLE_DEVICES",
                )
            raise SafeSftError(
                f"{what} names GPU {token!r} in {spec!r}, which does not exist here (GPUs: {known})",
                "use indices or UUIDs from `nvidia-smi -L`",
            )
        if gpu in chosen:
            raise SafeSftError(
                f"{what} names GPU {token!r} twice in {spec!r}: two processes would share one GPU",
                "name each GPU once",
            )
        chosen.append(gpu)
    return tuple(chosen)


def _has_index(gpus: tuple[GpuInfo, ...], index: int) -> bool:
    """Whether `--gpus N,` (a list) would name a GPU here: the fix for a count above the visible GPUs."""
    return _device_named(str(index), gpus) is not None


def _device_named(token: str, gpus: tuple[GpuInfo, ...]) -> GpuInfo | None:
    """The GPU a CUDA_VISIBLE_DEVICES entry names, as CUDA reads it: an index (`00` is 0), or a UUID or a
    prefix of exactly one GPU's UUID (`GPU-2`)."""
    if token.isdigit():
        return next((g for g in gpus if g.index == int(token)), None)
    if token.startswith("GPU-"):
        matches = [g for g in gpus if g.uuid.startswith(token)]
        return matches[0] if len(matches) == 1 else None
    return next((g for g in gpus if g.uuid == token), None)


class _Layers:
    """The sources below the flags, read in precedence order."""

    def __init__(self, env: Mapping[str, str], config_env: Mapping[str, str], slurm: SlurmEnv | None) -> None:
        self.env = env
        self.config_env = config_env
        self.slurm = slurm

    def _lookup(self, name: str) -> tuple[str, Source] | None:
        if name in self.env:
            return self.env[name], Source.ENV
        if name in self.config_env:
            return self.config_env[name], Source.CONFIG
        return None

    def torchrun_word(self, name: str) -> str | None:
        """The variable's value where it is one of the words torchrun counts itself (auto, gpu, cpu)."""
        found = self._lookup(name)
        return found[0].strip() if found is not None and torchrun_word(found[0]) else None

    def source_of(self, name: str) -> Source:
        found = self._lookup(name)
        return found[1] if found is not None else Source.DEFAULT

    def pick_int(
        self, flag: int | None, name: str, slurm: int | None, flag_source: Source = Source.FLAG
    ) -> Sourced[int] | None:
        """The first of flag, env, config ENV, Slurm that is set; None when none is."""
        if flag is not None:
            return Sourced(flag, flag_source)
        found = self._lookup(name)
        if found is not None:
            return Sourced(parse_count(found[0], name, LEAST.get(name, 0), USABLE.get(name)), found[1])
        return Sourced(slurm, Source.SLURM) if slurm is not None else None

    def pick_str(
        self, flag: str | None, name: str, slurm: str | None, flag_source: Source = Source.FLAG
    ) -> Sourced[str] | None:
        if flag is not None:
            return Sourced(flag, flag_source)
        found = self._lookup(name)
        if found is not None:
            return Sourced(found[0], found[1])
        return Sourced(slurm, Source.SLURM) if slurm is not None else None

    def slurm_nnodes(self) -> int | None:
        return self.slurm.nnodes if self.slurm else None

    def slurm_node_id(self) -> int | None:
        return self.slurm.node_id if self.slurm else None

    def slurm_master_addr(self) -> str | None:
        return self.slurm.master_addr if self.slurm else None

    def slurm_port(self) -> int | None:
        return self.slurm.master_port if self.slurm else None

    def slurm_step_gpus(self) -> str | None:
        return self.slurm.step_gpus if self.slurm else None

    def check_one_task_per_node(self) -> None:
        slurm = self.slurm
        if slurm and slurm.in_step and slurm.ntasks and slurm.nnodes and slurm.ntasks > slurm.nnodes:
            raise SafeSftError(
                f"SLURM_NTASKS={slurm.ntasks} on {slurm.nnodes} node(s): safe-sft runs one task per node",
                "use `srun --ntasks-per-node=1 safe-sft ...`; safe-sft starts one process per GPU itself",
            )


def address_problem(addr: str) -> tuple[str, str] | None:
    """Why no node could reach node 0 at `addr`, with the fix, or None: an IP address (IPv6 bare, in brackets
    or with a zone) or a host name DNS can hold. torchrun joins the address and the port with a colon and
    splits at the last one, so a host name with a port in it never resolves; and a name with an empty or
    over-long label (`gpu01..cluster`) fails in the resolver's IDNA encoding, not with a lookup error."""
    try:
        ipaddress.ip_address(addr[1:-1] if addr.startswith("[") and addr.endswith("]") else addr)
        return None
    except ValueError:
        pass
    host, colon, port = addr.rpartition(":")
    if colon and port.isdigit() and host and ":" not in host:
        return (
            f"holds a port ({port}): torchrun appends MASTER_PORT to it, and no host is named {addr}",
            f"set MASTER_ADDR={host} and MASTER_PORT={port}",
        )
    try:
        addr.encode("idna")
    except UnicodeError as err:
        return (
            f"is no host name ({err.__cause__ or err})",
            "set MASTER_ADDR to node 0's address or host name as `hostname -f` or `getent hosts` shows it",
        )
    return None


def _only_here(addr: str) -> str | None:
    """What kind of address no other node can reach this one at, or None: a loopback address (localhost, any
    of 127.0.0.0/8 or ::1), or an unspecified one (0.0.0.0 and ::, which a connecting node takes for its own
    host). A host name is not resolved here."""
    if addr.lower() in ("localhost", "localhost.localdomain"):
        return "a loopback address"
    try:
        ip = ipaddress.ip_address(addr.strip("[]"))
    except ValueError:
        return None
    if ip.is_unspecified:
        return "an unspecified address (each node takes it for its own)"
    return "a loopback address" if ip.is_loopback else None
