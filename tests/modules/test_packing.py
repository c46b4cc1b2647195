"""Padding-free (packed) forwards equal the padded ones (issue 14, ``use_remove_padding``)."""

from __future__ import annotations

import math

import pytest
import torch
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.config.schema import ActorConfig, ModelConfig
from verl.engine import GlobalCounts
from verl.modules import create_model
from verl.modules.forward import compute_log_probs_and_entropy, compute_values
from verl.modules.packing import pack_responses, unpack_responses
from verl.protocol import DataProto
from verl.workers.actor import policy_loss_fn

P, R = 12, 7


def test_pack_example_by_hand():
    ids = torch.tensor([[0, 11, 12, 13, 14], [15, 16, 17, 18, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    packed = pack_responses(ids, mask, pos, 2)
    assert packed.input_ids.tolist() == [[11, 12, 13, 14], [15, 16, 17, 18]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert packed.score_mask.nonzero().tolist() == [[0, 1], [0, 2], [1, 2]] and packed.labels.tolist() == [13, 14, 18]
    assert unpack_responses(torch.tensor([1.0, 2.0, 3.0]), packed).tolist() == [[1.0, 2.0], [3.0, 0.0]]


def test_short_sequences_share_a_row_first_fit_decreasing():
    # lengths 2, 4, 2, 3 with rows of 4 tokens (first fit, longest first): [seq1], [seq3 | tail], [seq0 | seq2]
    ids = torch.tensor([[0, 0, 21, 22], [31, 32, 33, 34], [0, 0, 41, 42], [0, 51, 52, 53]])
    mask = (ids > 0).long()
    packed = pack_responses(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), 1)
    assert packed.input_ids.tolist() == [[31, 32, 33, 34], [51, 52, 53, 0], [21, 22, 41, 42]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 0, 1]]
    assert packed.score_mask.nonzero().tolist() == [[0, 2], [1, 1], [2, 0], [2, 2]]
    assert packed.labels.tolist() == [34, 53, 22, 42] and packed.rows.tolist() == [1, 3, 0, 2]


def test_pack_refuses_a_response_without_context():
    mask = torch.tensor([[0, 0, 1, 1]])
    with pytest.raises(ValueError, match="no real token before"):
        pack_responses(torch.tensor([[0, 0, 5, 6]]), mask, mask, 2)


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Left-padded prompts of 1..12 tokens and right-padded responses of 1..7 tokens."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens, resp_lens = [12, 1, 5, 9, 2, 12], [7, 1, 3, 7, 2, 5]
    ids = torch.randint(3, 40, (6, P + R), generator=g)
    mask = torch.zeros(6, P + R, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_lens, resp_lens, strict=True)):
        mask[i, P - p : P + r] = 1
    ids = ids * mask
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "responses": ids[:, P:],
        "response_mask": mask[:, P:],
    }


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model_dir(request, tmp_path_factory):
    from verl.modules.builtin import load_builtin_tokenizer
    from verl.modules.init_model import init_random_model

    root = tmp_path_factory.mktemp(f"pack_{request.param}")
    load_builtin_tokenizer().save_pretrained(str(root / "tok"))
    return init_random_model(request.param, "tiny", root / "tok", root / "model", seed=0)


def test_packed_log_probs_entropy_and_values_equal_padded(model_dir):
    b = _batch()
    mask = b["response_mask"].bool()
    torch.manual_seed(0)
    actor = create_model("actor", ModelConfig(path=str(model_dir)))
    args = (b["input_ids"], b["attention_mask"], b["position_ids"], R)
    lp_pad, ent_pad = compute_log_probs_and_entropy(actor, *args, temperature=0.7)
    lp_pack, ent_pack = compute_log_probs_and_entropy(actor, *args, temperature=0.7, remove_padding=True)
    assert torch.allclose(lp_pad[mask], lp_pack[mask], atol=1e-5) and torch.equal(
        lp_pack[~mask], torch.zeros_like(lp_pack[~mask])
    )
    assert torch.allclose(ent_pad[mask], ent_pack[mask], atol=1e-5)
    critic = create_model("critic", ModelConfig(path=str(model_dir)))
    v_pad, v_pack = compute_values(critic, *args), compute_values(critic, *args, remove_padding=True)
    assert torch.allclose(v_pad[mask], v_pack[mask], atol=1e-5)


def test_packed_policy_loss_and_gradient_equal_padded(model_dir):
    b = _batch(1)
    g = torch.Generator().manual_seed(2)
    b["advantages"] = torch.randn(6, R, generator=g)
    b["old_log_probs"] = -torch.rand(6, R, generator=g) * 3
    micro = DataProto.from_dict(tensors=b)
    counts = GlobalCounts(tokens=float(b["response_mask"].sum()), sequences=6.0)
    cfg = ActorConfig(entropy_coeff=0.01)
    results = []
    for packed in (False, True):
        torch.manual_seed(0)
        module = create_model("actor", ModelConfig(path=str(model_dir)))
        loss, metrics = policy_loss_fn(cfg, 1.0, remove_padding=packed)(module, micro, counts)
        loss.backward()
        results.append((float(loss.detach()), [p.grad.clone() for p in module.parameters()]))
    (l0, g0), (l1, g1) = results
    assert l0 == pytest.approx(l1, abs=1e-5)
    assert all(torch.allclose(a, c, atol=1e-5) for a, c in zip(g0, g1, strict=True))


