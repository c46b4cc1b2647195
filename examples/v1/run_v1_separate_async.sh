#!/usr/bin/env bash
# verl's tests/special_e2e/run_v1_separate_async.sh (fsdp2 branch) on CPU: the same V1 keys
# (trainer.use_v1, trainer.v1.trainer_mode=separate_async, warm-up batches, parameter_sync_step,
# max_off_policy_threshold / strategy) and the same training keys; what differs is only what a
# CPU machine needs (environment variables below): a built-in model and task, the hf engine,
# one trainer and one rollout worker, and the in-process bucketed weight streaming
# (checkpoint_engine.backend=naive: nccl needs GPUs). verl's transfer_queue.enable=True is left
# out: the replay buffer here is in process (verl.trainer.async_rl).
set -xeuo pipefail

PYTHON=${PYTHON:-python3}
NUM_GPUS=${NUM_GPUS:-2}
N_GPUS_TRAINING=${N_GPUS_TRAINING:-$((NUM_GPUS / 2))}
N_GPUS_ROLLOUT=${N_GPUS_ROLLOUT:-$((NUM_GPUS - N_GPUS_TRAINING))}
DEVICE=${DEVICE:-cpu}
ROLLOUT_NAME=${ROLLOUT_NAME:-hf}
CHECKPOINT_BACKEND=${CHECKPOINT_BACKEND:-naive}

if ((N_GPUS_TRAINING <= 0 || N_GPUS_ROLLOUT <= 0 || N_GPUS_TRAINING + N_GPUS_ROLLOUT != NUM_GPUS)); then
    echo "Invalid GPU split: total=${NUM_GPUS}, training=${N_GPUS_TRAINING}, rollout=${N_GPUS_ROLLOUT}"
    exit 1
fi

MODEL_PATH=${MODEL_PATH:-builtin://tiny-arithmetic}
TRAIN_FILES=${TRAIN_FILES:-builtin://arithmetic/train}
VAL_FILES=${VAL_FILES:-builtin://arithmetic/test}

MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-16}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-8}
N_RESP_PER_PROMPT=${N_RESP_PER_PROMPT:-4}
PARAMETER_SYNC_STEP=${PARAMETER_SYNC_STEP:-4}
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-1}
TRAIN_BATCH_SIZE=$((PARAMETER_SYNC_STEP * PPO_MINI_BATCH_SIZE))
TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-2}
ROLLOUT_TP=${ROLLOUT_TP:-1}
OUT_DIR=${OUT_DIR:-outputs/verl-test-v1-separate-async}

experiment_name="$(basename "${MODEL_PATH,,}")-v1-separate-async-fsdp2-minimal"

common_params=(
    trainer.use_v1=True
    trainer.v1.trainer_mode=separate_async
    trainer.v1.separate_async.num_warmup_batches=1
    trainer.v1.separate_async.parameter_sync_step=${PARAMETER_SYNC_STEP}
    trainer.v1.sampler.max_off_policy_threshold=8
    trainer.v1.sampler.max_off_policy_strategy=drop
    data.train_files="${TRAIN_FILES}"
    data.val_files="${VAL_FILES}"
    data.prompt_key=prompt
    data.truncation=left
    data.filter_overlong_prompts=True
    data.return_raw_chat=True
    data.max_prompt_length=${MAX_PROMPT_LENGTH}
    data.max_response_length=${MAX_RESPONSE_LENGTH}
    data.train_batch_size=${TRAIN_BATCH_SIZE}
    data.gen_batch_size=1
    algorithm.adv_estimator=grpo
    algorithm.use_kl_in_reward=False
    algorithm.rollout_correction.bypass_mode=False
    actor_rollout_ref.model.path="${MODEL_PATH}"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.optim.lr_warmup_steps=-1
    actor_rollout_ref.actor.ppo_mini_batch_size=${PPO_MINI_BATCH_SIZE}
    actor_rollout_ref.actor.ppo_epochs=1
    actor_rollout_ref.actor.use_dynamic_bsz=True
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096
    actor_rollout_ref.actor.use_kl_loss=False
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.clip_ratio_low=0.2
    actor_rollout_ref.actor.clip_ratio_high=0.28
    actor_rollout_ref.rollout.name=${ROLLOUT_NAME}
    actor_rollout_ref.rollout.mode=async
    actor_rollout_ref.rollout.nnodes=1
    actor_rollout_ref.rollout.n_gpus_per_node=${N_GPUS_ROLLOUT}
    actor_rollout_ref.rollout.tensor_model_parallel_size=${ROLLOUT_TP}
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.n=${N_RESP_PER_PROMPT}
    actor_rollout_ref.rollout.calculate_log_probs=True
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4096
    actor_rollout_ref.rollout.enable_chunked_prefill=True
    actor_rollout_ref.rollout.checkpoint_engine.backend=${CHECKPOINT_BACKEND}
    actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=1024
    reward_model.reward_manager=dapo  # verl: reward.reward_manager.name=dapo
    trainer.logger='["console","jsonl"]'
    trainer.project_name=verl-test-v1-separate-async
    trainer.experiment_name="${experiment_name}"
    trainer.output_dir="${OUT_DIR}"
    trainer.val_before_train=False
    trainer.test_freq=-1
    trainer.save_freq=-1
    trainer.resume_mode=disable
    trainer.nnodes=1
    trainer.n_gpus_per_node=${N_GPUS_TRAINING}
    trainer.device=${DEVICE}
    trainer.total_epochs=1
    trainer.total_training_steps=${TOTAL_TRAINING_STEPS}
)

echo "Running V1 separate_async with fsdp2: ${N_GPUS_TRAINING} training + ${N_GPUS_ROLLOUT} rollout workers"

"${PYTHON}" -m verl.trainer.main_ppo \
    "${common_params[@]}" \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.actor.fsdp_config.fsdp_size=${N_GPUS_TRAINING} \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    "$@"

echo "V1 separate_async E2E completed successfully with fsdp2"
