"""A LLaMA-Factory config's datasets, looked up as LLaMA-Factory 0.9.5 looks them up, before any rank starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.backends.llamafactory_data import check_llamafactory_datasets
from launcher.errors import SafeSftError

INFO = {
    "alpaca_en_demo": {"file_name": "alpaca_en_demo.json"},
    "identity": {"file_name": "identity.json"},
    "hub_only": {"hf_hub_url": "org/hub-only"},
    "folder": {"file_name": "shards"},
}


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps(INFO))
    (data / "alpaca_en_demo.json").write_text("[]")
    (data / "identity.json").write_text("[]")
    (data / "shards").mkdir()
    (data / "shards" / "part-0.jsonl").write_text("{}\n")
    (data / "shards" / "part-1.json").write_text("[]")  # json and jsonl: both of LLaMA-Factory's json type
    return tmp_path


WHERE = {"dataset": "sft.yaml", "eval_dataset": "`eval_dataset=idnetity`", "dataset_dir": "sft.yaml"}


@pytest.mark.parametrize(
    "values",
    [
        {"dataset": "alpaca_en_demo,identity"},
        {"dataset": ["identity", "hub_only", "folder"]},
        {"dataset": " identity , alpaca_en_demo "},  # LLaMA-Factory strips each name
        {"dataset": "anything", "dataset_dir": "ONLINE"},  # hub ids: LLaMA-Factory's to resolve
        {"dataset": "anything", "dataset_dir": "REMOTE:org/infos"},
        {"model_name_or_path": "m"},  # no dataset: nothing to look up
    ],
)
def test_datasets_llamafactory_finds_pass(cwd: Path, values: dict[str, object]) -> None:
    check_llamafactory_datasets(values, WHERE, cwd)


@pytest.mark.parametrize(
    ("values", "says", "fix"),
    [
        ({"dataset": "alpaca_en_demo,alpaca_zh_demo"}, "sft.yaml: dataset alpaca_zh_demo is not in {info}",
         "did you mean alpaca_en_demo? add alpaca_zh_demo to dataset_info.json"),
        ({"dataset": "identity", "eval_dataset": "idnetity"}, "`eval_dataset=idnetity`: eval_dataset idnetity is not",
         "did you mean identity?"),
        ({"dataset": "identity", "dataset_dir": "elsewhere"}, "{cwd}/elsewhere/dataset_info.json cannot be read",
         "set dataset_dir to the folder that holds your dataset_info.json"),
    ],
)  # fmt: skip
def test_a_dataset_llamafactory_would_not_find_is_one_line_naming_it(
    cwd: Path, values: dict[str, object], says: str, fix: str
) -> None:
    with pytest.raises(SafeSftError) as err:
        check_llamafactory_datasets(values, WHERE, cwd)
    assert err.value.message.startswith(says.format(info=cwd / "data" / "dataset_info.json", cwd=cwd))
    assert err.value.hint.startswith(fix)


def test_a_local_file_name_that_is_not_under_dataset_dir_is_named(cwd: Path) -> None:
    (cwd / "data" / "identity.json").unlink()
    with pytest.raises(SafeSftError) as err:
        check_llamafactory_datasets({"dataset": "identity"}, WHERE, cwd)
    assert f"reads {cwd / 'data' / 'identity.json'} (dataset_dir joined with file_name)" in err.value.message


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_a_dataset_info_that_is_no_json_object_is_named(cwd: Path, content: str) -> None:
    (cwd / "data" / "dataset_info.json").write_text(content)
    with pytest.raises(SafeSftError) as err:
        check_llamafactory_datasets({"dataset": "identity"}, WHERE, cwd)
    assert err.value.message.startswith(str(cwd / "data" / "dataset_info.json"))


def _refused(cwd: Path, values: dict[str, object]) -> str:
    with pytest.raises(SafeSftError) as err:
        check_llamafactory_datasets(values, WHERE, cwd)
    assert "\n" not in err.value.message and err.value.hint
    return err.value.message


@pytest.mark.parametrize("value", ["identity,", "identity,,alpaca_en_demo", ","])
def test_an_empty_name_after_a_comma_is_refused_as_llamafactory_stops_on_it(cwd: Path, value: str) -> None:
    """LLaMA-Factory splits `identity,` into identity and '' and stops every rank on the empty name."""
    assert "names an empty dataset (a comma with no name after it?)" in _refused(cwd, {"dataset": value})


def test_a_dataset_info_with_a_byte_order_mark_is_refused_as_llamafactory_cannot_read_it(cwd: Path) -> None:
    info = cwd / "data" / "dataset_info.json"
    info.write_bytes(b"\xef\xbb\xbf" + info.read_bytes())  # as Notepad saves UTF-8
    assert "is not valid JSON (Unexpected UTF-8 BOM" in _refused(cwd, {"dataset": "identity"})


def _folder(*names: str):  # type: ignore[no-untyped-def]
    def make(data: Path) -> None:
        (data / "x").mkdir()
        for name in names:
            (data / "x" / name).write_text("{}")

    return make


@pytest.mark.parametrize(
    ("make", "says"),
    [
        pytest.param(lambda d: (d / "x.JSONL").write_text("{}"), "x.JSONL is no file type LLaMA-Factory", id="JSONL"),
        pytest.param(lambda d: (d / "x.jsonl.gz").write_bytes(b""), "x.jsonl.gz is no file type", id="gz"),
        pytest.param(_folder(), "is an empty folder", id="empty-folder"),
        pytest.param(_folder("a.jsonl", "README.md"), "x/README.md is no file type", id="readme-in-folder"),
        pytest.param(_folder("a.jsonl", "b.csv"), "holds files of several types (a.jsonl, b.csv)", id="mixed-folder"),
    ],
)
def test_a_file_name_llamafactory_loads_by_no_type_it_has_is_refused(cwd: Path, make, says: str) -> None:  # type: ignore[no-untyped-def]
    make(cwd / "data")
    info = json.loads((cwd / "data" / "dataset_info.json").read_text())
    info["x"] = {"file_name": "x.JSONL" if "JSONL" in says else "x.jsonl.gz" if "gz" in says else "x"}
    (cwd / "data" / "dataset_info.json").write_text(json.dumps(info))
    assert says in _refused(cwd, {"dataset": "x"})
