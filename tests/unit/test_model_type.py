"""swift's model type and template for a run, decided before anything starts (launcher.plan.model_type), on
the registry read from ms-swift 4.6 (launcher/backends/swift_models.txt; tests/stack/test_swift_models_real.py
holds both to the installed swift's own decision)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.backends.swift_models import parse, swift_models
from launcher.errors import SafeSftError
from launcher.model import ModelFacts
from launcher.model_checks import swift_naming_of
from launcher.plan.data_lengths import system_tokens
from launcher.plan.model_type import SwiftNaming, model_name, swift_naming
from launcher.plan.swift_args import parse_swift_argv
from launcher.prepare import default_system_chars
from launcher.probe.dataset import chars

MODELS = swift_models()
QWEN2_ARCH = ("Qwen2ForCausalLM",)


def facts(
    model_type: str | None = "qwen2",
    architectures: tuple[str, ...] | None = QWEN2_ARCH,
    saved_model_type: str | None = None,
    saved_template: str | None = None,
) -> ModelFacts:
    return ModelFacts(
        name="m",
        total_params=None,
        source="config",
        model_type=model_type,
        architectures=architectures,
        saved_model_type=saved_model_type,
        saved_template=saved_template,
    )


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("/data/Qwen2.5-7B-Instruct/", "qwen2.5-7b-instruct"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct"),
        ("/root/.cache/modelscope/hub/models/Qwen/Qwen2___5-7B-Instruct", "qwen2.5-7b-instruct"),
        ("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/abc123", "qwen2.5-7b-instruct"),
        ("/root/.cache/modelscope/hub/models/Qwen--QwQ-32B/snapshots/master", "qwq-32b"),
    ],
)
def test_the_name_swift_matches_is_read_as_swift_reads_it(model: str, name: str) -> None:
    assert model_name(model) == name


def test_a_registered_name_gives_its_type_and_its_groups_template() -> None:
    # ms-swift 4 registers Qwen2.5 under type qwen2, whose Qwen2.5 group has the qwen2_5 template
    assert swift_naming(MODELS, "/data/Qwen2.5-7B-Instruct", facts(), None, None) == SwiftNaming("qwen2", "qwen2_5")
    # a name the user's --model_type overrides: that type's own template, not the name's group's
    assert swift_naming(MODELS, "/data/QwQ-32B", facts(), "qwen2", "qwen") == SwiftNaming("qwen2", "qwen")


def test_an_architecture_of_several_types_stops_with_the_types_and_the_fix() -> None:
    with pytest.raises(SafeSftError) as err:
        swift_naming(MODELS, "/data/my-sft-model", facts(), None, None)
    assert err.value.message == (
        "swift sft 4.6.0 cannot tell the model type of '/data/my-sft-model': 'my-sft-model' is none of the names "
        "it registers, and config.json's architecture Qwen2ForCausalLM is that of 2 types (qwen2, qwen2_gte)"
    )
    assert err.value.hint.startswith("add --model_type with the type swift registers for this model, such as "
                                    "--model_type qwen2 and --template (one of qwen, qwen2_5, ")  # fmt: skip


def test_a_config_without_architectures_is_swifts_null_and_the_fix_is_configs_own_type() -> None:
    with pytest.raises(SafeSftError) as err:
        swift_naming(MODELS, "/data/x", facts(model_type="gemma2", architectures=()), None, None)
    assert "lack of an architecture (swift's `null`) is that of 10 types (bert, " in err.value.message
    assert err.value.hint.endswith("such as --model_type gemma2")
    assert swift_naming(MODELS, "/data/x", facts("gemma2", ()), "gemma2", None) == SwiftNaming("gemma2", "gemma")


def test_a_type_with_several_templates_and_none_of_its_own_stops_without_template() -> None:
    with pytest.raises(SafeSftError) as err:
        swift_naming(MODELS, "/data/my-sft-model", facts(), "qwen2", None)
    assert "its model type qwen2 has 7 candidate templates (qwen, qwen2_5, qwen2_5_math, " in err.value.message
    assert err.value.hint.startswith("add --template with the chat format the model was trained with (one of qwen, ")


def test_args_json_swift_wrote_decides_type_and_template() -> None:
    saved = facts(saved_model_type="qwen2", saved_template="qwen2_5")
    assert swift_naming(MODELS, "/out/v0-x/checkpoint-100", saved, None, None) == SwiftNaming("qwen2", "qwen2_5")
    with pytest.raises(SafeSftError, match=r"args.json's model_type 'qwen2.5' is no model type of swift sft"):
        swift_naming(MODELS, "/out/ckpt", facts(saved_model_type="qwen2.5"), None, None)


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("model_type", "qwen2.5", "--model_type 'qwen2.5' is no model type of swift sft 4.6.0 (close: qwen2, "),
        ("model_type", "Qwen3", "--model_type 'Qwen3' is no model type of swift sft 4.6.0 (close: qwen3, "),
        ("template", "chatml_x", "--template 'chatml_x' is no template of swift sft 4.6.0 (close: chatml"),
        ("template", "zzzz", "--template 'zzzz' is no template of swift sft 4.6.0"),
    ],
)
def test_a_type_or_template_swift_does_not_register_is_named_with_the_close_ones(
    flag: str, value: str, said: str
) -> None:
    given = {"model_type": None, "template": None, flag: value}
    with pytest.raises(SafeSftError) as err:
        swift_naming(MODELS, "/data/Qwen2.5-7B-Instruct", facts(), given["model_type"], given["template"])
    assert err.value.message.startswith(said)


def test_nothing_to_go_on_is_left_to_swift_and_an_unregistered_architecture_runs_as_dummy() -> None:
    assert swift_naming(MODELS, "org/brand-new", facts(architectures=None), None, None) == SwiftNaming(None, None)
    assert swift_naming(MODELS, "org/brand-new", None, None, "qwen") == SwiftNaming(None, "qwen")
    unregistered = facts("brand_new", ("BrandNewForCausalLM",))
    assert swift_naming(MODELS, "/data/brand-new", unregistered, None, None) == SwiftNaming(None, "dummy")


def test_a_multimodal_model_of_no_registered_type_stops() -> None:
    """swift trains a text model of an architecture it does not register under its `dummy` template, but
    stops on a multimodal one (config.json with a text or vision config)."""
    unregistered = replace(facts("xgenmm", ("XGenMMModelForConditionalGeneration",)), swift_multimodal=True)
    with pytest.raises(SafeSftError) as err:
        swift_naming(MODELS, "/data/eval_llm", unregistered, None, None)
    assert err.value.message == (
        "swift sft 4.6.0 does not train '/data/eval_llm': it reads it as multimodal (config.json has a text, "
        "vision or audio config), and neither its name nor its architecture (XGenMMModelForConditionalGeneration) "
        "is of a type it registers"
    )
    named = swift_naming(MODELS, "/data/eval_llm", unregistered, "qwen2_vl", "qwen2_vl")
    assert named == SwiftNaming("qwen2_vl", "qwen2_vl")


@pytest.mark.parametrize("plugin", ["--external_plugins", "--custom_register_path"])
def test_a_plugin_file_may_register_what_swift_lacks_so_nothing_is_refused(plugin: str) -> None:
    """A file swift imports may register the model's name, a type or a template: the decision stands down."""
    for args in (["--model_type", "my_type"], ["--template", "my_template"], []):
        swift = parse_swift_argv(["--model", "/data/my-sft-model", *args, plugin, "register.py"])
        assert swift_naming_of(swift, "/data/my-sft-model", facts()) == (None, None)
    bare = parse_swift_argv(["--model", "/data/my-sft-model"])
    assert isinstance(swift_naming_of(bare, "/data/my-sft-model", facts())[1], SafeSftError)


