"""Where a downloaded hub model is: the folder ModelScope or Hugging Face would load it from, offline.

Contract: `cached_model_dir(model_id, env, home)` gives the folder holding `config.json` for `org/name` that
the hubs' own offline lookups take first (modelscope `snapshot_download(..., local_files_only=True)`, then
huggingface_hub's): the one swift would load; None where there is none. Pure path
reading: nothing is downloaded, no hub library is imported.

ModelScope (modelscope_hub, which ms-swift 4's modelscope delegates to) first reuses a folder an older
SDK wrote, `<cache>/models/<org>/<name with . as ___>` or the same under `<cache>/hub/`, then takes
`<cache>/models/<org>--<name>/snapshots/<revision>` (the `master` or `main` revision, else the only one).
`<cache>` is MODELSCOPE_CACHE or ~/.cache/modelscope. SDKs before the `models/` folder kept `<org>/<name>`
flat under the cache or its `hub/`. Hugging Face keeps `models--<org>--<name>/snapshots/<commit>` under
HF_HUB_CACHE (HF_HOME/hub), the commit the file `refs/main` names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain
from pathlib import Path

from launcher.paths import is_file

MODELSCOPE_DEFAULT_REVISIONS = ("master", "main")


def cached_model_dir(model_id: str, env: Mapping[str, str], home: Path) -> Path | None:
    """The cached folder of `model_id` the hub would load, the first that holds a config.json; else None."""
    candidates = chain(_modelscope_candidates(model_id, env, home), _huggingface_candidates(model_id, env, home))
    # is_file: an id may be too long for a file's name, and is then in no cache
    return next((candidate for candidate in candidates if is_file(candidate / "config.json")), None)


def _modelscope_candidates(model_id: str, env: Mapping[str, str], home: Path) -> Iterator[Path]:
    base = Path(env.get("MODELSCOPE_CACHE") or home / ".cache" / "modelscope").expanduser()
    org, _, name = model_id.partition("/")
    if name:
        masked = name.replace(".", "___")
        yield base / "models" / org / masked
        yield base / "hub" / "models" / org / masked
        yield from _newest_snapshots(base / "models" / f"{org}--{name}" / "snapshots", MODELSCOPE_DEFAULT_REVISIONS)
    for root in (base, base / "hub"):  # the flat layouts of SDKs before models/
        yield root / model_id
        yield root / model_id.replace(".", "___")


def _huggingface_candidates(model_id: str, env: Mapping[str, str], home: Path) -> Iterator[Path]:
    hf_home = Path(env.get("HF_HOME") or home / ".cache" / "huggingface").expanduser()
    hub = Path(env.get("HF_HUB_CACHE") or hf_home / "hub").expanduser()
    repo = hub / f"models--{model_id.replace('/', '--')}"
    try:
        commit = (repo / "refs" / "main").read_text().strip()
    except (OSError, UnicodeDecodeError):
        commit = ""
    if commit:
        yield repo / "snapshots" / commit
    yield from _newest_snapshots(repo / "snapshots", ())


def _newest_snapshots(snapshots: Path, preferred: tuple[str, ...]) -> Iterator[Path]:
    """The snapshots named in `preferred` first, then every other, the newest first."""
    yield from (snapshots / name for name in preferred)
    try:
        others = list(snapshots.iterdir())
    except OSError:
        return
    yield from sorted(others, key=_mtime, reverse=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # a dangling link
        return 0.0
