"""Installed versions of the training stack, from package metadata: nothing is imported."""

from __future__ import annotations

from importlib import metadata

PACKAGES = {
    "torch": "torch",
    "deepspeed": "deepspeed",
    "ms-swift": "ms-swift",
    "transformers": "transformers",
    "py-spy": "py-spy",  # optional: stacks of a hung attempt
}


def probe_versions(driver_version: str | None) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for label, dist in PACKAGES.items():
        try:
            versions[label] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[label] = None
    versions["nvidia-driver"] = driver_version
    return versions
