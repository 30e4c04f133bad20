"""Slurm's variables as typed values: one table, plus the node-list expander and the port rule.

`SlurmEnv.from_env(env)` reads a plain mapping (the caller passes os.environ); nothing here touches the
process environment. Every parse error names the variable and the bad value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.errors import SafeSftError

PORT_BASE = 20000
PORT_PAIRS = 10000  # ports 20000-39999: above the well-known range, below Linux's ephemeral range
STEP_STRIDE = 5003  # a job's next step lands half the range away, not on a neighbouring job's pair


def expand_nodelist(nodelist: str, name: str = "SLURM_JOB_NODELIST") -> list[str]:
    """`gpu-[01-03,07],login1` -> ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-07', 'login1'] (`name`: the variable
    it came from, for errors).

    Ranges keep their zero padding; several bracket groups in one name expand as a product.
    """
    if not nodelist.strip():
        raise SafeSftError(
            f"{name}={nodelist!r} is empty",
            "run inside a Slurm allocation, and copy no SLURM_* variables from another job",
        )
    hosts: list[str] = []
    for pattern in _split_top_level(nodelist, name):
        hosts.extend(_expand_pattern(pattern, nodelist, name))
    return hosts


def _split_top_level(text: str, name: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise _bad_nodelist(text, name)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise _bad_nodelist(text, name)
    parts.append(current)
    if any(not part.strip() for part in parts):
        raise _bad_nodelist(text, name)
    return [part.strip() for part in parts]


def _expand_pattern(pattern: str, whole: str, name: str) -> list[str]:
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", pattern)
    if not match:
        if "[" in pattern or "]" in pattern or any(char.isspace() for char in pattern):
            raise _bad_nodelist(whole, name)
        return [pattern]
    prefix, ranges, rest = match.groups()
    tails = _expand_pattern(rest, whole, name) if rest else [""]
    return [prefix + item + tail for item in _expand_ranges(ranges, whole, name) for tail in tails]


def _expand_ranges(ranges: str, whole: str, name: str) -> list[str]:
    items: list[str] = []
    for part in ranges.split(","):
        bounds = part.split("-")
        if len(bounds) == 1 and bounds[0].isdigit():
            items.append(bounds[0])
        elif len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit():
            start, end = int(bounds[0]), int(bounds[1])
            if start > end:
                raise _bad_nodelist(whole, name)
            width = len(bounds[0])
            items.extend(str(i).zfill(width) for i in range(start, end + 1))
        else:
            raise _bad_nodelist(whole, name)
    return items


def _bad_nodelist(text: str, name: str) -> SafeSftError:
    return SafeSftError(
        f"{name}={text!r} is not a valid node list",
        "expected names like gpu-[01-04,07],login1; check `scontrol show hostnames`",
    )


def port_for_job(job_id: str, step_id: int = 0) -> int:
    """A MASTER_PORT that every node of one job step derives alike from SLURM_JOB_ID and SLURM_STEP_ID.

    Each step gets an even port and the odd one above it (safe-sft's coordination store, MASTER_PORT + 1),
    so neighbouring jobs, whose node 0 often share a host, never take each other's ports: jobs J and J+1
    get pairs 2 apart. Two steps of one job get pairs STEP_STRIDE apart.
    """
    if not job_id.isdigit():
        raise SafeSftError(f"SLURM_JOB_ID={job_id!r} is not a number", "set MASTER_PORT yourself")
    return PORT_BASE + 2 * ((int(job_id) + STEP_STRIDE * step_id) % PORT_PAIRS)


def port_rule(job_id: str, step_id: int) -> str:
    """How port_for_job got its port, for the plan's source column."""
    return f"20000 + 2 x ((SLURM_JOB_ID {job_id} + {STEP_STRIDE} x SLURM_STEP_ID {step_id}) mod {PORT_PAIRS})"


def int_var(env: Mapping[str, str], name: str) -> int | None:
    """A SLURM_* count: None where unset; a value that is not a whole number is refused, naming it."""
    text = env.get(name)
    if text is None or text == "":
        return None
    if not text.strip().isdigit():
        what = "negative" if text.strip().lstrip("-").isdigit() else "not an integer"
        raise SafeSftError(f"{name}={text!r} is {what}", f"check the job's {name}: Slurm sets it to 0 or more")
    return int(text)


# the step ids Slurm gives steps that are not srun's: the batch script's, and the allocation's own
NAMED_STEPS = ("batch", "extern", "interactive")


def _step_id(text: str) -> int:
    """SLURM_STEP_ID as the port rule reads it: a number, or 0 for a named step; anything else is refused
    (the port of every node of the step comes from it: a copied or edited value would split them)."""
    if text.strip().isdigit():
        return int(text)
    if text.strip() in NAMED_STEPS:
        return 0
    raise SafeSftError(
        f"SLURM_STEP_ID={text!r} is not a step id",
        "run inside the job's own step (srun sets it); do not copy or edit SLURM_* variables",
    )


@dataclass(frozen=True)
class SlurmEnv:
    """The SLURM_* variables safe-sft uses; `None` where Slurm did not set them."""

    job_id: str
    nnodes: int | None
    nnodes_var: str  # the variable `nnodes` came from: SLURM_JOB_NUM_NODES or SLURM_NNODES
    node_id: int | None
    nodelist: str | None
    ntasks: int | None
    step_gpus: str | None
    gpus_on_node: int | None
    in_step: bool
    step_id: int = 0  # 0 outside a step, and for a step id that is not a number (batch, extern)
    nodelist_var: str = "SLURM_JOB_NODELIST"  # the variable `nodelist` came from (a step's own, in a step)
    job_nnodes: int | None = None  # the job's node count, where a step runs on some of its nodes
    job_nnodes_var: str = "SLURM_JOB_NUM_NODES"

    @staticmethod
    def from_env(env: Mapping[str, str]) -> SlurmEnv | None:
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if not job_id:
            return None
        nnodes_var = "SLURM_JOB_NUM_NODES"
        nnodes = int_var(env, nnodes_var)
        if nnodes is None:
            nnodes_var = "SLURM_NNODES"
            nnodes = int_var(env, nnodes_var)
        job_nnodes, job_nnodes_var = nnodes, nnodes_var
        nodelist_var = "SLURM_JOB_NODELIST" if "SLURM_JOB_NODELIST" in env else "SLURM_NODELIST"
        in_step = "SLURM_STEP_ID" in env
        step_nnodes = int_var(env, "SLURM_STEP_NUM_NODES") if in_step else None
        if step_nnodes is not None:
            # A step runs on its own nodes, which may be fewer than the job's (`srun -N2 --relative=2` in a
            # 4-node job): SLURM_NODEID counts within the step, so its count and its first host are the
            # step's (srun sets SLURM_NNODES to the step's count too, and leaves SLURM_NODELIST the job's)
            nnodes, nnodes_var = step_nnodes, "SLURM_STEP_NUM_NODES"
            if env.get("SLURM_STEP_NODELIST"):
                nodelist_var = "SLURM_STEP_NODELIST"
        return SlurmEnv(
            job_id=job_id,
            nnodes=nnodes,
            nnodes_var=nnodes_var,
            node_id=int_var(env, "SLURM_NODEID"),
            nodelist=env.get(nodelist_var),
            nodelist_var=nodelist_var,
            ntasks=int_var(env, "SLURM_NTASKS") if "SLURM_STEP_ID" in env else None,
            step_gpus=env.get("SLURM_STEP_GPUS") or None,
            gpus_on_node=int_var(env, "SLURM_GPUS_ON_NODE"),
            in_step=in_step,
            step_id=_step_id(env.get("SLURM_STEP_ID", "0")),
            job_nnodes=job_nnodes,
            job_nnodes_var=job_nnodes_var,
        )

    def hang_problem(self) -> SafeSftError | None:
        """Variables that disagree in a way that would leave torchrun waiting for nodes that never come."""
        if self.nnodes is not None and self.nodelist is not None:
            hosts = expand_nodelist(self.nodelist, self.nodelist_var)
            if len(hosts) != self.nnodes:
                return SafeSftError(
                    f"{self.nnodes_var}={self.nnodes} but the node list {self.nodelist_var}={self.nodelist!r} "
                    f"names {len(hosts)} host(s): torchrun would wait for nodes that never come",
                    "run inside the job's own allocation; do not copy or edit SLURM_* variables from another job",
                )
        return None

    def step_note(self) -> str | None:
        """A step on fewer nodes than its job: trained on the step's nodes alone (said, not refused)."""
        if self.nnodes_var != "SLURM_STEP_NUM_NODES" or self.job_nnodes is None or self.nnodes == self.job_nnodes:
            return None
        return (
            f"this step runs on {self.nnodes} of the job's {self.job_nnodes} nodes ({self.nnodes_var}="
            f"{self.nnodes}, {self.job_nnodes_var}={self.job_nnodes}): training uses the step's nodes"
        )

    @property
    def master_addr(self) -> str | None:
        return expand_nodelist(self.nodelist, self.nodelist_var)[0] if self.nodelist is not None else None

    @property
    def master_port(self) -> int:
        return port_for_job(self.job_id, self.step_id)

    @property
    def master_port_rule(self) -> str:
        return port_rule(self.job_id, self.step_id)
