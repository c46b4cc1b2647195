# Shared by the scripts in this folder: the machine-dependent settings (see README.md).
PYTHON=${PYTHON:-python3}
LOGGER=${LOGGER:-'["console","wandb"]'}
ROLLOUT_NAME=${ROLLOUT_NAME:-vllm}
NNODES=${NNODES:-1}
TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-null}
GSM8K_TRAIN=${GSM8K_TRAIN:-$HOME/data/gsm8k/train.parquet}
GSM8K_TEST=${GSM8K_TEST:-$HOME/data/gsm8k/test.parquet}
MATH_TRAIN=${MATH_TRAIN:-$HOME/data/math/train.parquet}
MATH_TEST=${MATH_TEST:-$HOME/data/math/test.parquet}
