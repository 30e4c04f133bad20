"""The process environment for NCCL: safe defaults, each with its reason, never over a user's value.

A `--nccl-env KEY=VAL` override beats both the default and the user's environment, and says so. For an
assumed machine (`safe-sft plan --assume-*`, `machine_known` False) nothing of this machine is taken for
that one: neither its InfiniBand devices, nor its interfaces, nor the NCCL variables of this shell; the
notes say they are unknown there.
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher.model import EnvSetting


def nccl_settings(
    *,
    env: Mapping[str, str],
    uses_gpus: bool,
    nnodes: int,
    ib_devices: tuple[str, ...],
    route_interface: str | None,
    overrides: Mapping[str, str],
    machine_known: bool = True,
) -> tuple[tuple[EnvSetting, ...], tuple[str, ...]]:
    """(settings to apply, notes). Nothing is set for CPU training: NCCL is not used there."""
    notes: list[str] = []
    defaults: list[EnvSetting] = []
    if not machine_known:
        here = sorted(name for name in env if name.startswith(("NCCL_", "TORCH_NCCL_")))
        if here:
            notes.append(
                f"this shell's NCCL variables ({', '.join(here)}) describe this machine, so the plan for the assumed "
                "machine leaves them out (the diff shows them replaced); pass --nccl-env NAME=VALUE to keep one"
            )
        env = {name: value for name, value in env.items() if name not in here}
    if uses_gpus:
        defaults.append(
            EnvSetting(
                "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                "1",
                "a failed or timed-out collective ends the process instead of hanging it",
            )
        )
        if not machine_known:
            notes.append("InfiniBand on the assumed machine: unknown (NCCL_IB_DISABLE is decided where safe-sft runs)")
        elif not ib_devices:
            defaults.append(EnvSetting("NCCL_IB_DISABLE", "1", "no InfiniBand device in /sys/class/infiniband"))
        if nnodes > 1 and not machine_known:
            notes.append(
                "network interfaces of the assumed machine: unknown (NCCL_SOCKET_IFNAME is decided where safe-sft runs)"
            )
        elif nnodes > 1:
            if route_interface:
                defaults.append(
                    EnvSetting("NCCL_SOCKET_IFNAME", route_interface, "the interface that routes to MASTER_ADDR")
                )
            else:
                notes.append("NCCL_SOCKET_IFNAME not set: no interface found that routes to MASTER_ADDR")
        defaults.append(EnvSetting("NCCL_DEBUG", "WARN", "NCCL prints its warnings and errors, not its info"))
    else:
        notes.append("CPU training: no NCCL variables set (gloo is used)")

    settings: list[EnvSetting] = []
    for setting in defaults:
        if setting.name in overrides:
            continue
        if setting.name in env:
            notes.append(f"kept your {setting.name}={env[setting.name]} (safe-sft would set {setting.value})")
            continue
        settings.append(setting)
    for name, value in overrides.items():
        reason = "--nccl-env"
        if name in env and env[name] != value:
            reason += f" (replaces your {name}={env[name]})"
        settings.append(EnvSetting(name, value, reason))
    return tuple(settings), tuple(notes)
