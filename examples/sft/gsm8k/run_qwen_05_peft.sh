#!/usr/bin/env bash
# LoRA SFT of Qwen2.5-0.5B-Instruct on GSM8K (question -> worked solution), verl's example
# script with its key=value lines unchanged; only the model / data paths are variables here.
#   verl prepare gsm8k --input gsm8k/train.jsonl --out $HOME/data/gsm8k   (and test.jsonl)
#   bash examples/sft/gsm8k/run_qwen_05_peft.sh <nproc_per_node> <save_path> [key=value ...]
# MODEL_PATH (default Qwen/Qwen2.5-0.5B-Instruct) and DATA_DIR (default $HOME/data/gsm8k) pick
# the model and the parquet files; extra key=value arguments (sizes, steps) are passed through.
# On CPU, torchrun's ranks use gloo.

set -x

if [ "$#" -lt 2 ]; then
    echo "Usage: run_qwen_05_peft.sh <nproc_per_node> <save_path> [other_configs...]"
    exit 1
fi

nproc_per_node=$1
save_path=$2
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-0.5B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}

# the remaining arguments are overrides appended to the command line
shift 2

torchrun --standalone --nnodes=1 --nproc_per_node=$nproc_per_node \
     -m verl.trainer.fsdp_sft_trainer \
    data.train_files=$DATA_DIR/train.parquet \
    data.val_files=$DATA_DIR/test.parquet \
    data.prompt_key=extra_info \
    data.response_key=extra_info \
    optim.lr=1e-4 \
    data.prompt_dict_keys=['question'] \
    +data.response_dict_keys=['answer'] \
    data.micro_batch_size_per_gpu=4 \
    model.partial_pretrain=$MODEL_PATH \
    trainer.default_local_dir=$save_path \
    trainer.project_name=gsm8k-sft \
    trainer.experiment_name=gsm8k-sft-qwen-2.5-0.5b-instruct \
    trainer.logger=['console'] \
    trainer.total_epochs=1 \
    trainer.default_hdfs_dir=null $@ \
    model.lora_rank=32\
    model.lora_alpha=16 \
    model.target_modules=all-linear

    # or only some modules:
    # model.target_modules=[q_proj,v_proj] \
