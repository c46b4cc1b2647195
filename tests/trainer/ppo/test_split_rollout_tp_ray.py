"""``hybrid_engine=false`` with the hf rollout at ``tensor_model_parallel_size=2`` on Ray: one FSDP2
actor worker and a rollout pool of 2 workers forming one TP group.

The pool's greedy tokens equal a TP=1 engine's on the same weights, its log-probs equal the
actor's within 1e-5 after the first (full) sync and after a sync of updated weights (the
trainer's ``training/rollout_probs_diff_max``), and the weights arrive bucket by bucket into the
TP layout: no rank holds more than one 1 MiB bucket of whole tensors, nor the whole model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.modules import init_model
from verl.modules.forward import position_ids_from_attention_mask
from verl.protocol import DataProto
from verl.trainer import RLTrainer

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
PROMPTS = [[11, 12, 13], [21, 22, 23, 24, 25], [31, 32], [41, 42, 43, 44]]
# fp32, 2 gloo ranks: the row-parallel sums change the reduction order only
TOL = 1e-5


def _prompts() -> DataProto:
    width = max(len(r) for r in PROMPTS)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in PROMPTS])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in PROMPTS])
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_attention_mask(mask)},
        non_tensors={"uid": np.array([f"u{i}" for i in range(len(PROMPTS))], dtype=object)},
        meta_info={"do_sample": False},
    )


def _wide_model(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """~3.3 MB in fp32 (MLP matrices of 0.75 MB), so 1 MiB buckets cut it into several."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(
            init_model.SIZES, "wide1", {"hidden": 256, "layers": 1, "heads": 8, "kv_heads": 4, "intermediate": 768}
        )
        return init_model.init_random_model(
            "llama", "wide1", Path(tiny_model_dir).parent / "tokenizer", tmp_path / "wide1", seed=0
        )


def _tp1_greedy(cfg, prompts: DataProto) -> DataProto:
    """The same prompts through an hf engine at TP=1 on the checkpoint's weights (this process)."""
    import copy

    from verl.modules import create_model, load_tokenizer
    from verl.workers.rollout import build_rollout_engine

    arr = cfg.actor_rollout_ref
    rollout = copy.deepcopy(arr.rollout)
    rollout.tensor_model_parallel_size = 1
    module = create_model("actor", arr.model, device="cpu").requires_grad_(False).eval()
    engine = build_rollout_engine(module, rollout, load_tokenizer(arr.model.tokenizer_path or arr.model.path))
    return engine.generate_sequences(prompts)


def test_tp2_rollout_pool_decodes_like_tp1_and_matches_the_actor_after_each_sync(tmp_path, tiny_model_dir):
    model = _wide_model(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    overrides = tiny_run_overrides(
        model,
        run,
        **{
            "actor_rollout_ref.hybrid_engine": False,
            "trainer.backend": "ray",
            "trainer.n_gpus_per_node": 1,
            "actor_rollout_ref.rollout.n_gpus_per_node": 2,
            "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
            "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": 1,
        },
    )
    trainer = RLTrainer(config=load_config(None, overrides))
    group = trainer._parts().actor_rollout_wg
    assert group.rollout_wg.world_size == 2 and group.actor_wg.world_size == 1
    out = group.generate_sequences(_prompts())  # the first (full) sync, then the TP group decodes
    ref = _tp1_greedy(trainer.config, _prompts())
    assert torch.equal(out.batch["responses"], ref.batch["responses"])
    actor = group.compute_log_prob(out).batch["old_log_probs"]
    mask = out.batch["response_mask"].bool()
    diff = float((out.batch["rollout_log_probs"] - actor)[mask].abs().max())
    sync = dict(group.last_sync)
    model_bytes = sync["bytes"]  # a full sync streams every state-dict entry once
    print("greedy |rollout - actor| max:", diff, "sync:", sync, "model bytes:", model_bytes)
    assert diff <= TOL
    assert sync["buckets"] >= 3 and sync["peak_extra_bytes"] <= 2**20 < model_bytes / 2
    assert sync["resident_bytes"] < 0.6 * model_bytes  # each rank holds its slices of the decoder block
    trainer.fit()  # step 2 generates after a sync of the updated (trainable) weights
    metrics = read_metrics(run)
    for step in (1, 2):
        print(
            step,
            {
                k: metrics[step][k]
                for k in (
                    "training/rollout_probs_diff_max",
                    "timing_s/update_weights",
                    "perf/update_weights_peak_extra_mb",
                )
            },
        )
        assert metrics[step]["training/rollout_probs_diff_max"] <= TOL
        assert metrics[step]["timing_s/update_weights"] > 0
        assert 0 < metrics[step]["perf/update_weights_peak_extra_mb"] <= 1.0
