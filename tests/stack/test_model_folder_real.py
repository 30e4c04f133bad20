"""A local model folder copied without its tokenizer's files (the weights and config.json alone), under real
`swift sft`: the model loads, every row fails to encode, and swift stops on a TypeError that names neither
the folder nor the tokenizer. safe-sft refuses the same command before anything starts (exit 2)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.stack.test_supervise_real import swift_args


def test_a_model_folder_without_a_tokenizer_stops_swift_after_the_load_and_safe_sft_before(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    folder = tmp_path / "weights-only"
    folder.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        if (Path(str(tiny["model"])) / name).is_file():
            shutil.copy(Path(str(tiny["model"])) / name, folder)
    args = swift_args({**tiny, "model": folder}, tmp_path / "plain", max_steps=1)
    at = args.index("--callbacks")
    del args[at : at + 2]
    plain = subprocess.run(
        [str(Path(sys.executable).with_name("swift")), "sft", *args], capture_output=True, text=True, timeout=300
    )
    args[args.index("--output_dir") + 1] = str(tmp_path / "out")
    said = plain.stdout + plain.stderr
    assert plain.returncode != 0 and "model_info" in said
    assert "TypeError: 'NoneType' object is not iterable" in said and str(folder) not in said.splitlines()[-1]
    ours = subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=120)
    assert ours.returncode == 2, ours.stderr[-2000:]
    assert ours.stderr.splitlines()[-2].startswith(f"safe-sft: error: --model '{folder}' holds no tokenizer")
    assert not (tmp_path / "out").exists()
