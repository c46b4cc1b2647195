#!/usr/bin/env bash
# Multi-turn SFT on the engine-layout SFT trainer: verl's examples/sft/multiturn/run_qwen2_5_0_5b_fsdp.sh.
# usage: sft_multiturn.sh <nproc_per_node> <save_path> [overrides...]
set -euo pipefail
SFT_STEPS=${TOTAL_TRAINING_STEPS:-1}  # verl's default here is 1 (_common.sh's is null)
source "$(dirname "$0")/_common.sh"

if [ "$#" -lt 2 ]; then
    echo "Usage: sft_multiturn.sh <nproc_per_node> <save_path> [other_configs...]"
    exit 1
fi
nproc_per_node=$1
save_path=$2
shift 2

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-0.5B-Instruct}
SP_SIZE=${SP_SIZE:-1}
MICRO_BATCH_SIZE_PER_GPU=${MICRO_BATCH_SIZE_PER_GPU:-4}
TOTAL_TRAINING_STEPS=$SFT_STEPS
TRAIN_FILES=${TRAIN_FILES:-$HOME/data/multiturn/train.parquet}
VAL_FILES=${VAL_FILES:-$HOME/data/multiturn/test.parquet}
PROJECT_NAME=${PROJECT_NAME:-multiturn-sft}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-multiturn-sft-qwen2_5_0_5b}
TORCHRUN=${TORCHRUN:-"$PYTHON -m torch.distributed.run"}

$TORCHRUN --nnodes=1 --nproc_per_node=${nproc_per_node} \
    -m verl.trainer.sft_trainer \
    data.train_files="$TRAIN_FILES" \
    data.val_files="$VAL_FILES" \
    data.messages_key=messages \
    data.micro_batch_size_per_gpu=${MICRO_BATCH_SIZE_PER_GPU} \
    model.path="${MODEL_PATH}" \
    model.use_remove_padding=true \
    engine=fsdp \
    engine.ulysses_sequence_parallel_size=${SP_SIZE} \
    trainer.default_local_dir="${save_path}" \
    trainer.project_name="${PROJECT_NAME}" \
    trainer.experiment_name="${EXPERIMENT_NAME}" \
    trainer.logger="$LOGGER" \
    trainer.total_training_steps=${TOTAL_TRAINING_STEPS} "$@"
