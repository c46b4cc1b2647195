"""The hybrid ``rl`` stream is the RL step: the RL trainer's loss and log-probs, the sampling
temperature, the task's reward manager (custom function, timeout)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from verl.config.errors import ConfigError
from verl.config.loader import load_config
from verl.config.sft_loader import load_sft_config
from verl.engine.base import MicroBatchSpec
from verl.trainer.supervised.builders import build_supervised_trainer
from verl.workers.actor import compute_log_prob, policy_loss_fn

TAU = 1.5  # sampling temperature of the "rl" task: scoring at 1 instead gives other log-probs
CLIP = 0.1


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory):
    """A trainer with two RL streams: ``rl`` (τ = 1.5, custom reward 0.25 x (Σ ord(character) mod 5),
    each call logged, chunks of 3 rows) and ``slow`` (a scorer that sleeps past its 0.1 s
    deadline); each stream's step-1 batch."""
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("hybrid_rl")
    (tmp / "quarter.py").write_text(
        "import json\n\ndef score(data_source, solution_str, ground_truth, extra_info=None):\n"
        f"    with open({str(tmp / 'calls.jsonl')!r}, 'a') as f:\n        f.write(json.dumps(solution_str) + '\\n')\n"
        "    return 0.25 * (sum(map(ord, solution_str)) % 5)\n"
    )
    (tmp / "slow.py").write_text(
        "import time\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    time.sleep(2.0)\n    return 1.0\n"
    )
    common = "loss: rl, train_files: [builtin://arithmetic/train], batch_size: 2, rollout_n: 4, response_length: 6"
    tasks = (
        f"[{{name: rl, {common}, temperature: {TAU}, clip_ratio: {CLIP}, logprob_chunk_size: 3, "
        f"custom_reward_function: {{path: {tmp / 'quarter.py'}, name: score}}}}, "
        f"{{name: slow, {common}, reward_timeout_s: 0.1, custom_reward_function: {{path: {tmp / 'slow.py'}}}}}]"
    )
    cfg = load_sft_config(
        None,
        [
            "trainer.algorithm=hybrid",
            "model.partial_pretrain=builtin://tiny-arithmetic",
            "data.max_length=32",
            "data.micro_batch_size_per_gpu=2",
            f"hybrid.tasks={tasks}",
            f"trainer.default_local_dir={tmp}/ckpt",
            f"trainer.output_dir={tmp}/out",
        ],
    )
    trainer = build_supervised_trainer(cfg)
    prepared = {s.name: s.prepare(s.batch(1, 0, 1), 1) for s in trainer.streams}
    return trainer, prepared, tmp


def test_old_log_probs_are_scored_at_the_sampling_temperature(hybrid) -> None:
    trainer, prepared, _ = hybrid
    batch, _ = prepared["rl"]
    module = trainer.engine.module
    b = batch.batch
    r = b["responses"].shape[1]
    with torch.no_grad():
        logits = module(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]
        ).logits
    logits = logits[:, -r - 1 : -1].float()  # position t - 1 predicts response token t
    by_hand = torch.log_softmax(logits / TAU, -1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)
    at_one = torch.log_softmax(logits, -1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)
    mask = b["response_mask"].bool()
    torch.testing.assert_close(b["old_log_probs"][mask], by_hand[mask], atol=1e-5, rtol=0)
    assert (at_one[mask] - by_hand[mask]).abs().max() > 1e-2  # the check above tells τ = 0.5 from τ = 1
    # the loss scores at τ too: at the step the ratio is exactly 1 (ppo_kl 0), loss = -Σ A / N
    counts = trainer.engine.global_counts(batch, "response_mask")
    module.zero_grad(set_to_none=True)
    loss, metrics = trainer.streams[0].loss_fn(1.0)(module, batch, counts)
    module.zero_grad(set_to_none=True)
    assert b["advantages"].abs().sum() > 0
    assert metrics["ppo_kl"] == pytest.approx(0.0, abs=1e-6)
    expected = -(b["advantages"] * b["response_mask"]).sum() / counts.tokens
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-6)


