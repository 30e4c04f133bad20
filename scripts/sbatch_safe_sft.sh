#!/usr/bin/env bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --signal=USR1@120
#SBATCH --requeue
# An sbatch script for N nodes: one safe-sft task per node, its topology read from SLURM_*.
# --signal=USR1@120: two minutes before the time limit every process of the step gets SIGUSR1, safe-sft's
# notice: the ranks save a checkpoint at the step in progress, safe-sft exits 75 and requeues the job
# (--requeue). Not `B:USR1`, which reaches only this batch shell, and ends it before safe-sft hears of it.
# --resume-latest: a requeued job resumes from the newest complete checkpoint in OUTPUT_DIR instead of
# starting over. OUTPUT_DIR must be on a filesystem every node shares.
set -euo pipefail
: "${OUTPUT_DIR:?set OUTPUT_DIR to a directory every node shares}"
srun --ntasks-per-node=1 --kill-on-bad-exit=0 \
  safe-sft --max-attempts 5 --resume-latest \
    --model "${MODEL:-Qwen/Qwen2.5-7B-Instruct}" --dataset "${DATASET:-/shared/data/train.jsonl}" \
    --tuner_type full --max_length 4096 --save_steps 200 --output_dir "$OUTPUT_DIR"
# Exit 75: preempted on the notice, checkpoint saved (the job is requeued). Exit 143: scancel or the time
# limit sent SIGTERM and safe-sft restarted nothing. Exit 4: a node lost node 0's safe-sft.
