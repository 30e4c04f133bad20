"""`safe-sft llamafactory train` refuses, before anything starts, what LLaMA-Factory's own parsing would stop
every rank on or hand its trainer unusable (launcher/backends/llamafactory_args.py), reading the config and
the overrides as OmegaConf does. The real parser's behaviour on each case is held in
tests/stack/test_llamafactory_options_real.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.backends import llamafactory_args
from launcher.backends.llamafactory import LLAMAFACTORY
from launcher.errors import SafeSftError

CONFIG = """\
model_name_or_path: /models/qwen
stage: sft
do_train: true
finetuning_type: lora
dataset: identity
template: qwen
cutoff_len: 1024
learning_rate: 1e-4
output_dir: saves/qwen
per_device_train_batch_size: 2
save_strategy: "no"
"""


@pytest.fixture(autouse=True)
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's LLaMA-Factory and transformers are the installed ones (this environment has no
    LLaMA-Factory), and neither ALLOW_EXTRA_ARGS nor USE_MCA is set."""
    monkeypatch.setattr(llamafactory_args, "installed_versions", llamafactory_args.table_versions)
    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)
    monkeypatch.delenv("USE_MCA", raising=False)


@pytest.fixture(autouse=True)
def data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the run starts: its data/dataset_info.json names the configs' dataset, as LLaMA-Factory's does."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dataset_info.json").write_text('{"identity": {"file_name": "identity.json"}}')
    (tmp_path / "data" / "identity.json").write_text("[]")


def _read(tmp_path: Path, text: str, *overrides: str) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(text)
    read = LLAMAFACTORY.read([str(config), *overrides])
    assert read.check_named is not None
    read.check_named()  # as the run path does, with the other checks of what the arguments name


def test_a_config_as_llamafactorys_examples_write_it_is_taken(tmp_path: Path) -> None:
    """1e-4 is a number to OmegaConf (text to PyYAML's safe loader), and "no" a save strategy."""
    _read(tmp_path, CONFIG, "per_device_train_batch_size=4", "learning_rate=2e-5", "bf16=true", "stage=sft")


@pytest.mark.parametrize(
    ("text", "overrides", "message", "hint"),
    [
        pytest.param(
            CONFIG + "learning_rat: 1.0e-4\n", (),
            "{config}: LLaMA-Factory 0.9.5 has no argument learning_rat (its parser stops every rank on it)",
            "did you mean learning_rate? see `llamafactory-cli train -h`; ALLOW_EXTRA_ARGS=1 makes LLaMA-Factory "
            "leave unknown keys alone",
            id="unknown-key",
        ),
        pytest.param(
            CONFIG, ("per_device_train_batch_sizes=4",),
            "`per_device_train_batch_sizes=4`: LLaMA-Factory 0.9.5 has no argument per_device_train_batch_sizes "
            "(its parser stops every rank on it)",
            "did you mean per_device_train_batch_size? see `llamafactory-cli train -h`; ALLOW_EXTRA_ARGS=1 makes "
            "LLaMA-Factory leave unknown keys alone",
            id="unknown-override",
        ),
        pytest.param(
            CONFIG.replace("per_device_train_batch_size: 2", 'per_device_train_batch_size: "2"'), (),
            '{config}: per_device_train_batch_size "2" is not a whole number: LLaMA-Factory hands it to the '
            "trainer as it is",
            "write per_device_train_batch_size: 2, unquoted",
            id="quoted-int",
        ),
        pytest.param(
            CONFIG, ("lora_rank='8'",),
            '`lora_rank=\'8\'`: lora_rank "8" is not a whole number: LLaMA-Factory hands it to the trainer as it is',
            "write lora_rank: 8, unquoted",
            id="quoted-override",
        ),
        pytest.param(
            CONFIG, ("learning_rate=fast",),
            '`learning_rate=fast`: learning_rate "fast" is not a number: LLaMA-Factory hands it to the trainer as '
            "it is",
            "write learning_rate: followed by a number, unquoted (like learning_rate: 3.0)",
            id="text-float",
        ),
        pytest.param(
            CONFIG, ("num_train_epochs='3'",),
            '`num_train_epochs=\'3\'`: num_train_epochs "3" is not a number: LLaMA-Factory hands it to the trainer '
            "as it is",
            "write num_train_epochs: 3, unquoted",
            id="quoted-float",
        ),
        pytest.param(
            CONFIG.replace("do_train: true", 'do_train: "false"'), (),
            '{config}: do_train "false" is not true or false: LLaMA-Factory hands it on as it is (text, even '
            '"false", reads as true)',
            "write do_train: true or do_train: false, unquoted",
            id="quoted-bool",
        ),
        pytest.param(
            CONFIG.replace("stage: sft", "stage: stf"), (),
            '{config}: stage "stf" is not one of LLaMA-Factory\'s values (pt, sft, rm, ppo, dpo, kto)',
            "did you mean sft? use one of those",
            id="literal-typo",
        ),
        pytest.param(
            CONFIG.replace('save_strategy: "no"', "save_strategy: no"), (),
            "{config}: save_strategy false is not one of LLaMA-Factory's values (no, steps, epoch, best)",
            'quote it: save_strategy: "no" (YAML reads a bare no, yes, off or on as false or true)',
            id="bare-no",
        ),
        pytest.param(
            CONFIG + "max_steps: null\n", (),
            "{config}: max_steps is null: LLaMA-Factory sets it to None, which its trainer cannot use (every rank "
            "stops on it)",
            "leave max_steps out for LLaMA-Factory's default, or give it a value",
            id="null-where-none-is-no-value",
        ),
        pytest.param(
            CONFIG, ("per_device_train_batch_size=null",),
            "`per_device_train_batch_size=null`: per_device_train_batch_size is null: LLaMA-Factory sets it to None, "
            "which its trainer cannot use (every rank stops on it)",
            "leave per_device_train_batch_size out for LLaMA-Factory's default, or give it a value",
            id="null-override",
        ),
        pytest.param(
            CONFIG, ("lr_scheduler_type=cosin",),
            '`lr_scheduler_type=cosin`: lr_scheduler_type "cosin" is not one of LLaMA-Factory\'s values (linear, '
            "cosine, cosine_with_restarts, polynomial, constant, constant_with_warmup, inverse_sqrt, "
            "reduce_lr_on_plateau, cosine_with_min_lr, cosine_warmup_with_min_lr, warmup_stable_decay, greedy)",
            "did you mean cosine? use one of those",
            id="enum-typo",
        ),
        pytest.param(
            CONFIG.replace("template: qwen", "template: qwen2.5"), (),
            '{config}: template "qwen2.5" is not one of LLaMA-Factory\'s values (alpaca, bailing, bailing_v2, breeze, '
            "chatglm3, chatml, chatml_de, cohere, cpm4, dbrx, deepseek, deepseek3, and 109 more)",
            "did you mean qwen? use one of its values",
            id="template-typo",
        ),
    ],
)  # fmt: skip
def test_what_llamafactory_cannot_use_is_one_line_naming_the_key_and_where(
    tmp_path: Path, text: str, overrides: tuple[str, ...], message: str, hint: str
) -> None:
    with pytest.raises(SafeSftError) as err:
        _read(tmp_path, text, *overrides)
    assert (err.value.message, err.value.hint) == (message.format(config=tmp_path / "sft.yaml"), hint)


