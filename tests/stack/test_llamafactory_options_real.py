"""LLaMA-Factory's arguments as safe-sft reads them, held against the installed LLaMA-Factory (in its own
environment, .venv-llamafactory, made by scripts/setup_llamafactory.sh):

- launcher/backends/llamafactory_options.txt is what scripts/llamafactory_options.py writes from it;
- safe-sft reads a config and its `key=value` overrides as LLaMA-Factory's own read_args does (OmegaConf);
- each value safe-sft refuses is one LLaMA-Factory's parser stops on, or passes on unconverted to a trainer
  that cannot use it; and `safe-sft llamafactory` there refuses it before anything starts (exit 2).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from launcher.backends.llamafactory_args import OPTIONS_FILE
from launcher.swift_config import load_swift_config, omegaconf_scalar
from tests.stack.test_backends_real import LF_PYTHON, LF_VENV

REPO = Path(__file__).resolve().parents[2]


def lf_python(code: str, *args: str) -> str:
    """Run `code` in LLaMA-Factory's environment; its stdout."""
    if not LF_PYTHON.exists():
        pytest.fail(f"LLAMA-FACTORY'S ENVIRONMENT IS MISSING ({LF_VENV}): run `bash scripts/setup_llamafactory.sh`")
    done = subprocess.run(
        [str(LF_PYTHON), "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_table_is_what_the_installed_llamafactory_takes() -> None:
    code = (
        "import sys; sys.path.insert(0, 'scripts'); from llamafactory_options import installed_options, render; "
        "print(render(installed_options()), end='')"
    )
    assert lf_python(code) == OPTIONS_FILE.read_text(encoding="utf-8")


SCALARS = """\
lr_a: 1e-4
lr_b: 1.0e-4
lr_c: -2E5
half: .5
flag_a: yes
flag_b: off
flag_c: True
hex: 0x10
grouped: 1_000
octal_looking: 08
day: 2001-12-14
quoted: "8"
nothing: null
tilde: ~
listed: [q_proj, v_proj]
nested: {a: 1, b: [2, 3]}
defaults: &shared {template: qwen, cutoff_len: 128}
<<: *shared
cutoff_len: 256
"""  # the merge key: the mapping takes the merged keys, its own (cutoff_len 256) win
OVERRIDES = ("x=1e-4", "y=yes", "z=abc", "w=[1,2]", "n=null", "d=2001-12-14", "lr_a=3", "q='8'")


def test_safe_sft_reads_a_config_and_its_overrides_as_llamafactory_does(tmp_path: Path) -> None:
    config = tmp_path / "scalars.yaml"
    config.write_text(SCALARS)
    code = (
        "import json, sys; from llamafactory.hparams.parser import read_args; "
        "sys.argv = ['llamafactory-cli', *sys.argv[1:]]; print(json.dumps(read_args()))"
    )
    theirs = json.loads(lf_python(code, str(config), *OVERRIDES).strip().splitlines()[-1])
    ours = dict(load_swift_config([str(config)], omegaconf=True) or {})
    ours |= {key: omegaconf_scalar(value) for key, _, value in (item.partition("=") for item in OVERRIDES)}
    assert ours == theirs
    assert isinstance(ours["lr_a"], int) and ours["lr_b"] == pytest.approx(1e-4)  # PyYAML alone: "1.0e-4" only
    assert yaml.safe_load("v: 1e-4")["v"] == "1e-4"  # why safe-sft does not read LLaMA-Factory's YAML as swift's


# One case per refusal: the key and its bad value, and what LLaMA-Factory's parser makes of it ("raises: <text
# of its error>", or the value it hands on, with its type).
CASES = {
    "unknown-key": ({"learning_rat": 1e-4}, "raises: Some keys are not used by the HfArgumentParser: ['learning_rat']"),
    "quoted-int": ({"per_device_train_batch_size": "2"}, "per_device_train_batch_size = '2' (str)"),
    "quoted-bool": ({"do_train": "false"}, "do_train = 'false' (str)"),
    "literal-typo": ({"stage": "stf"}, "stage = 'stf' (str)"),
    "bare-no": ({"save_strategy": False}, "raises: False is not a valid SaveStrategy"),
    "enum-typo": ({"lr_scheduler_type": "cosin"}, "raises: cosin is not a valid SchedulerType"),
}


def test_what_safe_sft_refuses_llamafactory_stops_on_or_hands_on_unusable(tiny: dict[str, object]) -> None:
    base = {
        "model_name_or_path": str(tiny["model"]), "stage": "sft", "do_train": True, "finetuning_type": "lora",
        "dataset": "identity", "template": "qwen", "output_dir": "/tmp/unused", "report_to": "none",
        "use_cpu": True,
    }  # fmt: skip
    code = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from llamafactory.hparams import get_train_args
base, cases = json.loads(sys.argv[1]), json.loads(sys.argv[2])
found = {}
for name, extra in cases.items():
    try:
        parsed = get_train_args({**base, **extra})
    except Exception as err:
        found[name] = "raises: " + str(err).splitlines()[0]
        continue
    key = next(iter(extra))
    value = next(getattr(part, key) for part in parsed if hasattr(part, key))
    found[name] = f"{key} = {value!r} ({type(value).__name__})"
print(json.dumps(found))
"""
    cases = {name: extra for name, (extra, _) in CASES.items()}
    found = json.loads(lf_python(code, json.dumps(base), json.dumps(cases)).strip().splitlines()[-1])
    for name, (_, expected) in CASES.items():
        assert found[name].startswith(expected), (name, found[name])


@pytest.mark.parametrize("name", list(CASES))
def test_safe_sft_llamafactory_refuses_each_before_anything_starts(
    tiny: dict[str, object], tmp_path: Path, name: str
) -> None:
    """Through the real command in LLaMA-Factory's environment: its installed version is the table's."""
    extra, _ = CASES[name]
    config = {"model_name_or_path": str(tiny["model"]), "stage": "sft", "do_train": True, "output_dir": str(tmp_path)}
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({**config, **extra}))
    done = subprocess.run(
        [str(LF_PYTHON), "-m", "launcher", "plan", "--backend", "llamafactory", "--assume-gpus", "1x24GiB", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    key = next(iter(extra))
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"safe-sft: error: {path}: ") and key in first, done.stderr
    assert "Traceback" not in done.stderr


def test_a_json_config_llamafactory_cannot_read_is_refused_before_anything_starts(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    path = tmp_path / "sft.json"
    path.write_text(json.dumps({"model_name_or_path": str(tiny["model"]), "stage": "sft", "do_train": True}))
    code = (
        "import sys; from llamafactory.hparams.parser import read_args; sys.argv = ['llamafactory-cli', sys.argv[1]]\n"
        "try:\n    read_args()\nexcept Exception as err:\n    print(type(err).__name__, err)"
    )
    assert lf_python(code, str(path)).strip().endswith("AttributeError 'PosixPath' object has no attribute 'read'")
    done = subprocess.run(
        [str(LF_PYTHON), "-m", "launcher", "plan", "--backend", "llamafactory", "--assume-gpus", "1x24GiB", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "cannot read a JSON config" in done.stderr.splitlines()[0], done.stderr


def test_a_v1_config_is_one_v1_reads_v0_stops_on_and_safe_sft_names(tiny: dict[str, object], tmp_path: Path) -> None:
    """The shape of LLaMA-Factory's examples/v1 configs: its v1 parser takes it, the v0 parser every rank runs
    under safe-sft stops on it, and safe-sft says which it is before anything starts."""
    config = {
        "model": str(tiny["model"]), "model_class": "llm", "template": "qwen3_nothink",
        "train_dataset": "data/v1_sft_demo.yaml", "output_dir": str(tmp_path), "micro_batch_size": 1,
    }  # fmt: skip
    code = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from llamafactory.hparams import get_train_args
from llamafactory.v1.config.arg_parser import get_args
config = json.loads(sys.argv[1])
try:
    get_train_args(dict(config))
except Exception as err:
    print("v0:", str(err).splitlines()[0])
model_args = get_args(dict(config))[0]
print("v1:", model_args.model == config["model"])
"""
    found = lf_python(code, json.dumps(config)).strip().splitlines()
    assert found == ["v0: Please provide `model_name_or_path`.", "v1: True"]
    path = tmp_path / "v1.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [str(LF_PYTHON), "-m", "launcher", "plan", "--backend", "llamafactory", "--assume-gpus", "1x24GiB", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0].startswith(f"safe-sft: error: {path}: a LLaMA-Factory v1 config"), done.stderr