@pytest.mark.e2e
def test_grpo_run_with_packing_equals_padded_run(tiny_model_dir, tmp_path):
    runs = {}
    for packed in (False, True):
        run_dir = tmp_path / f"packed_{packed}"
        cfg = load_config(
            None,
            tiny_run_overrides(
                tiny_model_dir,
                run_dir,
                **{
                    "trainer.total_training_steps": 3,
                    "actor_rollout_ref.model.use_remove_padding": packed,
                    "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
                    "actor_rollout_ref.actor.calculate_entropy": True,
                },
            ),
        )
        from verl.trainer import RLTrainer

        RLTrainer(config=cfg).fit()
        runs[packed] = read_metrics(run_dir)
    keys = (
        "actor/pg_loss",
        "actor/grad_norm",
        "actor/entropy",
        "actor/ppo_kl",
        "critic/score/mean",
        "response_length/mean",
    )
    for step in (1, 2, 3):
        for k in keys:
            a, c = runs[False][step][k], runs[True][step][k]
            assert math.isfinite(a) and a == pytest.approx(c, abs=1e-4), (step, k, a, c)


@pytest.mark.parametrize("recompute", [False, True])
def test_fused_head_equals_unfused_packed_and_padded(model_dir, monkeypatch, recompute):
    """The fused LM head + log-prob (`fused_lm_head`) vs the model's own head, on left- and
    right-padded rows of very different lengths: log-probs, entropy and parameter gradients."""
    import verl.modules.forward as fwd

    b = _batch(3)
    mask = b["response_mask"].bool()
    g = torch.Generator().manual_seed(4)
    weights = torch.randn(6, R, generator=g) * mask
    args = (b["input_ids"], b["attention_mask"], b["position_ids"], R)
    for packed in (False, True):
        results = []
        for fused in (True, False):
            if not fused:
                monkeypatch.setattr(fwd, "fused_lm_head", lambda module: None)
            torch.manual_seed(0)
            module = create_model("actor", ModelConfig(path=str(model_dir)))
            assert fused is False or fwd.fused_lm_head(module) is not None
            lp, ent = compute_log_probs_and_entropy(
                module, *args, temperature=0.7, chunk_size=5, remove_padding=packed, head_recompute=recompute
            )
            ((lp * weights).sum() + 0.1 * (ent * weights).sum()).backward()
            results.append((lp.detach(), ent.detach(), [p.grad.clone() for p in module.parameters()]))
            monkeypatch.undo()
        (lp0, ent0, g0), (lp1, ent1, g1) = results
        torch.testing.assert_close(lp0[mask], lp1[mask], atol=1e-5, rtol=0)
        torch.testing.assert_close(ent0[mask], ent1[mask], atol=1e-5, rtol=0)
        assert all(torch.allclose(a, c, atol=1e-5) for a, c in zip(g0, g1, strict=True))


def test_fused_head_applies_only_to_plain_heads(model_dir):
    from torch import nn

    from verl.modules.forward import fused_lm_head

    module = create_model("actor", ModelConfig(path=str(model_dir)))
    assert fused_lm_head(module) is module.get_output_embeddings()
    assert fused_lm_head(nn.Linear(2, 2)) is None  # not a transformers model
    module.config.final_logit_softcapping = 30.0  # logits are not hidden @ Wᵀ any more
    assert fused_lm_head(module) is None
    module.config.final_logit_softcapping = None
    assert fused_lm_head(module) is not None
    for key in ("logit_scale", "logits_scaling", "output_multiplier"):  # Cohere, Granite, ... scale after the head
        setattr(module.config, key, 8.0)
        assert fused_lm_head(module) is None, key
        setattr(module.config, key, 1.0)  # 1 changes nothing
        assert fused_lm_head(module) is not None, key
    module.config.text_config = type(module.config)(logits_scaling=8.0)  # a multimodal model's text part
    assert fused_lm_head(module) is None


def _first_fit_from_row_zero(lengths: list[int], cap: int) -> tuple[list[int], list[int], list[int]]:
    """Textbook first-fit decreasing: every sequence scans the rows from row 0."""
    row_of, start_of, fill = [0] * len(lengths), [0] * len(lengths), []
    for i in sorted(range(len(lengths)), key=lambda k: -lengths[k]):
        row = next((r for r, f in enumerate(fill) if f + lengths[i] <= cap), len(fill))
        if row == len(fill):
            fill.append(0)
        row_of[i], start_of[i] = row, fill[row]
        fill[row] += lengths[i]
    return row_of, start_of, fill


