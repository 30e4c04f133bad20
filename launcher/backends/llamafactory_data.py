"""A LLaMA-Factory config's datasets, checked as LLaMA-Factory 0.9.5 will look them up, before any rank starts.

`dataset` and `eval_dataset` are names (a comma list, or a YAML list) in `<dataset_dir>/dataset_info.json`
(dataset_dir: `data`, relative to where the run starts). A name missing there (an empty one after a
trailing comma too), a dataset_info.json that cannot be read (one with a UTF-8 byte-order mark too), a
local `file_name` that is not under dataset_dir, and one whose extension (or a folder's mix of them) it
does not load stop every rank with a ValueError once the tokenizer has loaded. `dataset_dir: ONLINE`
(every name a hub id), `REMOTE:<repo>` (a
dataset_info.json on the hub) and a mapping are LLaMA-Factory's to resolve: nothing is checked for them.
Reads only; a SafeSftError names the first problem.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from launcher.errors import SafeSftError

DATA_CONFIG = "dataset_info.json"
DEFAULT_DATASET_DIR = "data"
DATASET_KEYS = ("dataset", "eval_dataset")


# what LLaMA-Factory 0.9.5 loads a local file_name as, by its extension as written (extras/constants.py)
FILE_TYPES = {"arrow": "arrow", "csv": "csv", "json": "json", "jsonl": "json", "parquet": "parquet", "txt": "text"}


def dataset_names(value: object) -> list[str]:
    """A `dataset` value as LLaMA-Factory splits it (data_args.py split_arg): a comma list, each name stripped
    and an empty one kept (`a,` names `a` and ``, which it stops on), or a list of names as they are."""
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return [item.strip() for item in str(value).split(",")]


def check_llamafactory_datasets(values: Mapping[str, object], where: Mapping[str, str], cwd: Path) -> None:
    """Refuse the first dataset name LLaMA-Factory would not find; `where` names each key's source."""
    given = {key: dataset_names(values[key]) for key in DATASET_KEYS if values.get(key) is not None}
    if not any(given.values()):
        return
    directory = values.get("dataset_dir", DEFAULT_DATASET_DIR)
    if not isinstance(directory, str) or directory == "ONLINE" or directory.startswith("REMOTE:"):
        return
    root = cwd / directory
    info = _read_info(root / DATA_CONFIG, f"dataset_dir {directory} from {where.get('dataset_dir', 'its default')}")
    for key, names in given.items():
        for name in names:
            entry = info.get(name)
            if not name:
                raise SafeSftError(
                    f"{where[key]}: {key} {values[key]!r} names an empty dataset (a comma with no name after it?): "
                    "LLaMA-Factory looks up '' and stops every rank on it once the tokenizer has loaded",
                    "drop the empty name (the trailing or doubled comma)",
                )
            if entry is None:
                import difflib  # only where a name is missing

                near = difflib.get_close_matches(name, [str(n) for n in info], n=1, cutoff=0.6)
                raise SafeSftError(
                    f"{where[key]}: {key} {name} is not in {root / DATA_CONFIG} (LLaMA-Factory stops every rank on "
                    "it once the tokenizer has loaded)",
                    (f"did you mean {near[0]}? " if near else "")
                    + f"add {name} to {DATA_CONFIG}, or set dataset_dir to the folder whose {DATA_CONFIG} has it",
                )
            file_name = entry.get("file_name") if isinstance(entry, dict) else None
            hub = isinstance(entry, dict) and any(k in entry for k in ("hf_hub_url", "ms_hub_url", "om_hub_url"))
            other = isinstance(entry, dict) and any(k in entry for k in ("script_url", "cloud_file_name"))
            if not isinstance(file_name, str) or hub or other:
                continue
            if not (root / file_name).exists():
                raise SafeSftError(
                    f"{where[key]}: {key} {name}'s file_name {file_name} is not there: LLaMA-Factory reads "
                    f"{root / file_name} (dataset_dir joined with file_name) and stops every rank on it",
                    f"put the file there, or fix file_name in {root / DATA_CONFIG}",
                )
            _check_file_types(root / file_name, f"{where[key]}: {key} {name}'s file_name {file_name}")


def _check_file_types(path: Path, named: str) -> None:
    """LLaMA-Factory loads a file_name by its extension as written, and a folder's every entry (its README
    too) by theirs: one type it knows, the same for all (data/loader.py), else every rank stops."""
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    if not files:
        raise SafeSftError(
            f"{named} is an empty folder: LLaMA-Factory takes the type of its first file, and every rank stops",
            "put the dataset's files in the folder",
        )
    types = {file.name: FILE_TYPES.get(file.suffix[1:]) for file in files}
    unknown = next((name for name, kind in types.items() if kind is None), None)
    if unknown is not None:
        where = f"{path.name}/{unknown}" if path.is_dir() else unknown
        raise SafeSftError(
            f"{named}: {where} is no file type LLaMA-Factory loads (it reads the extension as written: "
            f"{', '.join(FILE_TYPES)}), and every rank stops on it",
            "rename it to a lower-case extension it loads"
            + (", or move it out of the folder" if path.is_dir() else ""),
        )
    if len(set(types.values())) > 1:
        raise SafeSftError(
            f"{named}: the folder holds files of several types ({', '.join(sorted(types))}); LLaMA-Factory loads "
            "a folder's files as one type and stops every rank on a mix",
            "keep one type of file in the folder",
        )


def _read_info(path: Path, where: str) -> dict[str, object]:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))  # as LLaMA-Factory's json.load of open(): no BOM
    except OSError as err:
        raise SafeSftError(
            f"{path} cannot be read ({err.strerror or err}); LLaMA-Factory looks the datasets up there ({where})",
            "set dataset_dir to the folder that holds your dataset_info.json (LLaMA-Factory's own is its data/)",
        ) from None
    except (ValueError, UnicodeDecodeError) as err:
        raise SafeSftError(f"{path} is not valid JSON ({err})", f"fix {path}") from None
    if not isinstance(info, dict):
        raise SafeSftError(f"{path} is not a JSON object of dataset names", f"fix {path}")
    return info
