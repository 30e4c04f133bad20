"""Real LLaMA-Factory configs (tests/data/llamafactory_configs/, from public repositories) read as
`safe-sft plan --backend llamafactory CONFIG` reads them for another machine: each is read with the values
it writes, or refused in one line that names the file; none ends in a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.backends.llamafactory import LLAMAFACTORY
from launcher.errors import SafeSftError
from launcher.prepare import read_named_inputs

DATA = Path(__file__).resolve().parents[1] / "data" / "llamafactory_configs"
INDEX = [json.loads(line) for line in (DATA / "index.jsonl").read_text().splitlines()]
# the index's field -> safe-sft's name for it
READ_AS = {
    "per_device_train_batch_size": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "cutoff_len": "max_length",
    "deepspeed": "deepspeed",
    "output_dir": "output_dir",
    "finetuning_type": "tuner_type",  # what the estimate counts as trained
    "quantization_bit": "quant_bits",
}


def test_the_set_is_real_and_varied() -> None:
    assert len(INDEX) >= 50 and len({row["repo"] for row in INDEX}) >= 20
    assert {row["file"] for row in INDEX} == {f"files/{p.name}" for p in (DATA / "files").iterdir()}


@pytest.mark.parametrize("row", [pytest.param(row, id=row["file"].removeprefix("files/")) for row in INDEX])
def test_a_real_config_is_read_with_its_values_or_refused_in_one_line(row: dict) -> None:  # type: ignore[type-arg]
    path = DATA / row["file"]
    try:
        read = LLAMAFACTORY.read([str(path)])
        read_named_inputs(read.args, LLAMAFACTORY, assumed=True, check_named=read.check_named)
    except SafeSftError as err:
        assert "\n" not in err.message and err.hint
        # refused: a repeated key (LLaMA-Factory's loader refuses it too), or a DeepSpeed path of its own repository
        assert (not row["valid_yaml"] and str(path) in err.message) or err.message.startswith("--deepspeed ")
        return
    assert row["valid_yaml"]
    args = read.args
    for field, key in READ_AS.items():
        if row[field] is not None and row[field] != "null":
            assert args.get(key) == row[field], field
