"""A user's own DeepSpeed config on the ladder: its rung, its derived copies, and when a copy is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.configs import load_templates, read_user_deepspeed, write_config
from launcher.errors import SafeSftError
from launcher.plan.degrade import Settings
from launcher.plan.ds_config import UserConfig, derived_path, for_rung, rung_of
from launcher.plan.settings import deepspeed_for

TEMPLATES = load_templates()
USER_ZERO2 = {
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 500000000, "overlap_comm": True},
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 0.5,
}


@pytest.mark.parametrize(
    ("zero", "rung"),
    [
        pytest.param(None, "zero0", id="no-zero-section"),
        pytest.param({"stage": 1}, "zero1", id="stage1"),
        pytest.param({"stage": 1, "offload_optimizer": {"device": "cpu"}}, "zero2_offload", id="stage1-cpu"),
        pytest.param({"stage": 2}, "zero2", id="stage2"),
        pytest.param({"stage": 2, "offload_optimizer": {"device": "cpu"}}, "zero2_offload", id="stage2-cpu"),
        pytest.param({"stage": 3}, "zero3", id="stage3"),
        pytest.param({"stage": 3, "offload_param": {"device": "none"}}, "zero3", id="stage3-device-none"),
        pytest.param({"stage": 3, "offload_optimizer": {"device": "nvme"}}, "zero3_offload", id="stage3-nvme"),
        pytest.param({"stage": "3"}, "zero3", id="stage-digit-string"),
        pytest.param({"stage": 2.0}, "zero2", id="stage-whole-float"),
    ],
)
def test_rung_of(zero: dict[str, object] | None, rung: str) -> None:
    assert rung_of({} if zero is None else {"zero_optimization": zero}) == rung


def test_for_rung_takes_stage_and_offload_from_the_template_and_keeps_the_rest() -> None:
    derived = for_rung(USER_ZERO2, TEMPLATES["zero3"], pin_memory=True)
    zero = derived["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["reduce_bucket_size"] == 500000000 and zero["overlap_comm"] is True  # the user's, kept
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True  # the template's, added
    assert "offload_param" not in zero and "offload_optimizer" not in zero
    assert derived["optimizer"] == USER_ZERO2["optimizer"] and derived["gradient_clipping"] == 0.5
    assert (derived["train_micro_batch_size_per_gpu"], derived["gradient_accumulation_steps"]) == ("auto", "auto")
    assert "train_batch_size" not in derived  # only the keys the user set become "auto"
    assert USER_ZERO2["zero_optimization"]["stage"] == 2  # the input is not changed


def test_for_rung_off_offload_keeps_the_users_stage3_settings() -> None:
    user = {"zero_optimization": {**TEMPLATES["zero3_offload"]["zero_optimization"], "stage3_max_live_parameters": 7}}
    derived = for_rung(user, TEMPLATES["zero3"], pin_memory=True)["zero_optimization"]
    assert "offload_param" not in derived and "offload_optimizer" not in derived
    assert derived["stage3_max_live_parameters"] == 7


def test_for_rung_without_pinning_turns_it_off_in_both_offload_sections() -> None:
    derived = for_rung(USER_ZERO2, TEMPLATES["zero3_offload"], pin_memory=False)["zero_optimization"]
    assert derived["offload_param"] == {"device": "cpu", "pin_memory": False}
    assert derived["offload_optimizer"] == {"device": "cpu", "pin_memory": False}


def test_for_rung_keeps_the_users_nvme_offload_where_the_rung_offloads_that_section() -> None:
    """A zero2 config that swaps the optimizer to NVMe (for a host short of RAM) moved to zero3_offload kept
    the rung's host offload instead: 16 bytes a parameter of host RAM the user had chosen not to spend."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    nvme = {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 8, "pin_memory": True}
    user = {"zero_optimization": {"stage": 2, "offload_optimizer": nvme}}
    for pin in (True, False):
        zero = for_rung(user, TEMPLATES["zero3_offload"], pin_memory=pin)["zero_optimization"]
        assert zero["stage"] == 3
        assert zero["offload_optimizer"] == {**nvme, "pin_memory": pin}  # the user's device and settings
        assert zero["offload_param"] == {"device": "cpu", "pin_memory": pin}  # the rung's: the user set none
        assert DeepSpeedZeroConfig(**zero).offload_optimizer.device == "nvme"
    off = for_rung(user, TEMPLATES["zero3"], pin_memory=True)["zero_optimization"]
    assert "offload_optimizer" not in off  # the rung decides whether: zero3 offloads nothing
    assert user["zero_optimization"]["offload_optimizer"] is nvme and nvme["pin_memory"] is True  # input kept


