"""Real DeepSpeed configs (tests/data/deepspeed_configs/, from public repositories) read as `--deepspeed
FILE` reads them: each placed on the ladder where its own keys put it, each copy for another rung one that
DeepSpeed takes, each file that is not JSON refused in one line that names it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from launcher.configs import load_templates, read_user_deepspeed
from launcher.errors import SafeSftError
from launcher.plan.ds_config import for_rung, unknown_zero_key_warnings, zero_section

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_deepspeed_configs import expected_rung, judge  # the rung a file's labels name; the bench's verdict

DATA = Path(__file__).resolve().parents[1] / "data" / "deepspeed_configs"
INDEX = [json.loads(line) for line in (DATA / "index.jsonl").read_text().splitlines()]
TEMPLATES = load_templates()


def _params(valid: bool) -> list[object]:
    return [pytest.param(row, id=row["file"].removeprefix("files/")) for row in INDEX if row["valid_json"] is valid]


def test_the_set_is_real_and_varied() -> None:
    assert len(INDEX) >= 50 and len({row["repo"] for row in INDEX}) >= 20
    assert {row["stage"] for row in INDEX} >= {0, 1, 2, 3}
    assert {row["file"] for row in INDEX} == {f"files/{p.name}" for p in (DATA / "files").iterdir()}


@pytest.mark.parametrize("row", _params(True))
def test_a_real_config_is_placed_where_its_own_keys_put_it(row: dict) -> None:  # type: ignore[type-arg]
    path = DATA / row["file"]
    if row["micro_batch"] is None and row["train_batch_size"] is None:  # DeepSpeed refuses it: so does safe-sft
        with pytest.raises(SafeSftError, match="sets neither train_micro_batch_size_per_gpu nor train_batch_size"):
            read_user_deepspeed(str(path))
        return
    config = read_user_deepspeed(str(path))
    assert config is not None and config.rung == expected_rung(row)


def _has_batch(row: dict) -> bool:  # type: ignore[type-arg]
    return row["micro_batch"] is not None or row["train_batch_size"] is not None


@pytest.mark.parametrize("row", [p for p in _params(True) if _has_batch(p.values[0])])  # type: ignore[attr-defined]
def test_each_rungs_copy_of_a_real_config_is_one_deepspeed_takes(row: dict) -> None:  # type: ignore[type-arg]
    """A copy is taken wherever DeepSpeed takes the user's own config; where it refuses the user's (a
    misspelled key, a negative distance), it refuses each stage-3 copy too, which keeps all the user wrote
    (a stage-2 copy leaves the stage3_ keys out)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from pydantic import ValidationError

    config = read_user_deepspeed(str(DATA / row["file"]))
    assert config is not None
    try:
        DeepSpeedZeroConfig(**zero_section(config.config))
        taken = True
    except ValidationError:
        taken = False
    for rung, template in TEMPLATES.items():
        copy = for_rung(config.config, template, pin_memory=True)
        if not taken:
            if copy["zero_optimization"]["stage"] == 3:
                with pytest.raises(ValidationError):
                    DeepSpeedZeroConfig(**copy["zero_optimization"])
            continue
        zero = DeepSpeedZeroConfig(**copy["zero_optimization"])
        assert int(zero.stage) == template["zero_optimization"]["stage"], rung
        offloaded = zero.offload_optimizer is not None and zero.offload_optimizer.device != "none"
        assert offloaded is rung.endswith("_offload"), rung


@pytest.mark.parametrize("row", _params(True))
def test_a_real_config_with_a_zero_key_deepspeed_refuses_is_warned_of(row: dict) -> None:  # type: ignore[type-arg]
    """Each key DeepSpeed's own model refuses is named in a plan warning; a config it takes gets none."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    config = json.loads((DATA / row["file"]).read_text())
    zero = zero_section(config)
    refused = [key for key in zero if key not in DeepSpeedZeroConfig.model_fields and key not in _aliases()]
    warned = unknown_zero_key_warnings(config)
    assert [line.split("zero_optimization key ")[1].split(" ")[0].strip("'") for line in warned] == refused


def _aliases() -> set[str]:
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    return {field.alias for field in DeepSpeedZeroConfig.model_fields.values() if field.alias}


@pytest.mark.parametrize("row", _params(False))
def test_a_real_config_that_is_not_json_is_refused_in_one_line_that_names_it(row: dict) -> None:  # type: ignore[type-arg]
    path = DATA / row["file"]
    with pytest.raises(SafeSftError) as err:
        read_user_deepspeed(str(path))
    assert err.value.message.startswith(f"--deepspeed {path}: not a readable JSON file (")
    assert "\n" not in err.value.message


@pytest.mark.parametrize("row", [pytest.param(row, id=row["file"].removeprefix("files/")) for row in INDEX])
def test_the_bench_reads_each_real_config_as_the_tests_above_do(row: dict) -> None:  # type: ignore[type-arg]
    """scripts/bench_deepspeed_configs.py, which measures sets kept out of this repository, judges each file
    of this one right, as the tests above hold it."""
    assert judge(DATA, row)[1] is None
