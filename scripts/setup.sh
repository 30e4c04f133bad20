#!/usr/bin/env bash
# Set up everything on a fresh machine: .venv with the CPU torch wheel, ms-swift, deepspeed, and
# safe-sft itself (editable, with its dev tools). Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
quiet() { grep -v -e "^WARNING: Location" -e "^$" || true; }
# torch first: without it, ms-swift and deepspeed pull a multi-GB CUDA build.
python -c "import torch" 2>/dev/null || pip install -q torch==2.13.0 2>&1 | quiet
DS_BUILD_OPS=0 pip install -q -e '.[swift,dev]' 2>&1 | quiet
# bitsandbytes (its CPU build runs the 4-bit training matmul) for tests/stack/test_quantized_base_real.py
python -c "import bitsandbytes" 2>/dev/null || pip install -q --no-deps bitsandbytes 2>&1 | quiet
# qwen_vl_utils' source only (its image budget defaults, read by tests/stack/test_vision_budget_real.py);
# a Qwen-VL training run installs it with its video dependencies: pip install qwen-vl-utils
python -c "import importlib.util as u; assert u.find_spec('qwen_vl_utils')" 2>/dev/null ||
  pip install -q --no-deps qwen-vl-utils 2>&1 | quiet
python -c "import swift, deepspeed, launcher, safe_sft" 2>/dev/null
echo "setup: ok ($(python -c 'import sys; print(sys.executable)'))"