@pytest.mark.parametrize("section", ["offload_optimizer", "offload_param"])
def test_an_nvme_offload_without_its_path_is_refused_in_one_line(tmp_path: Path, section: str) -> None:
    """DeepSpeed's own model takes it (nvme_path is optional there), then every rank fails as it builds."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    zero = {"stage": 3, section: {"device": "nvme"}}
    DeepSpeedZeroConfig(**zero)  # taken
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": zero}))
    with pytest.raises(SafeSftError) as err:
        read_user_deepspeed(str(path))
    assert f'"{section}" swaps to NVMe ("device": "nvme") but names no "nvme_path"' in err.value.message
    zero[section]["nvme_path"] = "/local_nvme"  # type: ignore[index]
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": zero}))
    assert read_user_deepspeed(str(path)) is not None


def test_nvme_below_zero3_is_said_to_go_to_host_ram() -> None:
    from launcher.plan.ds_config import nvme_below_zero3_warnings

    nvme = {"device": "nvme", "nvme_path": "/nvme"}
    [warning] = nvme_below_zero3_warnings({"zero_optimization": {"stage": 2, "offload_optimizer": nvme}})
    assert "ZeRO stage 1 and 2 do not swap to" in warning and "host RAM" in warning
    assert nvme_below_zero3_warnings({"zero_optimization": {"stage": 3, "offload_optimizer": nvme}}) == []
    assert nvme_below_zero3_warnings({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}) == []


def test_derived_path_names_the_rung_and_changes_with_the_content() -> None:
    one = derived_path("/out", "ds", "zero3", True, {"a": 1})
    assert one.startswith("/out/safe-sft/ds-zero3-") and one.endswith(".json")
    assert one == derived_path("/out", "ds", "zero3", True, {"a": 1})
    assert one != derived_path("/out", "ds", "zero3", True, {"a": 2})
    assert "-zero3-nopin-" in derived_path("/out", "ds", "zero3", False, {"a": 1})


def settings(deepspeed: str | None, micro: int = 4, accum: int = 2, pin: bool = True) -> Settings:
    return Settings(micro_batch=micro, grad_accum=accum, world_size=2, deepspeed=deepspeed, offload_pin_memory=pin)


def choice(initial: Settings, now: Settings, user: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    config = UserConfig("ds", user) if user is not None else None
    return deepspeed_for(now, initial, user=config, templates=TEMPLATES, config_dir="/cfg", output_dir="/out")


def test_the_users_config_is_untouched_while_nothing_it_holds_changes() -> None:
    unchanged = choice(settings("zero2"), settings("zero2"), USER_ZERO2)
    assert (unchanged.value, unchanged.write) == (None, None)


def test_a_smaller_micro_batch_rewrites_the_users_literal_batch_sizes_as_auto() -> None:
    """transformers raises on a DeepSpeed batch size that disagrees with the arguments the ladder set."""
    halved = choice(settings("zero2"), settings("zero2", micro=2, accum=4), USER_ZERO2)
    assert halved.value is not None and halved.value.startswith("/out/safe-sft/ds-zero2-")
    assert halved.write is not None and halved.write["train_micro_batch_size_per_gpu"] == "auto"
    assert halved.write["zero_optimization"] == USER_ZERO2["zero_optimization"]


def test_an_all_auto_users_config_needs_no_copy_for_a_smaller_micro_batch() -> None:
    user = {**USER_ZERO2, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}
    halved = choice(settings("zero2"), settings("zero2", micro=2, accum=4), user)
    assert (halved.value, halved.write) == (None, None)


def test_a_higher_zero_stage_moves_the_users_config_up() -> None:
    up = choice(settings("zero2", micro=1), settings("zero3", micro=1), USER_ZERO2)
    assert up.value is not None and "-zero3-" in up.value
    assert up.write is not None and up.write["zero_optimization"]["stage"] == 3
    assert up.write["optimizer"] == USER_ZERO2["optimizer"]


@pytest.mark.parametrize(
    ("initial", "now", "value", "writes"),
    [
        pytest.param(settings("zero2"), settings("zero2"), None, False, id="unchanged"),
        pytest.param(settings("zero2"), settings("zero3"), "/cfg/zero3.json", False, id="zero2-to-zero3"),
        pytest.param(settings("zero1"), settings("zero2"), "/cfg/zero2.json", False, id="swift-name-to-ours"),
        pytest.param(settings("zero3_offload"), settings("zero3_offload", pin=False),
                     "/out/safe-sft/zero3_offload_nopin.json", True, id="no-pin"),
        pytest.param(settings(None), settings(None, micro=2, accum=4), None, False, id="no-deepspeed"),
    ],
)  # fmt: skip
def test_our_rungs_are_our_files(initial: Settings, now: Settings, value: str | None, writes: bool) -> None:
    ours = choice(initial, now)
    assert ours.value == value
    assert (ours.write is not None) == writes


def test_read_user_deepspeed_reads_a_file_or_inline_json_and_leaves_swifts_names(tmp_path: Path) -> None:
    path = tmp_path / "my_ds.json"
    path.write_text(json.dumps(USER_ZERO2))
    from_file = read_user_deepspeed(str(path))
    assert from_file is not None and (from_file.stem, from_file.rung) == ("my_ds", "zero2")
    inline = read_user_deepspeed('{"zero_optimization": {"stage": 3}, "train_batch_size": "auto"}')
    assert inline is not None and (inline.stem, inline.rung) == ("inline", "zero3")
    assert read_user_deepspeed("zero2_offload") is None and read_user_deepspeed(None) is None


def test_inline_json_in_pythons_quotes_is_read_as_swift_repairs_it_and_left_to_other_trainers() -> None:
    """swift's json_parse_to_dict repairs `{'stage': 2}` (json_repair) and trains; transformers does not."""
    value = "{'zero_optimization':{'stage':2},'train_micro_batch_size_per_gpu':'auto',}"
    repaired = read_user_deepspeed(value, repair=True)
    assert repaired is not None and (repaired.stem, repaired.rung) == ("inline", "zero2")
    assert repaired.config["train_micro_batch_size_per_gpu"] == "auto"
    with pytest.raises(SafeSftError, match="is no file, no inline JSON"):
        read_user_deepspeed(value)
    with pytest.raises(SafeSftError, match="is no file, no inline JSON"):
        read_user_deepspeed("ds.json", repair=True)  # a file that is not there repairs to nothing


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("{not json", "not a readable JSON file", id="bad-json"),
        pytest.param("[1, 2]", "the JSON is not an object", id="array"),
        pytest.param('{"zero_optimization": {"stage": 2}}', "neither train_micro_batch_size_per_gpu", id="no-batch"),
        pytest.param(None, "is no file, no inline JSON", id="missing"),
        pytest.param('{"zero_optimization": {"stage": 7}}', '"stage": 7 is not a ZeRO stage', id="stage-7"),
        pytest.param('{"zero_optimization": {"stage": "two"}}', '"stage": "two" is not a ZeRO stage', id="stage-two"),
        pytest.param('{"zero_optimization": {"stage": true}}', '"stage": true is not a ZeRO stage', id="stage-bool"),
        pytest.param('{"zero_optimization": {"stage": -1}}', '"stage": -1 is not a ZeRO stage', id="stage-negative"),
        pytest.param('{"zero_optimization": [2]}', '"zero_optimization": \\[2\\] is not an object', id="zero-list"),
        *(
            pytest.param(
                f'{{"zero_optimization": {{"stage": 3, "stage3_max_live_parameters": {number}}}}}',
                f"{number} is no number DeepSpeed can use",
                id=f"size-{number}",
            )
            for number in ("Infinity", "NaN", "1e400", "1" + "0" * 30)
        ),
        pytest.param("[" * 100_000 + "]" * 100_000, "not a readable JSON file", id="nested-too-deep"),
    ],
)
def test_read_user_deepspeed_errors_name_the_value(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "ds.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SafeSftError, match=message) as error:
        read_user_deepspeed(str(path))
    assert str(path) in error.value.message and "\n" not in error.value.message
    assert "zero3_offload" in error.value.hint or '"auto"' in error.value.hint or '"stage"' in error.value.hint


def test_write_config_reuses_an_identical_file_and_refuses_a_different_one(tmp_path: Path) -> None:
    path = tmp_path / "safe-sft" / "c.json"
    write_config(path, {"a": 1})
    write_config(path, {"a": 1})
    with pytest.raises(SafeSftError, match="exists and differs"):
        write_config(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in path.parent.iterdir()] == ["c.json"]  # no staging file left behind


def _write_after(barrier, path: Path, config: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    write_config(path, config)


def test_write_config_from_many_nodes_at_once_never_reads_a_half_written_file(tmp_path: Path) -> None:
    """Every node writes the same derived config to the shared output dir at the same moment."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    config = {"zero_optimization": {"stage": 3}, "pad": "x" * 4_000_000}  # big enough to be seen half-written
    for round_number in range(5):
        path = tmp_path / f"round-{round_number}" / "c.json"
        barrier = context.Barrier(8)
        workers = [context.Process(target=_write_after, args=(barrier, path, config)) for _ in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        assert [worker.exitcode for worker in workers] == [0] * 8
        assert json.loads(path.read_text()) == config


@pytest.mark.parametrize(
    ("literal", "disagrees"),
    [
        pytest.param({"gradient_accumulation_steps": 16}, "gradient_accumulation_steps 16 != 2", id="accumulation"),
        pytest.param({"train_micro_batch_size_per_gpu": 1}, "train_micro_batch_size_per_gpu 1 != 4", id="micro"),
        pytest.param({"train_batch_size": 0}, "train_batch_size 0 != 16", id="global"),
        pytest.param({"train_batch_size": 16, "gradient_accumulation_steps": 2}, None, id="agreeing"),
    ],
)
def test_a_literal_batch_size_the_first_attempt_contradicts_is_run_as_a_copy_with_auto(
    literal: dict[str, object], disagrees: str | None
) -> None:
    """safe-sft runs more processes than plain swift and divides the accumulation to keep the global batch:
    the user's literal 16 then contradicts the 2 it passes, and transformers stops every rank on it."""
    from launcher.plan.ds_config import batch_disagreement

    user = {**USER_ZERO2, "train_micro_batch_size_per_gpu": "auto", **literal}
    assert batch_disagreement(user, micro_batch=4, grad_accum=2, world_size=2) == disagrees
    first = choice(settings("zero2"), settings("zero2"), user)
    if disagrees is None:
        assert (first.value, first.write) == (None, None)  # the user's file, untouched
    else:
        assert first.value is not None and first.value.startswith("/out/safe-sft/ds-zero2-")
        assert first.write is not None and all(first.write[key] == "auto" for key in literal)


# DeepSpeedExamples' Megatron-LM scripts/ds_zero-offload_config.json and GLM's config_blocklm_10B.json write
# the optimizer's offload in DeepSpeed's deprecated spelling
LEGACY = {"train_batch_size": 64, "zero_optimization": {"stage": 2, "cpu_offload": True, "reduce_bucket_size": 5e7}}


def test_the_deprecated_cpu_offload_spelling_is_read_as_the_offload_it_is() -> None:
    """`cpu_offload: true` offloads the optimizer as `offload_optimizer: {device: cpu}` does: it was read as
    plain ZeRO-2 (the estimate kept the optimizer on the GPU and none of it in host RAM)."""
    from launcher.plan.ds_config import zero_settings

    assert rung_of(LEGACY) == "zero2_offload"
    assert zero_settings(LEGACY, 4096).offload_optimizer
    param = {"zero_optimization": {"stage": 3, "cpu_offload_param": True}}
    assert rung_of(param) == "zero3_offload" and zero_settings(param, 4096).offload_param
    off = {"zero_optimization": {"stage": 2, "cpu_offload": False}}
    assert rung_of(off) == "zero2" and not zero_settings(off, 4096).offload_optimizer


@pytest.mark.parametrize("rung", ["zero2", "zero3", "zero3_offload"])
def test_every_rungs_copy_of_a_deprecated_spelling_is_a_config_deepspeed_takes(rung: str) -> None:
    """DeepSpeed refuses `cpu_offload` beside `offload_optimizer` ("Cannot provide deprecated parameter
    'cpu_offload' and replacing parameter 'offload_optimizer' together"): the zero3_offload rung's copy of
    such a config stopped every rank at start."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    copy = for_rung(LEGACY, TEMPLATES[rung], pin_memory=True)
    zero = DeepSpeedZeroConfig(**copy["zero_optimization"])
    assert (zero.offload_optimizer is not None) is rung.endswith("_offload")  # the rung's choice, not the user's
    assert copy["zero_optimization"]["reduce_bucket_size"] == 5e7  # the user's other keys kept


def test_a_stage_written_as_deepspeed_also_reads_it_is_that_stage_in_the_estimate() -> None:
    """DeepSpeed takes 3, 3.0 and "3"; the estimate read the last two as stage 0 (no sharding)."""
    from launcher.plan.ds_config import zero_settings

    for stage in (3, 3.0, "3"):
        assert zero_settings({"zero_optimization": {"stage": stage}}, 4096).stage == 3


def _deepspeed_zero_keys() -> tuple[str, set[str]]:
    import deepspeed
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    keys = set()
    for name, field in DeepSpeedZeroConfig.model_fields.items():
        keys |= {name, *([field.alias] if field.alias else [])}
    return deepspeed.__version__, keys


def test_the_zero_keys_and_their_two_names_are_deepspeeds_own() -> None:
    """ZERO_KEYS and ZERO_ALIASES are DeepSpeed's ZeRO model, read without importing it: every key listed is
    one DeepSpeed takes, and on the version they were read from, every key it takes is listed."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from launcher.plan.ds_config import DEEPSPEED_VERSION, ZERO_ALIASES, ZERO_KEYS

    version, keys = _deepspeed_zero_keys()
    assert keys >= ZERO_KEYS
    if version.startswith(DEEPSPEED_VERSION + "."):
        assert keys == ZERO_KEYS
    for name, field in DeepSpeedZeroConfig.model_fields.items():
        if field.alias:
            assert ZERO_ALIASES[name] == field.alias
        new = (field.json_schema_extra or {}).get("new_param")
        if new in DeepSpeedZeroConfig.model_fields and DeepSpeedZeroConfig.model_fields[new].alias:
            assert ZERO_ALIASES[name] == DeepSpeedZeroConfig.model_fields[new].alias  # a deprecated name


@pytest.mark.parametrize(
    ("key", "warned"),
    [
        ("stage3_param_persitence_threshold", "did you mean 'stage3_param_persistence_threshold'?"),
        ("_stage3_param_persistence_threshold", "did you mean 'stage3_param_persistence_threshold'?"),
        ("offload_everything", "remove it"),
        ("max_live_parameters", None),  # DeepSpeed's field name beside its stage3_ alias
        ("cpu_offload", None),
    ],
)
def test_a_zero_key_deepspeed_refuses_is_a_plan_warning(key: str, warned: str | None) -> None:
    """DeepSpeedExamples' ZeRO-Infinity config misspells a key, and its NVMe inference config disables one
    with a leading underscore: DeepSpeed stops every rank at start on either."""
    from launcher.plan.ds_config import unknown_zero_key_warnings

    found = unknown_zero_key_warnings({"zero_optimization": {"stage": 3, key: 1}})
    if warned is None:
        assert found == []
    else:
        (line,) = found
        assert line.startswith(f"--deepspeed config: DeepSpeed 0.19 takes no zero_optimization key {key!r}")
        assert line.endswith(warned)


def test_a_rungs_copy_keeps_the_users_spelling_of_a_key_deepspeed_takes_under_two_names() -> None:
    """axolotl's zero3_bf16.json writes `max_live_parameters` (no `stage3_`), s1's the deprecated
    `stage3_gather_fp16_weights_on_model_save`: with the template's spelling beside them, DeepSpeed refused
    the zero3_offload rung's copy ("Extra inputs are not permitted"), a config it had taken from the user."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    user = {
        "train_micro_batch_size_per_gpu": "auto",
        "zero_optimization": {
            "stage": 3, "max_live_parameters": 0, "max_reuse_distance": 0,
            "stage3_gather_fp16_weights_on_model_save": True,
        },
    }  # fmt: skip
    copy = for_rung(user, TEMPLATES["zero3_offload"], pin_memory=True)
    zero = DeepSpeedZeroConfig(**copy["zero_optimization"])
    assert (zero.max_live_parameters, zero.max_reuse_distance) == (0, 0)  # the user's values
    assert "stage3_max_live_parameters" not in copy["zero_optimization"]
    from launcher.plan.ds_config import zero_settings

    assert zero_settings(user, 4096).max_live_parameters == 0  # the estimate reads either name too