def test_first_fit_skipping_full_rows_packs_like_the_textbook_scan():
    import random

    from verl.modules.packing import _first_fit

    rng = random.Random(0)
    for _ in range(2000):
        lengths = [rng.randint(1, 30) for _ in range(rng.randint(0, 60))]
        cap = max(lengths, default=1) + rng.choice([0, 0, 3, 20])
        assert _first_fit(lengths, cap) == _first_fit_from_row_zero(lengths, cap), (lengths, cap)
    assert _first_fit([3, 1, 4, 4], 4) == ([2, 2, 0, 1], [0, 3, 0, 0], [4, 4, 4])  # by hand: rows 4 | 4 | 3 + 1


def test_pack_targets_example_by_hand():
    # rows [a, b, c, pad] and [d, e, pad, pad]; targets c and e -> rows of 3 tokens, results in (B, T)
    from verl.modules.packing import pack_targets

    ids = torch.tensor([[11, 12, 13, 0], [14, 15, 0, 0]])
    mask = (ids > 0).long()
    targets = torch.tensor([[0, 0, 1, 0], [0, 1, 0, 0]]).bool()
    packed = pack_targets(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), targets)
    assert packed.input_ids.tolist() == [[11, 12, 13], [14, 15, 0]]
    assert packed.position_ids.tolist() == [[0, 1, 2], [0, 1, 0]]
    assert packed.score_mask.nonzero().tolist() == [[0, 1], [1, 0]] and packed.labels.tolist() == [13, 15]
    assert unpack_responses(torch.tensor([1.0, 2.0]), packed).tolist() == [[0, 0, 1.0, 0], [0, 2.0, 0, 0]]
    with pytest.raises(ValueError, match="is padding"):
        pack_targets(ids, mask, mask, torch.tensor([[0, 0, 0, 1], [0, 0, 0, 0]]).bool())
    with pytest.raises(ValueError, match="no real token before"):
        pack_targets(ids, mask, mask, torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0]]).bool())


def test_packing_refuses_a_model_whose_packed_sequences_attend_to_each_other(model_dir, monkeypatch):
    """A model that builds a plain causal mask over a packed row (as custom / remote code may) is
    refused, on the fused-head, unfused (peft) and value paths; transformers' own models pass."""
    import transformers.masking_utils as mu

    from verl.config.errors import ConfigError
    from verl.modules.forward import compute_token_log_probs

    b = _batch()
    args = (b["input_ids"], b["attention_mask"], b["position_ids"])
    actor = create_model("actor", ModelConfig(path=str(model_dir)))
    peft_actor = create_model("actor", ModelConfig(path=str(model_dir), lora_rank=4, lora_alpha=8))
    critic = create_model("critic", ModelConfig(path=str(model_dir)))
    calls = [
        lambda: compute_log_probs_and_entropy(actor, *args, R, remove_padding=True),
        lambda: compute_token_log_probs(
            peft_actor,
            *args,
            b["response_mask"].new_zeros(b["input_ids"].shape).bool()
            | (b["attention_mask"].cumsum(-1) > 1) & b["attention_mask"].bool(),
            remove_padding=True,
        ),
        lambda: compute_values(critic, *args, R, remove_padding=True),
    ]
    monkeypatch.setattr(mu, "find_packed_sequence_indices", lambda position_ids: None)  # boundaries ignored
    for call in calls:
        with pytest.raises(ConfigError, match="use_remove_padding=true: .* lets packed sequences attend to each other"):
            call()
    monkeypatch.undo()
    for call in calls:  # the same models with transformers' boundary detection: accepted (and checked once)
        call()


def test_packing_probe_tolerance_follows_the_output_dtype():
    """A bf16 forward differs from itself by rounding between kernels: tolerated (5e-2 of the scale);
    the same difference in float32 is refused (1e-3)."""
    from verl.config.errors import ConfigError
    from verl.modules.packing import check_packing_separates

    def run_with(dtype, delta):
        def run(ids, mask, pos):
            out = torch.full((1, ids.shape[1], 3), 4.0)
            if ids.shape[1] == 9:  # the packed row: the second sequence's outputs are off by delta
                out[0, 5:] += delta
            return out.to(dtype)

        return run

    check_packing_separates(torch.nn.Linear(2, 2), run_with(torch.bfloat16, 0.03125), torch.device("cpu"))
    with pytest.raises(ConfigError, match="attend to each other"):
        check_packing_separates(torch.nn.Linear(2, 2), run_with(torch.float32, 0.03125), torch.device("cpu"))
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    module.train()
    module[0].eval()  # mixed modes come back as they were
    check_packing_separates(module, run_with(torch.float32, 0.0), torch.device("cpu"))
    assert module.training and not module[0].training and module[1].training