def test_a_float_max_steps_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    """LLaMA-Factory hands max_steps: 2.0 to transformers, whose loop stopped every rank on it in range()."""
    config = tmp_path / "sft.yaml"
    config.write_text(CONFIG + "max_steps: 2.0\n")
    with pytest.raises(SafeSftError) as err:
        LLAMAFACTORY.read([str(config)]).args.check_values()
    assert (err.value.message, err.value.hint) == (
        "max_steps '2.0' is not a whole number",
        "set max_steps to a whole number",
    )
    LLAMAFACTORY.read([str(config), "max_steps=-1"]).args.check_values()  # -1: by epochs, as transformers reads it


def test_a_number_of_the_other_kind_and_a_number_for_a_bool_are_left_to_llamafactory(tmp_path: Path) -> None:
    """They work where Python takes them (peft's lora_alpha 16.0, do_train: 1); the plan's own whole-number
    fields are checked as such by SwiftArgs.check_values."""
    _read(tmp_path, CONFIG + "lora_alpha: 16.0\nlora_dropout: 0\n", "do_eval=0")


def test_a_null_where_none_is_the_fields_type_or_default_is_taken(tmp_path: Path) -> None:
    """max_samples (int | None), eval_steps (transformers' float | None), template (its default is None)."""
    _read(tmp_path, CONFIG + "max_samples: null\neval_steps: null\n", "template=null")


def test_a_key_given_twice_in_the_yaml_is_refused_as_omegaconf_refuses_it(tmp_path: Path) -> None:
    with pytest.raises(SafeSftError) as err:
        _read(tmp_path, CONFIG + "cutoff_len: 2048\n")
    assert "is not valid YAML at line" in err.value.message and "cutoff_len given twice" in err.value.message


