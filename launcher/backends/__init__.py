"""The trainers safe-sft runs, one module each behind launcher.backends.base.Backend."""

from __future__ import annotations

from launcher.backends.base import Backend, BackendArgs
from launcher.backends.hf_trainer import HF_TRAINER
from launcher.backends.llamafactory import LLAMAFACTORY
from launcher.backends.swift import SWIFT

BACKENDS: dict[str, Backend] = {b.name: b for b in (SWIFT, HF_TRAINER, LLAMAFACTORY)}

__all__ = ["BACKENDS", "Backend", "BackendArgs"]