def test_the_table_parses_each_kind_of_line() -> None:
    table = parse(
        "# swift's model types and templates (ms-swift 9.1.2): x\n"
        "type t1 - a,b\ntype t2 tt tt\nname n1 t1 b\narch A t1 t2\narch null t2\ntemplate a 5 1 2 3\n"
        "registered optimizer o1 o2\nloss_scale_base b1 b2\n"
    )
    assert table.version == "9.1.2"
    assert table.templates_of == {"t1": (None, ("a", "b")), "t2": ("tt", ("tt",))}
    assert table.names == {"n1": ("t1", "b")}
    assert table.arch_types == {"A": ("t1", "t2"), "null": ("t2",)}
    assert table.system_chars == {"a": (5, 1, 2, 3)}
    assert table.registered == {"optimizer": ("o1", "o2")} and table.loss_scale_bases == ("b1", "b2")


def test_the_run_stops_in_one_line_on_a_real_folder_swift_cannot_name(tmp_path: Path) -> None:
    """Mixtral-8x7B's real config.json under its repository's name: none swift registers, an architecture of
    three types. swift would stop in every rank after the start; safe-sft's run stops first, with the fix,
    and writes nothing; its plan shows the plan and says so."""
    folder = tmp_path / "Mixtral-8x7B"
    folder.mkdir()
    source = Path(__file__).resolve().parents[1] / "data" / "model_configs" / "files" / "yangulei__Mixtral-8x7B"
    (folder / "config.json").write_text((source / "config.json").read_text())
    out = tmp_path / "out"
    swift_args = ["--model", str(folder), "--use_cpu", "true", "--output_dir", str(out)]
    run = subprocess.run([sys.executable, "-m", "launcher", *swift_args], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    said = (
        f"swift sft 4.6.0 cannot tell the model type of {str(folder)!r}: 'mixtral-8x7b' is none of the names it "
        "registers, and config.json's architecture MixtralForCausalLM is that of 3 types (mixtral, wizardlm2_moe, "
        "openbuddy_mixtral)"
    )
    fix = "add --model_type with the type swift registers for this model, such as --model_type mixtral"
    assert run.stderr.splitlines()[-2:] == [f"safe-sft: error: {said}", f"safe-sft: fix: {fix}"]
    assert not out.exists()
    doctor = subprocess.run(
        [sys.executable, "-m", "launcher", "doctor", *swift_args], capture_output=True, text=True, timeout=60
    )
    assert doctor.returncode == 1 and f"[fail] swift_args  {said}" in doctor.stdout, doctor.stdout
    plan = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--json", *swift_args], capture_output=True, text=True, timeout=60
    )
    assert plan.returncode == 0, plan.stderr
    assert f"{said} (fix: {fix}) (the run refuses to start)" in json.loads(plan.stdout)["warnings"]
    named = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--json", *swift_args, "--model_type", "mixtral"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert not [w for w in json.loads(named.stdout)["warnings"] if "cannot tell" in w]


