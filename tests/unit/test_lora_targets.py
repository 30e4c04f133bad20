"""--target_modules held to the modules the model's weights name (launcher.plan.lora_targets): swift hands
the list to peft once the model has loaded, and peft stops every rank where no module matches any name
("Target modules {'q_proj,v_proj'} not found in the base model", ms-swift issue #6516). A run refuses that
before the start; a name that matches nothing beside one that does is a plan warning (peft passes it over).
tests/stack/test_lora_targets_real.py holds the rule to real swift and to transformers' own modules."""

from __future__ import annotations

import ast
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from launcher.errors import SafeSftError
from launcher.model import ModelFacts, modules_of
from launcher.model_checks import swift_model_checks, target_checks
from launcher.plan.lora_targets import _unmatched, describe_missing, llamafactory_missing_targets, missing_targets
from launcher.plan.swift_args import parse_swift_argv
from launcher.probe.model_size import probe_model
from tests.unit.test_probes import write_safetensors
from tests.unit.test_real_model_configs import ROWS, _folder, _weight_map

LLAMA_TENSORS = [
    "model.embed_tokens.weight",
    *(
        f"model.layers.{i}.{name}.weight"
        for i in range(2)
        for name in (
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
            "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm",
        )
    ),
    "model.norm.weight",
]  # fmt: skip


def facts(tensors: list[str] = LLAMA_TENSORS, tied: bool = True) -> ModelFacts:
    paths = modules_of(tensors)
    return ModelFacts(name="m", total_params=1, source="safetensors", tie_word_embeddings=tied, module_paths=paths)


def swift(*args: str) -> Any:
    return parse_swift_argv(["--model", "m", "--use_cpu", "true", *args])


def test_a_comma_joined_list_is_one_name_to_swift_and_matches_nothing() -> None:
    found = missing_targets(swift("--target_modules", "q_proj,v_proj"), facts())
    assert found is not None and found.names == ("q_proj,v_proj",) and found.matched == ()
    what, fix = describe_missing(found)
    assert what.startswith("--target_modules q_proj,v_proj: no module of the model is so named (its weights' ")
    assert fix == "give the names as separate words, as swift reads a list: --target_modules q_proj v_proj"


def test_the_modules_named_are_a_layers_first_and_no_norm() -> None:
    found = missing_targets(swift("--target_modules", "wqkv"), facts())
    assert found is not None
    assert found.modules == (
        "down_proj",
        "gate_proj",
        "k_proj",
        "o_proj",
        "q_proj",
        "up_proj",
        "v_proj",
        "embed_tokens",
    )
    assert describe_missing(found)[1] == "name modules the model has, or give --target_modules all-linear"


def test_names_apart_a_path_of_them_a_tied_head_and_a_numbered_child_are_found() -> None:
    for targets in (
        ["q_proj", "v_proj"],
        ["self_attn.q_proj"],
        ["language_model.layers.0.self_attn.q_proj"],  # transformers 5 nests a VL decoder deeper than its files
        ["lm_head"],  # tied: no weight of its own in the checkpoint, a module once loaded
        ["embed_tokens"],
    ):
        assert missing_targets(swift("--target_modules", *targets), facts()) is None, targets
    merger = facts(["visual.merger.mlp.0.weight", "visual.merger.mlp.2.weight"])
    assert missing_targets(swift("--target_modules", "mlp.0"), merger) is None


def test_an_untied_model_without_an_output_layer_has_no_lm_head() -> None:
    found = missing_targets(swift("--target_modules", "lm_head"), facts(tied=False))
    assert found is not None and found.names == ("lm_head",)


def test_one_name_missing_beside_one_found_is_named_with_what_peft_adapts() -> None:
    found = missing_targets(swift("--target_modules", "qproj", "k_proj", "v_proj"), facts())
    assert found is not None and found.names == ("qproj",) and found.matched == ("k_proj", "v_proj")


@pytest.mark.parametrize(
    "args",
    [
        ["--target_modules", "all-linear", "no_such"],  # swift puts the model's own linears in its place
        ["--target_modules", "all-embedding", "no_such"],
        ["--target_modules", "no_such", "--target_regex", ".*q_proj"],
        ["--target_modules", "no_such", "--target_parameters", "mlp.experts.gate_up_proj"],
        ["--target_modules", "no_such", "--resume_from_checkpoint", "out/checkpoint-5"],  # its own adapter_config
        ["--target_modules", "no_such", "--adapters", "my-adapter"],
        ["--target_modules", "no_such", "--tuner_type", "full"],
        ["--target_modules", "no_such", "--tuner_type", "reft"],
        ["--target_modules", "no_such", "--use_swift_lora", "true"],
        ["--target_modules", "no_such", "--tuner_backend", "unsloth"],
    ],
)
def test_where_swift_does_not_hand_the_names_to_peft_nothing_is_judged(args: list[str]) -> None:
    assert missing_targets(swift(*args), facts()) is None


def test_a_model_whose_weights_were_not_read_is_not_judged() -> None:
    unread = ModelFacts(name="m", total_params=None, source="unknown")
    assert missing_targets(swift("--target_modules", "no_such"), unread) is None