def test_a_yaml_merge_key_is_read_as_omegaconf_merges_it(tmp_path: Path) -> None:
    """`<<: *shared` had been refused as "not valid YAML" (no constructor for the merge tag); OmegaConf takes
    the merged keys, and the mapping's own win over them (tests/stack holds the reading to OmegaConf's)."""
    from launcher.swift_config import load_swift_config

    config = tmp_path / "merged.yaml"
    config.write_text("shared: &shared {cutoff_len: 128, template: qwen}\n<<: *shared\ncutoff_len: 256\n")
    loaded = load_swift_config([str(config)], omegaconf=True) or {}
    assert (loaded["cutoff_len"], loaded["template"]) == (256, "qwen")


def test_a_key_given_twice_among_thousands_is_found_in_linear_time(tmp_path: Path) -> None:
    """The check counts keys once (it had compared each key with every other: 200k keys never ended)."""
    many = "".join(f"k{i}: {i}\n" for i in range(20_000))
    with pytest.raises(SafeSftError) as err:
        _read(tmp_path, CONFIG + many + "k7: 8\n")
    assert "k7 given twice" in err.value.message


def test_allow_extra_args_leaves_an_unknown_key_to_llamafactory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOW_EXTRA_ARGS", "true")
    _read(tmp_path, CONFIG + "my_own_key: 1\n", "another=2")
    with pytest.raises(SafeSftError):  # a value of a known key is still checked
        _read(tmp_path, CONFIG + "my_own_key: 1\n", "cutoff_len=long")


@pytest.mark.parametrize(
    "installed",
    [(None, None), ("0.9.4", "5.6.0"), ("0.9.6.dev0", "5.6.0"), ("0.9.5", "4.57.1")],
    ids=["none", "older", "newer", "other-transformers"],
)
def test_other_versions_are_not_checked_against_this_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: tuple[str | None, str | None]
) -> None:
    """Their arguments may differ (transformers 4.57's TrainingArguments still has
    fsdp_transformer_layer_cls_to_wrap, which LLaMA-Factory's own fp8 example sets): a key this table lacks
    is left to them, as is a plan made where they are not installed."""
    monkeypatch.setattr(llamafactory_args, "installed_versions", lambda: installed)
    _read(tmp_path, CONFIG + "fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n", "cutoff_len=long")


def test_under_use_mca_llamafactory_parses_megatrons_arguments_and_they_are_left_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USE_MCA", "1")
    _read(tmp_path, CONFIG + "tensor_model_parallel_size: 2\n")


def test_the_table_covers_llamafactorys_train_arguments() -> None:
    kinds = llamafactory_args._table()[1]
    assert llamafactory_args.table_versions() == ("0.9.5", "5.6.0")
    assert kinds["cutoff_len"] == ("int",) and kinds["learning_rate"] == ("float",)
    assert kinds["stage"] == ("choice", "pt", "sft", "rm", "ppo", "dpo", "kto")
    assert kinds["deepspeed"] == ("any?",)  # `?`: a YAML null suits it
    assert kinds["template"][0] == "choice?" and {"qwen", "llama3", "empty"} <= set(kinds["template"][1:])
    assert len(kinds) > 300


def test_a_json_config_is_refused_where_llamafactory_0_9_5_cannot_read_one(tmp_path: Path) -> None:
    config = tmp_path / "sft.json"
    config.write_text('{"model_name_or_path": "m", "stage": "sft"}')
    with pytest.raises(SafeSftError) as err:
        LLAMAFACTORY.read([str(config)])
    assert err.value.message == (
        f"{config}: LLaMA-Factory 0.9.5 cannot read a JSON config (its read_args hands json.load a path, and "
        "every rank stops on it)"
    )
    assert err.value.hint == "write the same keys as YAML (sft.yaml) and give that"


V1_CONFIG = """\
model: Qwen/Qwen3-4B
model_class: llm
template: qwen3_nothink
train_dataset: data/v1_sft_demo.yaml
output_dir: ./outputs/test_lora
micro_batch_size: 1
"""


@pytest.mark.parametrize("use_v1", [None, "1"])
def test_a_v1_config_is_named_as_one_with_both_ways_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_v1: str | None
) -> None:
    """As LLaMA-Factory's examples/v1 write it: v0's parser, which every rank runs, stops on it."""
    if use_v1:
        monkeypatch.setenv("USE_V1", use_v1)
    else:
        monkeypatch.delenv("USE_V1", raising=False)
    with pytest.raises(SafeSftError) as err:
        _read(tmp_path, V1_CONFIG)
    assert err.value.message.startswith(f"{tmp_path / 'sft.yaml'}: a LLaMA-Factory v1 config (it names model,")
    assert ("USE_V1=1 is set" in err.value.message) is bool(use_v1)
    assert "model_name_or_path" in err.value.hint and "USE_V1=1 llamafactory-cli train" in err.value.hint


def test_a_v0_config_with_a_stray_model_key_is_an_unknown_key_not_a_v1_config(tmp_path: Path) -> None:
    with pytest.raises(SafeSftError) as err:
        _read(tmp_path, CONFIG + "model: x\n")
    assert "has no argument model" in err.value.message


