#!/usr/bin/env bash
# Make .venv-llamafactory: LLaMA-Factory's own environment, for `safe-sft llamafactory train` and its
# real-stack tests. LLaMA-Factory pins older transformers, datasets, accelerate, peft and trl than
# ms-swift needs, so it cannot share .venv. Safe to run again: it only installs what is missing.
#
# On these CPU machines: torch 2.13.0 comes first from the local CPU wheel (otherwise pip pulls a
# multi-GB CUDA build). There is no CPU build of torchvision or torchaudio for it, so llamafactory is
# installed without its dependencies, then the ones its `train` path imports for a text model, pinned
# inside its declared ranges; LLaMA-Factory 0.9.5 imports torchaudio at module level (data/
# mm_plugin.py, used only for audio inputs), so a stub that raises ImportError on use stands in for it.
# Then safe-sft itself, without its dependencies (click, psutil, nvidia-ml-py, tenacity come pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${LLAMAFACTORY_VENV:-.venv-llamafactory}
python=${PYTHON:-python3}
quiet() { grep -v -e "^WARNING: Location" -e "^$" -e "^llamafactory .* requires " -e "dependency resolver" || true; }
if "$venv/bin/python" -c "import llamafactory.train.tuner, launcher, safe_sft" 2>/dev/null; then
  echo "setup-llamafactory: ok ($venv, already there)"
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
constraints="$venv/constraints.txt"
echo "torch==2.13.0" >"$constraints"
"${pip[@]}" -c "$constraints" torch==2.13.0 2>&1 | quiet
"${pip[@]}" -c "$constraints" --no-deps llamafactory==0.9.5 2>&1 | quiet
"${pip[@]}" -c "$constraints" transformers==5.6.0 datasets==4.0.0 accelerate==1.11.0 peft==0.18.1 trl==0.24.0 \
  omegaconf==2.3.0 numpy packaging safetensors pyyaml sentencepiece tiktoken protobuf \
  click psutil nvidia-ml-py tenacity 2>&1 | quiet
"${pip[@]}" --no-deps --no-build-isolation -e . 2>&1 | quiet
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if ! "$venv/bin/python" -c "import torchaudio" 2>/dev/null; then
  mkdir -p "$site/torchaudio"
  cat >"$site/torchaudio/__init__.py" <<'PY'
"""A stand-in written by scripts/setup_llamafactory.sh: torchaudio has no CPU build for this torch.
LLaMA-Factory imports it at module level and uses it only for audio inputs; any use raises."""


def __getattr__(name: str) -> object:
    raise ImportError(f"torchaudio.{name}: torchaudio is not installed here (a stand-in; no audio inputs)")
PY
fi
"$venv/bin/python" -c "import llamafactory.train.tuner, launcher, safe_sft"
echo "setup-llamafactory: ok ($venv)"