def test_the_run_refuses_the_plan_warns_and_a_plugin_stands_it_down() -> None:
    refused = swift_model_checks(swift("--target_modules", "q_proj,v_proj"), None, facts())
    assert isinstance(refused.error, SafeSftError)
    assert refused.error.message.endswith("; peft stops every rank on it once the model has loaded")
    warned = swift_model_checks(swift("--target_modules", "qproj", "v_proj"), None, facts())
    assert warned.error is None and len(warned.warnings) == 1
    assert warned.warnings[0].startswith("--target_modules qproj: no module of the model is so named")
    assert ": peft passes it over and adapts v_proj alone (name modules the model has" in warned.warnings[0]
    plugin = swift("--target_modules", "q_proj,v_proj", "--external_plugins", "my_plugin.py")
    assert swift_model_checks(plugin, None, facts()).error is None


def test_the_probe_reads_the_modules_from_safetensors_headers_and_a_bin_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 9}))
    write_safetensors(tmp_path / "model.safetensors", {t: [1] for t in LLAMA_TENSORS})
    assert probe_model(str(tmp_path), {}, tmp_path).module_paths == facts().module_paths
    older = tmp_path / "older"
    older.mkdir()
    shutil.copy(tmp_path / "config.json", older)
    (older / "pytorch_model.bin").write_bytes(b"\0" * 64)
    index = {"metadata": {"total_size": 64}, "weight_map": dict.fromkeys(LLAMA_TENSORS, "pytorch_model.bin")}
    (older / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    assert probe_model(str(older), {}, tmp_path).module_paths == facts().module_paths


# The family's own decoder-layer linears, as each real folder's weights name them (tests/data/model_configs)
REAL = [pytest.param(row, id=row["dir"]) for row in ROWS]


@pytest.mark.parametrize("row", REAL)
def test_on_real_folders_the_attention_and_mlp_names_are_found_and_a_comma_list_is_not(
    tmp_path: Path, row: dict[str, Any]
) -> None:
    """Each real folder as the probe reads it (its index, each shard a header of the tensors the index puts
    there): every name the folder's own decoder layers hold passes, a comma-joined pair of them is refused."""
    shutil.copy(_folder(row) / "config.json", tmp_path)
    shutil.copy(_folder(row) / row["index_file"], tmp_path)
    shards: dict[str, list[str]] = {}
    for tensor, shard in _weight_map(row).items():
        shards.setdefault(shard, []).append(tensor)
    for shard, tensors in shards.items():
        if shard.endswith(".safetensors"):
            write_safetensors(tmp_path / shard, {tensor: [1] for tensor in tensors})
        else:
            (tmp_path / shard).write_bytes(b"\0" * 64)
    model = probe_model(str(tmp_path), {}, tmp_path)
    layer_modules = sorted({t.rpartition(".")[0].rpartition(".")[2] for t in _weight_map(row) if ".0." in t} - {"0"})
    assert layer_modules, "no first layer in the index"
    assert missing_targets(swift("--target_modules", *layer_modules), model) is None
    joined = ",".join(layer_modules[:2])
    found = missing_targets(swift("--target_modules", joined), model)
    assert found is not None and found.names == (joined,)


BAICHUAN_TENSORS = [
    "model.embed_tokens.weight",
    *(f"model.layers.0.{name}.weight" for name in ("self_attn.W_pack", "self_attn.o_proj", "mlp.gate_proj")),
    "lm_head.weight",
]


def llamafactory(tmp_path: Path, **config: object) -> Any:
    from launcher.backends.llamafactory import read

    path = tmp_path / "sft.yaml"
    path.write_text(json.dumps({"model_name_or_path": "m", "stage": "sft", "do_train": True, **config}))
    return read([str(path)]).args


def test_llamafactory_splits_its_list_at_commas_and_stops_on_names_the_model_lacks(tmp_path: Path) -> None:
    """LLaMA-Factory issue #181: q_proj,v_proj for Baichuan, whose attention is one W_pack."""
    assert llamafactory_missing_targets(llamafactory(tmp_path, lora_target="q_proj, v_proj"), facts()) is None
    found = llamafactory_missing_targets(llamafactory(tmp_path, lora_target="q_proj,v_proj"), facts(BAICHUAN_TENSORS))
    assert found is not None and found.names == ("q_proj", "v_proj") and found.matched == ()
    what, fix = describe_missing(found)
    assert what.startswith("lora_target: q_proj,v_proj: no module of the model is so named (its weights' modules: ")
    assert "W_pack" in what and fix == "name modules the model has, or give lora_target: all"


def test_llamafactory_takes_a_name_anywhere_in_a_multimodal_models_paths(tmp_path: Path) -> None:
    """Its COMPOSITE_MODELS keep every module whose path holds a name (model/model_utils/visual.py)."""
    args = llamafactory(tmp_path, lora_target="proj")
    multimodal = replace(facts(), is_multimodal=True)
    assert llamafactory_missing_targets(args, multimodal) is None
    found = llamafactory_missing_targets(args, facts())
    assert found is not None and found.names == ("proj",)


@pytest.mark.parametrize(
    "config",
    [
        {"lora_target": "all"},
        {},  # its default is all
        {"lora_target": "no_such", "finetuning_type": "full"},
        {"lora_target": "no_such", "finetuning_type": "freeze"},
        {"lora_target": "no_such", "adapter_name_or_path": "saves/lora"},
        {"lora_target": "no_such", "use_llama_pro": True},
    ],
)
def test_llamafactory_judges_no_list_it_does_not_hand_to_peft(tmp_path: Path, config: dict[str, object]) -> None:
    assert llamafactory_missing_targets(llamafactory(tmp_path, **config), facts()) is None


def test_llamafactory_a_name_missing_beside_a_found_one_is_a_warning(tmp_path: Path) -> None:
    checked = target_checks(llamafactory_missing_targets(llamafactory(tmp_path, lora_target="qproj,v_proj"), facts()))
    assert checked.error is None
    assert checked.warnings[0].startswith("lora_target: qproj: no module of the model is so named")
    assert (
        ": peft passes it over and adapts v_proj alone (name modules the model has, or give lora_target: all)"
        in (checked.warnings[0])
    )


LORA_DATA = Path(__file__).resolve().parents[1] / "data" / "lora_targets"
LORA_MODELS = [json.loads(line) for line in (LORA_DATA / "models" / "index.jsonl").read_text().splitlines()]


def _real_model(entry: dict[str, Any]) -> ModelFacts:
    """The model as the probe reads its folder: the module paths its weights index names (each tensor's name
    less its last part, numbers as #), a tied output layer from its config.json."""
    folder = LORA_DATA / "models" / entry["dir"]
    tensors = json.loads((folder / entry["index_file"]).read_text())["weight_map"]
    tied = bool(json.loads((folder / "config.json").read_text()).get("tie_word_embeddings", False))
    paths = modules_of(tensors)
    return ModelFacts(name=entry["model"], total_params=1, source="x", tie_word_embeddings=tied, module_paths=paths)


def _as_peft_gets_them(row: dict[str, Any]) -> tuple[str, ...] | str:
    """The names the row's framework hands peft, or why the row is outside the rule: swift's parser keeps
    each word, LLaMA-Factory splits its string at commas, a YAML list is a list, and so is a list peft's error
    prints with its quotes; one string is a regular expression to peft, and python-fire reads a bracketed
    string as a list or as one string."""
    targets = row["targets"]
    if row["framework"] == "llamafactory" and isinstance(targets, str):
        return tuple(name.strip() for name in targets.split(","))
    if isinstance(targets, str) and targets.strip()[:1] in "[{" and "'" in targets:
        targets = list(ast.literal_eval(targets))  # the list or set the error printed
    if not isinstance(targets, list):
        return "one string, which peft reads as a regular expression (python-fire as its quoting has it)"
    if "all-linear" in targets:
        return "all-linear: the peft of that run did not yet expand it (peft 0.8 and later, and swift, do)"
    return tuple(targets)


def _real_rows() -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """(model, row, failed or ran) for every row whose model's index is here."""
    found = []
    for outcome in ("failed", "ran"):
        for line in (LORA_DATA / f"{outcome}.jsonl").read_text().splitlines():
            row = json.loads(line)
            for entry in LORA_MODELS:
                if row["url"] in {url.split(" ")[0] for url in entry["used_by"][outcome]}:
                    found.append((entry, row, outcome))
    return found


REAL_ROWS = _real_rows()
JUDGED = [
    pytest.param(entry, row, outcome, id=f"{outcome}-{entry['dir'].split('__')[-1]}-{n}")
    for n, (entry, row, outcome) in enumerate(REAL_ROWS)
    if isinstance(_as_peft_gets_them(row), tuple)
]


def test_the_real_target_lists_are_as_described() -> None:
    """16 rows have their model's index here: 11 hand peft a list of names (6 stopped, 5 ran), 5 are outside
    the rule: each gives peft one string (a regular expression, python-fire's bracketed string, all-linear)."""
    outside = sorted(
        str(_as_peft_gets_them(row)) for _, row, _ in REAL_ROWS if isinstance(_as_peft_gets_them(row), str)
    )
    assert (len(LORA_MODELS), len(REAL_ROWS), len(JUDGED)) == (10, 16, 11), outside
    assert sum(p.values[2] == "failed" for p in JUDGED) == 6


@pytest.mark.parametrize(("entry", "row", "outcome"), JUDGED)
def test_real_target_lists_that_stopped_are_refused_and_those_that_ran_pass(
    entry: dict[str, Any], row: dict[str, Any], outcome: str
) -> None:
    names = _as_peft_gets_them(row)
    assert isinstance(names, tuple)
    found = _unmatched("--target_modules", names, _real_model(entry), anywhere=False, fix_all="")
    refused = found is not None and not found.matched
    assert refused is (outcome == "failed"), (names, found)
