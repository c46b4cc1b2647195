#!/usr/bin/env bash
# The engine-layout SFT trainer as verl's tests/special_e2e/sft/run_sft_engine.sh runs it (BACKEND=fsdp;
# mode=spmd: torchrun -m verl.trainer.sft_trainer, mode=ray: python -m verl.trainer.sft_trainer_ray).
set -euo pipefail
source "$(dirname "$0")/_common.sh"

NUM_GPUS=${NUM_GPUS:-1}
mode=${mode:-spmd}
TORCHRUN=${TORCHRUN:-"$PYTHON -m torch.distributed.run"}
if [ "$mode" = "spmd" ]; then
  COMMAND="$TORCHRUN --standalone --nnodes=${NNODES:-1} --nproc-per-node=${NUM_GPUS} -m verl.trainer.sft_trainer"
else
  COMMAND="$PYTHON -m verl.trainer.sft_trainer_ray trainer.nnodes=${NNODES:-1} trainer.n_gpus_per_node=${NUM_GPUS}"
fi

DATASET_DIR=${DATASET_DIR:-~/data/gsm8k_sft}
TRAIN_FILES=${TRAIN_FILES:-${DATASET_DIR}/train.parquet}
VAL_FILES=${VAL_FILES:-${DATASET_DIR}/test.parquet}
backend=${BACKEND:-fsdp}
project_name=verl_sft_test
RESUME_MODE=disable
ckpts_home=${ckpts_home:-~/verl/test/gsm8k-sft-${backend}}
MODEL_ID=${MODEL_ID:-Qwen/Qwen2.5-0.5B}
MODEL_PATH=${MODEL_PATH:-${HOME}/models/${MODEL_ID}}
SP_SIZE=${SP_SIZE:-1}
FSDP_SIZE=${FSDP_SIZE:-1}
FSDP_STRATEGY=${FSDP_STRATEGY:-"fsdp"}
PAD_MODE=${PAD_MODE:-no_padding}
USE_REMOVE_PADDING=${USE_REMOVE_PADDING:-True}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-128}
MAX_TOKEN_LEN=${MAX_TOKEN_LEN:-2048}
exp_name=gsm8k-${backend}-${FSDP_STRATEGY}-sp${SP_SIZE}-fsdp${FSDP_SIZE}-pad-${PAD_MODE}-use_remove_padding-${USE_REMOVE_PADDING}-mode-${mode}

mkdir -p "${ckpts_home}"

$COMMAND \
    data.train_files="${TRAIN_FILES}" \
    data.val_files="${VAL_FILES}" \
    data.train_batch_size=${TRAIN_BATCH_SIZE} \
    data.pad_mode=${PAD_MODE} \
    data.truncation=error \
    data.use_dynamic_bsz=True \
    data.max_token_len_per_gpu=${MAX_TOKEN_LEN} \
    data.messages_key=messages \
    model.use_remove_padding=${USE_REMOVE_PADDING} \
    data.ignore_input_ids_mismatch=True \
    engine=${backend} \
    model=hf_model \
    model.path=$MODEL_PATH \
    optim=${backend} \
    optim.lr=1e-5 \
    optim.lr_warmup_steps_ratio=0.2 \
    optim.weight_decay=0.1 \
    optim.betas="[0.9,0.95]" \
    optim.clip_grad=1.0 \
    optim.min_lr_ratio=0.1 \
    optim.lr_scheduler_type=cosine \
    engine.ulysses_sequence_parallel_size=${SP_SIZE} \
    engine.strategy=${FSDP_STRATEGY} \
    engine.fsdp_size=${FSDP_SIZE} \
    trainer.test_freq=after_each_epoch \
    trainer.save_freq=-1 \
    trainer.logger="${LOGGER}" \
    trainer.project_name="${project_name}" \
    trainer.experiment_name="${exp_name}" \
    trainer.total_epochs=2 \
    trainer.total_training_steps=2 \
    trainer.default_local_dir="${ckpts_home}" \
    trainer.resume_mode=${RESUME_MODE} "$@"