def test_rl_stream_equals_the_rl_trainer_loss_and_grads(hybrid, tmp_path: Path) -> None:
    """Same batch, same (moved) weights: the stream's loss and gradient are the RL trainer's."""
    trainer, prepared, _ = hybrid
    batch, _ = prepared["rl"]
    stream, engine = trainer.streams[0], trainer.engine
    module = engine.module
    rl = load_config(
        None,
        [
            f"actor_rollout_ref.rollout.temperature={TAU}",
            f"actor_rollout_ref.actor.clip_ratio={CLIP}",
            f"actor_rollout_ref.actor.clip_ratio_low={CLIP}",
            f"actor_rollout_ref.actor.clip_ratio_high={CLIP}",
            f"trainer.default_local_dir={tmp_path}",
        ],
    )
    actor, rollout = rl.actor_rollout_ref.actor, rl.actor_rollout_ref.rollout
    # the RL worker's old-log-prob stage (its own micro-batches and chunks) gives the stream's old
    # log-probs; other batch shapes reorder fp32 sums (measured up to 4e-6), a wrong temperature is > 1e-2
    rl_old, _ = compute_log_prob(
        engine, batch, rollout.temperature, MicroBatchSpec(4), chunk_size=actor.logprob_chunk_size
    )
    torch.testing.assert_close(rl_old, batch.batch["old_log_probs"], atol=2e-5, rtol=0)
    saved = {k: v.clone() for k, v in module.state_dict().items()}
    try:
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():  # move the policy so that ratios leave 1 and the clip acts
            for p in module.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        counts = engine.global_counts(batch, "response_mask")
        module.zero_grad(set_to_none=True)
        hybrid_loss, hybrid_metrics = stream.loss_fn(1.0)(module, batch, counts)
        hybrid_loss.backward()
        g_hybrid = _grads(module)
        module.zero_grad(set_to_none=True)
        rl_loss, rl_metrics = policy_loss_fn(actor, rollout.temperature, rl.actor_rollout_ref.model.use_remove_padding)(
            module, batch, counts
        )
        rl_loss.backward()
        g_rl = _grads(module)
        module.zero_grad(set_to_none=True)
    finally:
        module.load_state_dict(saved)
    assert hybrid_metrics["ppo_kl"] > 1e-4 and hybrid_metrics["pg_clipfrac"] > 0  # a non-trivial step
    assert float(hybrid_loss.detach()) == pytest.approx(float(rl_loss.detach()), abs=1e-6)
    assert hybrid_metrics["pg_clipfrac"] == pytest.approx(float(rl_metrics["actor/pg_clipfrac"]), abs=1e-6)
    assert g_hybrid.keys() == g_rl.keys() and g_hybrid
    for name, g in g_hybrid.items():
        torch.testing.assert_close(g, g_rl[name], atol=1e-6, rtol=0)


def test_rl_stream_reward_comes_from_the_task_config(hybrid) -> None:
    import json

    _, prepared, tmp = hybrid
    rl, rl_metrics = prepared["rl"]
    calls = [json.loads(x) for x in (tmp / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == len(rl)  # the custom function scored every trajectory, not the arithmetic scorer
    assert rl_metrics["score_mean"] == pytest.approx(sum(0.25 * (sum(map(ord, c)) % 5) for c in calls) / len(calls))
    slow, slow_metrics = prepared["slow"]
    assert slow_metrics["score_mean"] == 0.0  # every sample past reward_timeout_s = 0.1 s
    assert slow_metrics["reward/num_timeouts"] >= 1


def test_rl_task_reward_and_chunk_settings_are_checked() -> None:
    for key, value in (("logprob_chunk_size", 0), ("reward_timeout_s", 0)):
        task = f"[{{name: r, loss: rl, train_files: [x], {key}: {value}}}]"
        with pytest.raises(ConfigError, match=f"hybrid.tasks\\[0\\].{key}"):
            load_sft_config(None, ["trainer.algorithm=hybrid", f"hybrid.tasks={task}"])


def test_rl_stream_scores_in_the_task_logprob_chunks(hybrid, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss forward turns logits into log-probs ``logprob_chunk_size`` (3) rows at a time."""
    import verl.workers.actor as actor_module

    trainer, prepared, _ = hybrid
    batch, _ = prepared["rl"]
    seen: list[int] = []
    real = actor_module.compute_log_probs_and_entropy

    def recording(*args, **kwargs):
        seen.append(kwargs["chunk_size"])
        return real(*args, **kwargs)

    monkeypatch.setattr(actor_module, "compute_log_probs_and_entropy", recording)
    counts = trainer.engine.global_counts(batch, "response_mask")
    with torch.no_grad():
        trainer.streams[0].loss_fn(1.0)(trainer.engine.module, batch, counts)
    assert seen == [3]
