#!/bin/bash
set -euo pipefail

# Trap interrupts (e.g. Ctrl+C) to kill all subprocesses
trap "echo 'Interrupted. Killing subprocesses...'; pkill -P $$; exit 1" SIGINT SIGTERM

# -------------------------------------
# Qwen3-32B Training Script (DeepSpeed Zero3 + Swift)
# -------------------------------------
# Usage:
#   bash scripts/train_agent_32b.sh > logs/train_agent_32b.log 2>&1 &

# =====================
#     CONFIGURATION
# =====================
MODEL_PATH="/data01/LLM_model/Qwen3-32B"
DATA_VERSION=23  # data_size = 14268
DATASET_PATH="/data01/xushuai/code/data/agent-${DATA_VERSION}/train.jsonl"
BASE_OUTPUT_DIR="/data01/xushuai/code/output/agent/agent_32b_v${DATA_VERSION}"
PER_DEVICE_TRAIN_BATCH_SIZE=11
GRADIENT_ACCUMULATION_STEPS=4
MAX_STEPS=216

# ====================
#      OUTPUT DIR
# ====================
OUTPUT_DIR="$BASE_OUTPUT_DIR"

echo "[INFO] Using output directory: $OUTPUT_DIR"

# ====================
#       TRAINING
# ====================
echo "[INFO] Starting training..."

CUDA_VISIBLE_DEVICES=2,3,4,5,6,7 \
NPROC_PER_NODE=6 \
OMP_NUM_THREADS=16 \
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
swift sft \
    --model "$MODEL_PATH" \
    --dataset "$DATASET_PATH" \
    --per_device_train_batch_size $PER_DEVICE_TRAIN_BATCH_SIZE \
    --gradient_accumulation_steps $GRADIENT_ACCUMULATION_STEPS \
    --max_length 4500 \
    --warmup_ratio 0.1 \
    --learning_rate 1e-5 \
    --eval_strategy no \
    --deepspeed ds_config/zero3.json \
    --save_only_model true \
    --gradient_checkpointing \
    --ddp_backend nccl \
    --save_strategy steps \
    --max_steps $MAX_STEPS \
    --save_steps $MAX_STEPS \
    --save_total_limit 1 \
    --train_type full \
    --torch_dtype bfloat16 \
    --add_version false \
    --output_dir "$OUTPUT_DIR" \
    --dataloader_num_workers 16 \
    --dataset_num_proc 16 \
    --logging_steps 1 \
    --report_to swanlab \
    --swanlab_project dipeak-agent \
    --attn_impl flash_attn \
    --use_liger_kernel true \
    --loss_type channel_loss \
    --channels 'extract_params_train' 'brain_train_0619' 'attr_rewrite_0522_v1' 'condense' 'bi_0619' 'judge_training_0610' 'generation_traindatav9' 'attr_metric_where_dist_0530_v1' 'tican_0528' 'attr_rewrite_0603_v1'

# =====================
#      EVALUATION
# =====================
echo "[INFO] Starting evaluation..."

CUDA_VISIBLE_DEVICES=3,4 \
python src/eval.py --model "$OUTPUT_DIR" --qwen3

echo "[INFO] Done. Training and evaluation complete."

# End of script
