#!/usr/bin/env bash
# Run every check: set up if needed, then lint, format check, type check, and all test tiers
# (fast unit tests and the slow real-stack tier). Pass pytest arguments through, e.g. -m "not stack".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
ruff check launcher tests scripts
ruff format --check launcher tests scripts
mypy launcher
python -m pytest "$@"