def _plan_json(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--json", "--assume-gpus", "1x80GiB", "--assume-ram", "256GiB",
         *args], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan: dict[str, object] = json.loads(done.stdout)
    return plan


def test_the_data_is_planned_with_the_default_system_prompt_of_the_template_swift_takes(tmp_path: Path) -> None:
    """Llama-2-7b-chat-hf is registered with swift's `llama` template, whose default system prompt (507
    characters) swift writes into every row without its own; --system replaces it, as does a row's own."""
    folder = tmp_path / "Llama-2-7b-chat-hf"
    folder.mkdir()
    source = Path(__file__).resolve().parents[1] / "data" / "model_configs" / "files" / "nuxwork__llama-7b-hf"
    (folder / "config.json").write_text((source / "config.json").read_text())
    data = tmp_path / "d.jsonl"
    rows = [{"messages": [{"role": "user", "content": "q" * 40}, {"role": "assistant", "content": "a" * 40}]}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows * 20))
    args = ["--model", str(folder), "--dataset", str(data), "--max_length", "4096"]

    def longest(plan: dict[str, object]) -> int:
        lengths = plan["data_lengths"]
        assert isinstance(lengths, dict)
        return int(lengths["tokens_per_sample"]["max"])

    planned = _plan_json(*args)
    default, replaced = longest(planned), longest(_plan_json(*args, "--system", "Be brief."))
    added = system_tokens(MODELS.system_chars["llama"])
    assert default - replaced == added > 100
    shown = f"each row without a system prompt of its own: {added} tokens more for the one swift writes into it"
    lengths = planned["data_lengths"]
    assert isinstance(lengths, dict) and lengths["default_system_tokens"] == added
    assert any(line.startswith(shown) for line in lengths["text"])
    prompt = tmp_path / "system.txt"
    prompt.write_text("x" * 2000)
    assert longest(_plan_json(*args, "--system", str(prompt))) == replaced + system_tokens((2000, 0, 0, 0))
    own = tmp_path / "own.jsonl"
    own.write_text("".join(json.dumps({"system": "", **row}) + "\n" for row in rows * 20))
    assert longest(_plan_json(*args[:2], "--dataset", str(own), *args[4:])) == replaced


