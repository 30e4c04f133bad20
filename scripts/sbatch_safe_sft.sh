#!/usr/bin/env bash
# An sbatch script for N nodes: one safe-sft task per node (`# --resume-latest: a requeued job (sbatch --requeue, `scontrol requeue`) resumes from the newest
# complete checkpoint in OUTPUT_DIR instead of starting over.
srun --ntasks-per-node=1 --kill-on-bad-exit=0 \
  safe-sft --max-attempts 5 --resume-latest \
    --model "${MODEL:-Qwen/Qwen2.5-7B-Instruct}" --dataset "${DATASET:-/shared/data/train.jsonl}" \
    --tuner_type full --max_length 4096 --save_steps 200 --output_dir "$OUTPUT_DIR"
# Exit 143: scancel or the time limit sent SIGTERM and safe-sft restarted nothing (requeue-friendly:
# requeue on 143 if the time limit is what you expect). Exit 4: a node lost node 0's safe-sft.
