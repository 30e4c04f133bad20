#!/usr/bin/env bash
# The main job, on an embedded default: set everything up, make a tiny model locally, and train it on the
# CPU through safe-sft (2 processes under torchrun) with a CUDA OOM injected on rank 1 at step 4.
# safe-sft classifies the failure, halves the micro-batch with twice the accumulation, and resumes from
# checkpoint-3 to the end. Everything lands in ./demo (DEMO_DIR to change it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
demo=${DEMO_DIR:-demo}
[ -f "$demo/tiny/model/model.safetensors" ] || python scripts/make_tiny_model.py "$demo/tiny" >/dev/null
rm -f "$demo/fault-fired"   # the injected OOM fires once per demo run
export NPROC_PER_NODE=2 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export SAFE_SFT_FAULT=oom_step:4:1 SAFE_SFT_FAULT_ONCE="$demo/fault-fired"
safe-sft --grace-period 10 \
  --model "$demo/tiny/model" --model_type qwen2 --template qwen --check_model false \
  --use_cpu true --fp16 false --report_to none --dataset "$demo/tiny/data.jsonl" \
  --tuner_type full --max_steps 8 --save_steps 3 --logging_steps 1 \
  --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --dataloader_num_workers 0 \
  --external_plugins tests/stack/plugins/faults.py --callbacks safe_sft_fault \
  --output_dir "$demo/output"
