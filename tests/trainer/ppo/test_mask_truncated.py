"""``actor_rollout_ref.actor.mask_truncated_completions``: responses cut at the limit leave the loss."""

from __future__ import annotations

import pytest
import torch

from verl.config import load_config
from verl.protocol import DataProto
from verl.trainer import RLTrainer
from verl.trainer.ppo.truncation import mask_truncated_stage, truncated_rows
from verl.workers import actor as actor_mod

EOS, PAD = 2, 0


def _batch() -> DataProto:
    # R = 3: row 0 ends on EOS before the limit, row 1 fills the limit with EOS last (complete),
    # row 2 fills it without EOS (cut), row 3 is shorter without EOS (a stop string, complete)
    responses = torch.tensor([[5, EOS, PAD], [5, 6, EOS], [5, 6, 7], [5, PAD, PAD]])
    resp_attn = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0]])
    prompt = torch.ones(4, 2, dtype=torch.long)
    return DataProto.from_dict(
        tensors={
            "responses": responses,
            "attention_mask": torch.cat([prompt, resp_attn], 1),
            "response_mask": resp_attn.clone(),
            "advantages": torch.ones(4, 3),
        }
    )


def test_truncated_rows_by_hand():
    d = _batch()
    cut = truncated_rows(d.batch["responses"], d.batch["attention_mask"][:, -3:], [EOS])
    assert cut.tolist() == [False, False, True, False]
    assert truncated_rows(d.batch["responses"], d.batch["attention_mask"][:, -3:], [EOS, 7]).tolist() == [False] * 4


def test_stage_zeroes_only_truncated_rows_and_reports_the_ratio():
    d = _batch()
    before = d.batch["response_mask"].clone()
    metrics = mask_truncated_stage(d, [EOS])
    assert metrics == {"response_length/masked_truncated_ratio": 0.25}
    assert d.batch["response_mask"][2].tolist() == [0, 0, 0]
    assert torch.equal(d.batch["response_mask"][[0, 1, 3]], before[[0, 1, 3]])
    with pytest.raises(ValueError, match="mask_truncated_completions needs the rollout's eos_token_id"):
        mask_truncated_stage(_batch(), [])


@pytest.mark.e2e
def test_run_leaves_truncated_responses_out_of_the_actor_loss(tmp_path, monkeypatch):
    seen = {}
    original = actor_mod.PPOActor.update_policy

    def spy(self, data, temperature, mini_batch_size):
        seen["data"] = data.select(deepcopy=True)
        return original(self, data, temperature, mini_batch_size)

    monkeypatch.setattr(actor_mod.PPOActor, "update_policy", spy)
    # the quick start's warm-started model answers "a+b=" with 2 or 3 digits then EOS: with a
    # 3-token budget the 3-digit answers are cut
    overrides = [
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[jsonl]",
        "trainer.plot=false",
        "trainer.progress_bar=false",
        "trainer.save_freq=-1",
        f"trainer.output_dir={tmp_path / 'out'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "data.train_batch_size=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.rollout.n=4",
        "data.max_response_length=3",
        "actor_rollout_ref.actor.mask_truncated_completions=true",
    ]
    trainer = RLTrainer(config=load_config("quickstart", overrides))
    history = trainer.fit()
    d = seen["data"].batch
    r = d["responses"].shape[-1]
    eos = trainer._parts().tokenizer.eos_token_id
    full = d["attention_mask"][:, -r:]
    cut = (full[:, -1] == 1) & (d["responses"][:, -1] != eos)
    assert 0 < int(cut.sum()) < len(cut)  # the random tiny model: some responses cut, some not
    assert int(d["response_mask"][cut].sum()) == 0
    assert torch.equal(d["response_mask"][~cut], full[~cut])
    # advantages were computed before the masking: cut rows keep their group advantages
    assert float(d["advantages"][cut].abs().sum()) > 0
    assert history[-1]["response_length/masked_truncated_ratio"] == pytest.approx(float(cut.float().mean()))
    # the step's data metrics describe the responses as generated
    assert history[-1]["response_length/max"] == pytest.approx(float(full.sum(-1).max()))
