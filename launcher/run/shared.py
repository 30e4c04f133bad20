"""Check, before the first attempt, that every node sees the same output dir (a shared filesystem).

Node 0 writes a random token into <output_dir>/safe-sft/ and publishes it on the coordination store;
every other node reads the file and compares. Resuming from one checkpoint on all nodes depends on it.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from launcher.errors import SafeSftError
from launcher.run.coord import Coordinator

FILE_WAIT_SECONDS = 30.0  # NFS attribute caches can hide a new file for a while


def check_shared_output_dir(coordinator: Coordinator, output_dir: Path) -> None:
    path = output_dir / "safe-sft" / f"shared-{coordinator.run_id.replace('/', '_').replace(':', '_')}.token"
    if coordinator.node == 0:
        token = secrets.token_hex(16)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(token)
        coordinator.publish_token(token)
        return
    token = coordinator.read_token()
    if coordinator.wait(lambda: path.is_file() and path.read_text().strip() == token, FILE_WAIT_SECONDS, f"{path}"):
        return
    raise SafeSftError(
        f"the output dir {output_dir} is not the one node 0 writes to ({path} is missing or differs)",
        "put --output_dir on a filesystem every node shares (NFS, Lustre, GPFS), with the same path",
    )
