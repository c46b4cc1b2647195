#!/usr/bin/env bash
# ReMax (greedy-response baseline) with the KL in the reward on GSM8K + MATH: verl's
# examples/remax_trainer/run_qwen3_8b_fsdp.sh.
set -euo pipefail
source "$(dirname "$0")/_common.sh"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-8B}
TRAIN_FILES=${TRAIN_FILES:-"['$GSM8K_TRAIN', '$MATH_TRAIN']"}
VAL_FILES=${VAL_FILES:-"['$GSM8K_TEST', '$MATH_TEST']"}
max_token_len=${MAX_TOKEN_LEN:-24576}

$PYTHON -m verl.trainer.main_ppo \
    algorithm.adv_estimator=remax \
    algorithm.use_kl_in_reward=True \
    algorithm.kl_penalty=kl \
    algorithm.kl_ctrl.kl_coef=0.001 \
    data.train_files="$TRAIN_FILES" \
    data.val_files="$VAL_FILES" \
    data.train_batch_size=${TRAIN_BATCH_SIZE:-1024} \
    data.max_prompt_length=${MAX_PROMPT_LENGTH:-1024} \
    data.max_response_length=${MAX_RESPONSE_LENGTH:-2048} \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=${MINI_BATCH_SIZE:-256} \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$max_token_len \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.rollout.name=$ROLLOUT_NAME \
    actor_rollout_ref.rollout.tensor_model_parallel_size=${ROLLOUT_TP:-2} \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.n=${ROLLOUT_N:-4} \
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$max_token_len \
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$max_token_len \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    trainer.balance_batch=True \
    trainer.critic_warmup=0 \
    trainer.logger="$LOGGER" \
    trainer.project_name=verl_remax_gsm8k_math \
    trainer.experiment_name=qwen3_8b_vllm_fsdp \
    trainer.n_gpus_per_node=${NGPUS:-8} \
    trainer.nnodes=$NNODES \
    trainer.save_freq=20 \
    trainer.test_freq=5 \
    trainer.total_epochs=10 \
    trainer.total_training_steps=$TOTAL_TRAINING_STEPS "$@"
