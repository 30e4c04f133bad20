#!/usr/bin/env bash
# Wheels for running the GPU tier on a machine with its own CUDA torch and transformers but no package
# registry (Python 3.12, x86-64): ms-swift, DeepSpeed and what they import that such an image lacks, plus
# safe-sft's own tenacity. Into .whl/ (OUT to change it), about 25 MB; there, install them with
#   pip install --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
# then `python -m pytest tests/gpu` and `python scripts/bench_gpu_peaks.py` (BENCHMARKS.md, round 37).
# The list is what a real CPU run of `safe-sft ... --deepspeed zero2` imported, less the image's own packages.
# Run it from the project's environment (. .venv/bin/activate): DeepSpeed's wheel is built with its torch.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-.whl}
mkdir -p "$out"
platforms=()
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$out" \
  ms_swift==4.6.0 modelscope==1.40.2 modelscope-hub==0.5.1 trl==0.29.1 peft==0.20.0 datasets==4.8.4 \
  dill==0.4.1 multiprocess==0.70.19 json_repair==0.64.6 zstandard==0.25.0 hjson==3.1.0 pydantic==2.14.4 \
  pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 cffi==2.1.1 cryptography==50.0.2 \
  tenacity==9.2.1
# DeepSpeed publishes a source archive only: build its pure-Python wheel here (no ops compiled ahead)
python -m pip wheel -q --no-deps --no-build-isolation -w "$out" deepspeed==0.19.8
du -sh "$out"
