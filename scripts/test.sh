#!/usr/bin/env bash
# Run every check: set up if needed, then lint, format check, type check, and all test tiers
# (fast unit tests and the slow real-stack tier; the GPU tier where there is a GPU).
# Pytest arguments pass through, e.g. `bash scripts/test.sh -m "not stack"` for the fast tier alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_llamafactory.sh  # LLaMA-Factory's own environment, for its real-stack tests
# shellcheck disable=SC1091
. .venv/bin/activate
ruff check launcher safe_sft tests scripts
ruff format --check launcher safe_sft tests scripts
mypy launcher safe_sft
extra=()
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "=== GPU TIER NOT RUN: no NVIDIA GPU on this machine; tests/gpu is left out (run it on a GPU machine) ==="
  extra+=(--ignore=tests/gpu)
fi
python -m pytest "${extra[@]}" "$@"