def test_a_dataset_missing_from_dataset_info_is_refused_when_the_config_is_read(tmp_path: Path) -> None:
    with pytest.raises(SafeSftError) as err:
        _read(tmp_path, CONFIG.replace("dataset: identity", "dataset: identiy"))
    assert err.value.message.startswith(
        f"{tmp_path / 'sft.yaml'}: dataset identiy is not in {tmp_path / 'data' / 'dataset_info.json'}"
    )
    assert err.value.hint.startswith("did you mean identity?")


def test_a_plan_for_another_machine_warns_of_a_dataset_info_that_is_not_here(tmp_path: Path) -> None:
    """LLaMA-Factory looks dataset_info.json up where it runs: 50 of 54 public configs name datasets in a
    data/ folder of their own repository. A plan for another machine took that for an error (exit 2); the
    model and data files of a swift plan for another machine are only warned of."""
    from launcher.prepare import read_named_inputs

    config = tmp_path / "sft.yaml"
    config.write_text(CONFIG + f"dataset_dir: {tmp_path / 'elsewhere'}\n")
    read = LLAMAFACTORY.read([str(config)])
    named = read_named_inputs(read.args, LLAMAFACTORY, assumed=True, check_named=read.check_named)
    (warning,) = named.warnings
    assert warning.startswith(f"{tmp_path / 'elsewhere' / 'dataset_info.json'} cannot be read (No such file")
    assert warning.endswith("(not checked further: the plan is for another machine)")
    with pytest.raises(SafeSftError):
        read_named_inputs(read.args, LLAMAFACTORY, assumed=False, check_named=read.check_named)


def test_a_template_the_installed_copy_registers_itself_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLaMA-Factory's docs tell a user to add a template to its data/template.py: the installed copy's own
    registrations are read (as text) before a name outside the table is refused."""
    package = tmp_path / "site" / "llamafactory"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "template.py").write_text('register_template(\n    name="qwen25",\n    format_user=None,\n)\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    _read(tmp_path, CONFIG.replace("template: qwen", "template: qwen25"))
    with pytest.raises(SafeSftError, match=r'template "qwen2\.5" is not one of'):
        _read(tmp_path, CONFIG.replace("template: qwen", "template: qwen2.5"))


@pytest.mark.parametrize(
    ("yaml", "overrides", "output_dir"),
    [
        pytest.param("output_dir: saves/lora\n", ["output_dir="], "trainer_output", id="an-empty-override"),
        pytest.param("output_dir: null\n", [], "trainer_output", id="a-yaml-null"),
        pytest.param("output_dir: saves/lora\n", [], "saves/lora", id="the-configs"),
        pytest.param("output_dir: saves/lora\n", ["output_dir=other"], "other", id="an-override"),
    ],
)
def test_an_empty_output_dir_is_llamafactorys_default_where_it_writes(
    tmp_path: Path, yaml: str, overrides: list[str], output_dir: str
) -> None:
    """`output_dir=` (a script's `output_dir=$OUT` with OUT unset) is OmegaConf's null: LLaMA-Factory writes to
    transformers' trainer_output/, so that is the dir safe-sft guards and resumes from, not the working
    directory, whose own trainer_output/ LLaMA-Factory then resumed half-written (hostile47lf F4)."""
    from launcher.plan.build import output_dir_of

    config = tmp_path / "c.yaml"
    config.write_text(f"model_name_or_path: m\nstage: sft\nfinetuning_type: lora\ndataset: x\n{yaml}")
    assert output_dir_of(LLAMAFACTORY.read([str(config), *overrides]).args) == output_dir


def test_a_deepspeed_path_that_is_no_file_is_not_fixed_with_swifts_names() -> None:
    """LLaMA-Factory takes no `zero3`: its fix had offered swift's names, which it then refused (hostile47lf F8)."""
    from launcher.configs import read_user_deepspeed

    with pytest.raises(SafeSftError) as err:
        read_user_deepspeed("ds_cfg/nope.json", names=False)
    assert err.value.message == "--deepspeed 'ds_cfg/nope.json' is no file and no inline JSON"
    assert (
        err.value.hint
        == "check the path (relative to where safe-sft runs), or give the path of a DeepSpeed JSON config"
    )
    with pytest.raises(SafeSftError) as err:
        read_user_deepspeed("ds_cfg/nope.json")  # swift's
    assert err.value.hint.endswith("or pass one of zero2, zero3, zero3_offload")


def test_the_config_is_a_file_llamafactory_reads_again_at_each_attempt(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: m\nstage: sft\nfinetuning_type: lora\ndataset: x\n")
    assert LLAMAFACTORY.read([str(config)]).reread == (str(config.resolve()),)
