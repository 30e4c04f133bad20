"""Whether /dev/shm is too small for what a run will pass through it: DataLoader workers hand every batch to
their trainer there, and NCCL's ranks on one node talk through it. Pure: the size comes from the probe."""

from __future__ import annotations

from launcher.units import MiB, fmt_bytes

SHM_MIN_BYTES = 512 * MiB  # Docker's 64 MiB default breaks NCCL and dataloader workers
SHM_FIX = "docker run --shm-size=16g (or --ipc=host); or --dataloader_num_workers 0"


def shm_warning(shm_bytes: int | None, dataloader_workers: int, nccl_ranks_per_node: int) -> str | None:
    """The plan's warning where /dev/shm is below SHM_MIN_BYTES and the run uses it; None otherwise."""
    if shm_bytes is None or shm_bytes >= SHM_MIN_BYTES:
        return None
    users = []
    if dataloader_workers > 0:
        users.append(f"{dataloader_workers} dataloader worker(s) per rank pass each batch through it")
    if nccl_ranks_per_node > 1:
        users.append(f"NCCL's {nccl_ranks_per_node} ranks on this node talk through it")
    if not users:
        return None
    return f"/dev/shm is {fmt_bytes(shm_bytes)}: {' and '.join(users)}, and fail or hang when it fills; fix: {SHM_FIX}"
