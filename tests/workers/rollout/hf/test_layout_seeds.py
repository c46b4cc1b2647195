"""The rollout layout (`verl.workers.rollout.layout`): per-row seeds, the prompt checks, the output
layout, and the ``hf`` engine sampling each row from its own seed when only ``meta_info["seed"]`` is given."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl.config.schema import RolloutConfig
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.layout import assemble, check_prompts, derive_seeds, prompt_position_ids, row_seeds


def _td(n: int, **tensors: torch.Tensor) -> TensorDict:
    return TensorDict({"input_ids": torch.zeros(n, 2, dtype=torch.long), **tensors}, batch_size=[n])


def test_row_seeds_sample_seeds_branch_hand_computed():
    seeds = torch.tensor([5, -1, 2**62, -(2**63)], dtype=torch.long)
    out = row_seeds(_td(4, sample_seeds=seeds), {"seed": 99})  # sample_seeds win over meta_info["seed"]
    # s mod 2**63: -1 -> 2**63 - 1, -2**63 -> 0
    assert out.tolist() == [5, 2**63 - 1, 2**62, 0]
    assert out.dtype == torch.long


def test_row_seeds_meta_seed_branch_hand_computed():
    # SeedSequence([7]).generate_state(3, uint64) = [16920295385781661272, 610735763742393210,
    # 7078124019849193311]; each shifted right by one bit (63-bit seeds)
    expected = [16920295385781661272 >> 1, 610735763742393210 >> 1, 7078124019849193311 >> 1]
    assert expected == [8460147692890830636, 305367881871196605, 3539062009924596655]
    assert row_seeds(_td(3), {"seed": 7}).tolist() == expected
    assert row_seeds(_td(5), {"seed": 7}).tolist()[:3] == expected  # row i's seed does not depend on B
    assert row_seeds(_td(3), {"seed": 7}).tolist() == derive_seeds([7], 3).tolist()
    assert row_seeds(_td(2), {"seed": -1}).tolist() == derive_seeds([2**63 - 1], 2).tolist()
    assert row_seeds(_td(3), {"seed": 8}).tolist() != expected
    assert row_seeds(_td(3), {}) is None and row_seeds(_td(3), {"seed": None}) is None


def test_derive_seeds_are_63_bit_and_keyed():
    raw = np.random.SeedSequence([3, 1, 4]).generate_state(4, dtype=np.uint64)
    assert derive_seeds([3, 1, 4], 4).tolist() == [int(x) >> 1 for x in raw]
    assert (derive_seeds([3, 1, 4], 1000) >= 0).all()
    assert derive_seeds([3, 1, 5], 4).tolist() != derive_seeds([3, 1, 4], 4).tolist()


def test_check_prompts_one_line_errors():
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    check_prompts(mask, 3, 8, 5)  # longest 3 + 5 = 8: allowed
    check_prompts(torch.zeros(0, 4, dtype=torch.long), 1, 1, 100)  # an empty batch passes
    cases = [
        (torch.tensor([[1, 1, 0]]), 3, None, 1, "left-padded prompts"),
        (mask, 2, None, 1, "prompt of 3 tokens > rollout.prompt_length 2; truncate or filter in the data"),
        (mask, None, 7, 5, r"prompt 3 \+ response 5 tokens > rollout.max_model_len 7"),
    ]
    for m, limit, max_len, r, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            check_prompts(m, limit, max_len, r)
        assert "\n" not in str(err.value)


def test_prompt_position_ids_and_multi_dim_ids_refused():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert prompt_position_ids(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
    given = torch.tensor([[5, 5, 5, 6], [1, 2, 3, 4]])
    assert prompt_position_ids(mask, given) is given
    with pytest.raises(ValueError, match="not supported yet"):
        prompt_position_ids(mask, torch.zeros(2, 3, 4, dtype=torch.long))


def test_assemble_layout_hand_computed():
    prompts = DataProto.from_dict(
        tensors={"input_ids": torch.zeros(2, 3, dtype=torch.long), "sample_seeds": torch.tensor([4, 9])},
        non_tensors={"uid": np.array(["a", "b"], dtype=object)},
    )
    ids = torch.tensor([[0, 7, 8], [5, 6, 7]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    responses = torch.tensor([[10, 11, 0, 0], [12, 13, 14, 15]])
    lengths = torch.tensor([2, 4])
    log_probs = torch.tensor([[-0.5, -0.25, 0.0, 0.0], [-1.0, -2.0, -3.0, -4.0]])
    versions = torch.tensor([[3, 3, -1, -1], [2, 2, 3, 3]])
    out = assemble(
        prompts,
        ids,
        mask,
        responses,
        lengths,
        log_probs,
        versions,
        finished=torch.tensor([True, False]),
        version=9,
        meta_info={"temperature": 1.0},
        non_tensors={"num_turns": np.array([1, 1])},
    )
    b = out.batch
    assert b["input_ids"].tolist() == [[0, 7, 8, 10, 11, 0, 0], [5, 6, 7, 12, 13, 14, 15]]
    assert b["attention_mask"].tolist() == [[0, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]]
    # prompt: cumsum(mask) - 1 clamped at 0; response: last prompt position + 1, + 2, ... (padding too)
    assert b["position_ids"].tolist() == [[0, 0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6]]
    assert b["response_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert torch.equal(b["prompts"], ids) and torch.equal(b["responses"], responses)
    assert torch.equal(b["rollout_log_probs"], log_probs) and torch.equal(b["rollout_policy_versions"], versions)
    assert b["rollout_finished"].tolist() == [True, False] and b["sample_seeds"].tolist() == [4, 9]
    nt = out.non_tensor_batch
    assert nt["uid"].tolist() == ["a", "b"] and nt["num_turns"].tolist() == [1, 1]
    assert nt["min_global_steps"].tolist() == [3, 2] and nt["max_global_steps"].tolist() == [3, 3]
    assert out.meta_info == {"temperature": 1.0}
    # a loss mask of its own (agent loops: tool tokens), no log-probs, no finished flags
    own = torch.tensor([[1, 0, 0, 0], [0, 1, 1, 0]])
    bare = assemble(prompts, ids, mask, responses, lengths, None, torch.full((2, 4), -1), response_mask=own, version=9)
    assert torch.equal(bare.batch["response_mask"], own)
    assert bare.batch["attention_mask"][:, 3:].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert "rollout_log_probs" not in bare.batch.keys() and "rollout_finished" not in bare.batch.keys()
    assert bare.non_tensor_batch["min_global_steps"].tolist() == [9, 9]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


def _batch(tok, seed: int | None, n: int = 4, width: int = 12) -> DataProto:
    rows = [tok(f"{3 * i + 1}+{7 * i + 2}=", add_special_tokens=False)["input_ids"] for i in range(n)]
    ids = torch.full((n, width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros(n, width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :], mask[i, width - len(r) :] = torch.tensor(r), 1
    meta = {"pad_token_id": tok.pad_token_id} | ({"seed": seed} if seed is not None else {})
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": prompt_position_ids(mask)}, meta_info=meta
    )


def _hf(model, tok, **cfg) -> HFRollout:
    return HFRollout(model, RolloutConfig(response_length=10, prompt_length=12, temperature=1.0, seed=0, **cfg), tok)


def test_hf_meta_seed_samples_each_row_from_its_row_seed(tiny):
    model, tok = tiny
    seeded = _hf(model, tok).generate_sequences(_batch(tok, 7))
    explicit = _batch(tok, None)
    explicit.batch["sample_seeds"] = derive_seeds([7], len(explicit))
    ref = _hf(model, tok).generate_sequences(explicit)
    assert torch.equal(seeded.batch["responses"], ref.batch["responses"])
    assert torch.equal(seeded.batch["rollout_log_probs"], ref.batch["rollout_log_probs"])
    # micro-batches of one row: each row's tokens depend on its own seed only
    assert torch.equal(
        _hf(model, tok, max_num_seqs=1).generate_sequences(_batch(tok, 7)).batch["responses"], seeded.batch["responses"]
    )
    other = _hf(model, tok).generate_sequences(_batch(tok, 8)).batch["responses"]
    assert not torch.equal(other, seeded.batch["responses"])
    assert len({tuple(r) for r in seeded.batch["responses"].tolist()}) > 1  # rows differ: one seed per row