def test_a_system_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "prompt.txt"
    with pytest.raises(SafeSftError, match=r"--system '.*prompt.txt' names a .txt file that cannot be read"):
        default_system_chars(parse_swift_argv(["--system", str(missing)]), None)
    assert default_system_chars(parse_swift_argv(["--system", "a\\nb"]), None) == chars("a\nb")
    assert default_system_chars(parse_swift_argv([]), SwiftNaming("llama", "llama")) == MODELS.system_chars["llama"]
    assert default_system_chars(parse_swift_argv([]), SwiftNaming(None, None)) is None


def test_the_type_swift_decides_by_name_picks_the_image_budget_its_template_reads(tmp_path: Path) -> None:
    """A real MiniCPM-V 2.6 config.json says model_type `minicpmv`, as 2.0's and 2.5's do, whose templates
    read no MAX_SLICE_NUMS. Under its registered name swift runs it as `minicpmv2_6`, whose template does:
    the plan reads MAX_SLICE_NUMS then, and not where --model_type says minicpmv."""
    source = Path(__file__).resolve().parents[1] / "data" / "model_configs" / "files" / "OpenBMB__Scicore-Omics__model"
    folder = tmp_path / "MiniCPM-V-2_6"
    folder.mkdir()
    (folder / "config.json").write_text((source / "config.json").read_text())

    def vision(*args: str, slices: str | None = None) -> int:
        env = {**os.environ, **({"MAX_SLICE_NUMS": slices} if slices else {})}
        done = subprocess.run(
            [sys.executable, "-m", "launcher", "plan", "--json", "--assume-gpus", "1x80GiB", "--assume-ram",
             "256GiB", "--model", str(folder), "--max_length", "8192", *args],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return int(json.loads(done.stdout)["estimates"]["zero2"]["parts"]["gpu_vision"])

    nine = vision()
    assert vision(slices="2") < nine / 2
    assert vision("--model_type", "minicpmv", slices="2") == nine


def test_a_model_type_written_as_a_models_name_in_real_scripts_is_named_with_its_type() -> None:
    """ms-swift 2 took a model's name for --model_type (`qwen2-1_5b-instruct`); real scripts still carry
    them (tests/data/swift_scripts, captured argv). Each such value is refused with the type that name
    has in swift 4.6's registry."""
    captured = Path(__file__).resolve().parents[1] / "data" / "swift_scripts" / "captured.jsonl"
    named = 0
    for line in captured.read_text().splitlines():
        argv = json.loads(line)["argv"]
        given = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--model_type"]
        for value in given:
            if value in MODELS.templates_of:
                continue
            with pytest.raises(SafeSftError) as err:
                swift_naming(MODELS, "/data/m", None, value, None)
            found = MODELS.names.get(value.lower().replace("1_5b", "1.5b"))
            if found:
                named += 1
                assert f"(it is a model's name, of type {found[0]}: --model_type {found[0]})" in err.value.message
    assert named >= 2
