"""The swift backend: `swift sft`'s argv and YAML/JSON config, swift's sft entry under @record
(launcher/worker.py). Today's behaviour: every knob of the ladder, swift's v<N>-<time> run dirs."""

from __future__ import annotations

from launcher.backends.base import WORKER_DIR, Backend, BackendArgs
from launcher.errors import SafeSftError
from launcher.plan.swift_args import parse_swift_argv


def read(argv: list[str]) -> BackendArgs:
    from launcher.swift_config import load_swift_config

    if not argv:
        raise SafeSftError("no swift arguments given", "use it as `safe-sft --model M --dataset D ...`")
    return BackendArgs((), parse_swift_argv(argv, load_swift_config(argv)))


SWIFT = Backend(name="swift", command="safe-sft", worker=WORKER_DIR / "worker.py", read=read)
