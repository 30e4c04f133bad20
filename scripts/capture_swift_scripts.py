"""Capture each `swift sft` command line the real scripts in tests/data/swift_scripts/files/ run, as bash
would pass it: each script runs under bash in an empty temporary dir, with a PATH of stand-ins only
(`swift`, `torchrun`, `python` record their argv and the launch variables; rm, cp, mv, pip, git, curl,
nvidia-smi, srun and the like do nothing), so a third-party script touches nothing outside its temp dir
and installs nothing. Writes tests/data/swift_scripts/captured.jsonl (one line per command: the file, the
argv after `swift sft`, the launch variables set). Run it when files are added:
    python scripts/capture_swift_scripts.py
A script that stops early (a `source` of a file that is not here, under `set -e`) yields fewer commands
than its index line counts; the test reads only what was captured.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "swift_scripts"
LAUNCH_VARS = ("CUDA_VISIBLE_DEVICES", "NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
               "MAX_PIXELS", "WORLD_SIZE", "RANK", "USE_HF")  # fmt: skip
RECORDER = f"""#!{sys.executable}
import json, os, sys
name, argv = os.path.basename(sys.argv[0]), sys.argv[1:]
if name == "swift" and argv[:1] == ["sft"]:
    env = {{k: os.environ[k] for k in {LAUNCH_VARS!r} if k in os.environ}}
    with open(os.environ["CAPTURE_TO"], "a") as out:
        out.write(json.dumps({{"argv": argv[1:], "env": env}}) + "\\n")
"""
RECORDED = ("swift", "torchrun", "python", "python3", "deepspeed", "accelerate")
INERT = ("pip", "pip3", "conda", "nvidia-smi", "wandb", "huggingface-cli", "modelscope", "git", "wget", "curl",
         "sleep", "rm", "mv", "cp", "ln", "chmod", "chown", "pkill", "killall", "srun", "sbatch", "scontrol",
         "hostname", "nvcc", "tee")  # fmt: skip


def stand_ins(folder: Path) -> None:
    for name in RECORDED:
        (folder / name).write_text(RECORDER)
        (folder / name).chmod(0o755)
    for name in INERT:
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)


def main() -> int:
    index = [json.loads(line) for line in (DATA / "index.jsonl").read_text().splitlines()]
    rows = []
    with tempfile.TemporaryDirectory() as bin_dir:
        stand_ins(Path(bin_dir))
        for entry in index:
            with tempfile.TemporaryDirectory() as work:
                capture = Path(work) / "captured.jsonl"
                env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": work, "CAPTURE_TO": str(capture)}
                script = DATA / entry["file"]
                subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, timeout=30)
                found = [json.loads(line) for line in capture.read_text().splitlines()] if capture.exists() else []
            rows += [{"file": entry["file"], **command} for command in found]
            print(f"{entry['file']}: {len(found)} of {entry['commands']}")
    with (DATA / "captured.jsonl").open("w") as out:
        out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
