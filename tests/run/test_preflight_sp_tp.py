"""The pre-flight's model check under Ulysses SP together with TP: the heads one TP rank holds must
be divisible by sp, refused in one line before any worker starts."""

from __future__ import annotations

import pytest

from verl.config import load_config
from verl.config.errors import ConfigError
from verl.run.preflight import check_model

LAYOUT = [
    "trainer.n_gpus_per_node=4",
    "actor_rollout_ref.model.use_remove_padding=true",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
]


def test_kv_heads_per_tp_rank_not_divisible_by_sp_is_refused(tiny_model_dir):
    # the tiny model: 4 heads, 2 KV heads; sp=2 alone divides both, sp=2 x tp=2 leaves 1 KV head per TP rank
    path = f"actor_rollout_ref.model.path={tiny_model_dir}"
    check_model(load_config(None, [path, *LAYOUT]))
    with pytest.raises(
        ConfigError,
        match=r"ulysses_sequence_parallel_size=2 does not divide the num_key_value_heads one "
        r"tensor-parallel rank holds: num_key_value_heads=2 / tensor_parallel_size=2 = 1",
    ) as err:
        check_model(load_config(None, [path, *LAYOUT, "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size=2"]))
    assert "\n" not in str(err.value)
