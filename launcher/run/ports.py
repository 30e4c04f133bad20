"""Before launch on node 0: the ports torchrun and safe-sft will listen on must be free on this host.

A port in use (another job, a stale torchrun) or one below those this user may listen on is the user's to
fix, not a network fault to retry: one line naming the port, where its number came from, and the fix
(exit 2). Only node 0 listens, so only node 0 checks.
"""

from __future__ import annotations

from launcher.errors import SafeSftError
from launcher.model import Source, Topology
from launcher.probe.network import port_taken

TAKEN = {"in use": "is already in use on this host", "privileged": "is below the ports this user may listen on"}


def coord_port_of(topology: Topology, flag: int | None) -> int:
    """The coordination store's port: --coord-port, else MASTER_PORT + 1 (SafeSftError past 65535)."""
    if flag is not None:
        return flag
    master = topology.master_port.value
    if master >= 65535:
        raise SafeSftError(
            f"MASTER_PORT={master} leaves no port for the coordination store (MASTER_PORT + 1) with several nodes",
            "choose a MASTER_PORT below 65535, or pass --coord-port with a free port (the same on every node)",
        )
    return master + 1


def check_ports_free(topology: Topology, coord_port: int | None) -> None:
    """Raise SafeSftError when MASTER_PORT (or, with several nodes, the coordination port) is taken."""
    if topology.node_rank.value != 0:
        return
    master = topology.master_port
    taken = port_taken(master.value)
    note = f": {master.note}" if master.note else ""
    if taken:
        held = "another job or a leftover torchrun holds it (`ss -ltnp` shows which); " if taken == "in use" else ""
        if taken == "in use" and master.source is Source.SLURM:  # the rule gives a job step one port
            held = (
                "another run in this job step holds it (runs started side by side without srun share the step, "
                "and the port), or a leftover torchrun (`ss -ltnp` shows which): start each with `srun` (a step "
                "of its own), or "
            )
        raise SafeSftError(
            f"MASTER_PORT={master.value} (from {master.source.value}{note}) {TAKEN[taken]}",
            f"{held}set MASTER_PORT or --master-port to a free port of 1024 or more on every node",
        )
    if topology.nnodes.value > 1:
        coord = coord_port_of(topology, coord_port)
        taken = port_taken(coord)
        if taken:
            where = "--coord-port" if coord_port is not None else f"MASTER_PORT {master.value} + 1"
            raise SafeSftError(
                f"the coordination port {coord} ({where}) {TAKEN[taken]}",
                "pass --coord-port with a free port (the same on every node), or choose another MASTER_PORT",
            )
