#!/usr/bin/env bash
# Run on EVERY host of a multi-node job, with the same arguments; only NODE_RANK differs per host.
#
#   NODE_RANK=0 bash scripts/multinode.sh   # on the first host (its address is MASTER_ADDR)
#   NODE_RANK=1 bash scripts/multinode.sh   # on the second host, and so on
#
# The output dir must be on a filesystem every host shares: all nodes resume from the same checkpoint.
# safe-sft starts torchrun with one process per GPU, and node 0's safe-sft hosts the coordination
# store at MASTER_PORT + 1 (--coord-port to change it), so that after a failure every node stops,
# node 0 decides one new plan, and every node relaunches with it.
set -euo pipefail
: "${NODE_RANK:?set NODE_RANK to the rank of this host (0 .. NNODES-1)}"
export NNODES=${NNODES:-2}
export MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the host with NODE_RANK 0}
export MASTER_PORT=${MASTER_PORT:-29500}
export NODE_RANK
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
DATASET=${DATASET:-/shared/data/train.jsonl}
OUTPUT_DIR=${OUTPUT_DIR:-/shared/runs/qwen-sft}

exec safe-sft --gpus auto --max-attempts 5 --resume-latest \
  --model "$MODEL" --dataset "$DATASET" --tuner_type full \
  --per_device_train_batch_size 4 --gradient_accumulation_steps 4 --max_length 4096 \
  --save_steps 200 --output_dir "$OUTPUT_DIR"
