"""Reward-hacking alarms on scripted runs: hand-computed shares, a "length > 50" reward fires the
length alarm (and only once), a clean scripted run fires none."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.config.schema_guards import AlarmsConfig
from verl.protocol import DataProto
from verl.trainer.guards.alarms import RewardAlarms, format_only_share, validation_accuracy, zero_variance_share
from verl.trainer.ppo.metrics import compute_data_metrics

P, R, N = 4, 128, 2  # prompt length, response length, samples per prompt


def length_reward(data_source, solution_str, ground_truth, extra_info=None):
    """The hackable reward of the scripted run: 1 for any response longer than 50 characters."""
    return 1.0 if len(solution_str) > 50 else 0.0


def scripted_batch(lengths: list[int], scores: list[float], acc: list[bool] | None = None) -> DataProto:
    """A scored step batch as the trainer has it: prompts, responses, masks, scores on the last token, uids."""
    b = len(lengths)
    mask = torch.zeros(b, R)
    scores_t = torch.zeros(b, R)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        scores_t[i, max(n - 1, 0)] = scores[i]
    tensors = {
        "prompts": torch.ones(b, P, dtype=torch.long),
        "responses": torch.ones(b, R, dtype=torch.long),
        "attention_mask": torch.cat([torch.ones(b, P), mask], -1),
        "response_mask": mask,
        "token_level_scores": scores_t,
        "token_level_rewards": scores_t,
        "advantages": scores_t,
        "returns": scores_t,
    }
    non = {"uid": np.array([f"p{i // N}" for i in range(b)], dtype=object)}
    if acc is not None:
        non["acc"] = np.array(acc, dtype=object)
    return DataProto.from_dict(tensors, non)


def run_scripted(alarms: RewardAlarms, steps: int, length_of_step, reward=length_reward) -> list[dict[str, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for step in range(1, steps + 1):
        lengths = [int(np.clip(length_of_step(step) + rng.integers(-5, 6), 1, R)) for _ in range(8)]
        scores = [reward("builtin", "x" * n, None) for n in lengths]
        batch = scripted_batch(lengths, scores)
        metrics = compute_data_metrics(batch, use_critic=False)
        rows.append(alarms.update(step, batch, metrics))
    return rows


def test_shares_by_hand():
    uids = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
    assert zero_variance_share(torch.tensor([1.0, 1.0, 0.0, 1.0, 2.0, 2.0]), uids) == pytest.approx(2 / 3)
    # positive reward 1 + 0.5 + 0.5 = 2, of which the two incorrect samples earn 1
    assert format_only_share(torch.tensor([1.0, 0.5, 0.5, -1.0]), np.array([True, False, False, False])) == 0.5
    assert format_only_share(torch.zeros(3), np.array([0, 0, 0])) == 0.0
    assert validation_accuracy({"val/accuracy": 0.25}) == 0.25
    assert validation_accuracy({"val-core/gsm8k/acc/mean@1": 0.5, "val-core/math/acc/mean@1": 0.7}) == pytest.approx(
        0.6
    )
    assert validation_accuracy({"val-aux/x/score/mean@1": 1.0}) is None


def test_length_reward_run_fires_the_length_alarm_once():
    lines: list[str] = []
    alarms = RewardAlarms(AlarmsConfig(), echo=lines.append)
    rows = run_scripted(alarms, 14, lambda step: 20 + 7 * step)  # the policy learns that longer pays
    fired = [i + 1 for i, r in enumerate(rows) if r["alarm/length_explosion"] == 1.0]
    assert fired and fired[0] == 10  # the first step with two full 5-step windows
    assert rows[9]["alarm/length_explosion_value"] == pytest.approx(
        np.mean([20 + 7 * s for s in range(6, 11)]) / np.mean([20 + 7 * s for s in range(1, 6)]), rel=0.05
    )
    length_lines = [line for line in lines if "length_explosion" in line]
    assert len(length_lines) == 1 and length_lines[0].startswith("ALARM step 10: length_explosion: response length")


def test_clean_scripted_run_fires_nothing():
    lines: list[str] = []
    alarms = RewardAlarms(AlarmsConfig(), echo=lines.append)
    rewards = iter(np.random.default_rng(1).random(1000))
    rows = run_scripted(alarms, 20, lambda step: 40, reward=lambda *a: float(next(rewards)))
    assert lines == [] and all(
        v == 0.0 for r in rows for k, v in r.items() if k.count("/") == 1 and not k.endswith("_value")
    )


def test_length_growth_without_reward_rise_is_not_hacking():
    alarms = RewardAlarms(AlarmsConfig(), echo=lambda line: None)
    rows = run_scripted(alarms, 12, lambda step: 20 + 7 * step, reward=lambda *a: 0.0)
    assert all(r["alarm/length_explosion"] == 0.0 for r in rows)


def test_share_alarms_need_patience_steps_in_a_row():
    lines: list[str] = []
    alarms = RewardAlarms(AlarmsConfig(patience=3), echo=lines.append)
    fired = []
    for step, acc in enumerate([True, False, False, True, False, False, False], start=1):
        batch = scripted_batch([10] * 8, [1.0] * 8, acc=[acc] * 8)  # every group flat, reward for wrong answers
        metrics = {"response_length/clip_ratio": 1.0 if step >= 5 else 0.0}
        out = alarms.update(step, batch, metrics)
        fired.append((out["alarm/zero_variance_groups"], out["alarm/format_only_reward"], out["alarm/clip_ratio"]))
    assert [f[0] for f in fired] == [0, 0, 1, 1, 1, 1, 1]  # flat groups from step 1: fires at step 3
    assert [f[1] for f in fired] == [0, 0, 0, 0, 0, 0, 1]  # the streak restarts after the correct step 4
    assert [f[2] for f in fired] == [0, 0, 0, 0, 0, 0, 1]  # clip ratio 1 from step 5
    assert sum("ALARM step 3: zero_variance_groups" in line for line in lines) == 1


def test_training_reward_up_while_validation_falls_fires_divergence():
    alarms = RewardAlarms(AlarmsConfig(), echo=lambda line: None)
    outs = {}
    for step, (score, val) in enumerate(
        [(0.2, 0.5), (0.3, None), (0.5, 0.52), (0.7, None), (0.8, 0.40), (0.9, None)], start=1
    ):
        batch = scripted_batch([10] * 8, [score] * 8)
        outs[step] = alarms.update(step, batch, {"critic/score/mean": score})
        if val is not None:  # validation after the step, as in the loop
            alarms.note_validation(step, {"val/accuracy": val})
    assert outs[4]["alarm/train_val_divergence"] == 0.0  # validation improved at step 3
    assert (
        outs[6]["alarm/train_val_divergence"] == 1.0
    )  # step 5: 0.40 < best 0.52 - 0.05 while the score rose 0.5 -> 0.85
    assert outs[6]["alarm/train_val_divergence_value"] == pytest.approx(0.12)


@pytest.mark.e2e
@pytest.mark.slow  # suite time: the default suite keeps a faster test of the same path
def test_clean_quickstart_fires_no_alarm_and_no_trip(tmp_path, capsys):
    from verl.commands.train import run

    history = run(
        "quickstart",
        [
            "trainer.total_training_steps=6",
            "trainer.test_freq=3",
            "data.val_max_samples=64",
            "trainer.progress_bar=false",
            "trainer.plot=false",
            "trainer.logger=[jsonl]",
            f"trainer.output_dir={tmp_path / 'out'}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ],
    )
    steps = [r for r in history if r["step"] > 0]
    assert len(steps) == 6
    flags = {k for r in steps for k in r if k.startswith("alarm/") and not k.endswith("_value")}
    assert len(flags) == 5 and all(r[k] == 0.0 for r in steps for k in flags)
    assert all(r["sentinel/tripped"] == 0.0 for r in steps)
    assert all("alarm/zero_variance_groups_value" in r and "alarm/format_only_reward_value" in r for r in steps)
    out = capsys.readouterr().out
    assert "ALARM" not in out and "SENTINEL" not in out


LENGTH_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Pays any response longer than 50 characters: a reward a policy can hack with length alone."""
    return 1.0 if len(solution_str) > 50 else 0.0
'''


def cut_responses(out: DataProto, target: int, pad_id: int) -> DataProto:
    """The generated rows cut to ``target`` tokens (the scripted policy's length of this step)."""
    b = out.batch
    prompt_len = b["prompts"].shape[1]
    keep = torch.arange(b["responses"].shape[1]) < target
    mask = b["response_mask"] * keep
    b["response_mask"] = mask
    b["responses"] = torch.where(mask.bool(), b["responses"], pad_id)
    b["input_ids"] = torch.cat([b["prompts"], b["responses"]], dim=1)
    b["attention_mask"] = torch.cat([b["attention_mask"][:, :prompt_len], mask.to(b["attention_mask"].dtype)], dim=1)
    return out


@pytest.mark.e2e
@pytest.mark.slow  # suite time: the default suite keeps a faster test of the same path
def test_training_run_paid_for_length_fires_the_length_alarm(tiny_model_dir, tmp_path, capsys):
    """The real loop (generation, the "length > 50" reward, update, metrics) with a scripted policy
    whose responses grow 5 tokens per step: the length alarm fires once the two windows are full."""
    from run_helpers import tiny_run_overrides

    from verl.config import load_config
    from verl.trainer import RLTrainer

    reward = tmp_path / "length_reward.py"
    tmp_path.mkdir(exist_ok=True)
    reward.write_text(LENGTH_REWARD)
    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            tmp_path,
            **{
                "trainer.total_training_steps": 11,
                "data.max_response_length": 64,
                "custom_reward_function.path": str(reward),
                "actor_rollout_ref.rollout.ignore_eos": True,
            },
        ),
    )  # every row runs to the cap; the script sets its length
    trainer = RLTrainer(config=cfg)
    parts = trainer._parts()
    generate = parts.actor_rollout_wg.generate_sequences

    def scripted(batch):
        out = generate(batch)
        if batch.meta_info.get("validate"):
            return out
        return cut_responses(out, 10 + 5 * (trainer.global_step + 1), parts.tokenizer.pad_token_id)

    parts.actor_rollout_wg.generate_sequences = scripted
    history = trainer.fit()
    lengths = [r["response_length/mean"] for r in history]
    scores = [r["critic/score/mean"] for r in history]
    assert lengths[0] == 15 and lengths[9] == 60  # the script held
    # the reward pays the length (decoded text is shorter than the token count: special tokens are dropped)
    assert scores[0] == 0.0 and scores[-1] > 0.0
    fired = [r["step"] for r in history if r["alarm/length_explosion"] == 1.0]
    assert fired and fired[0] == 10
    out = capsys.readouterr().out
    assert out.count("ALARM step 10: length_explosion") == 1


def test_state_round_trip_continues_like_an_uninterrupted_run():
    """The alarm state saved with a checkpoint: a resumed run reports what the uninterrupted one does."""

    def steps(alarms, lo, hi):
        out = []
        for step in range(lo, hi + 1):
            n = 20 + 7 * step
            batch = scripted_batch([n] * 8, [length_reward("s", "x" * n, None)] * 8, acc=[False] * 8)
            out.append(alarms.update(step, batch, compute_data_metrics(batch, use_critic=False)))
            if step % 3 == 0:
                alarms.note_validation(step, {"val/accuracy": 0.9 - 0.1 * step})
        return out

    whole = steps(RewardAlarms(AlarmsConfig(), echo=lambda line: None), 1, 14)
    first = RewardAlarms(AlarmsConfig(), echo=lambda line: None)
    head = steps(first, 1, 6)  # the checkpoint after step 6 (and its validation)
    import torch as _torch

    saved = _torch.load(_save(first.state_dict()), weights_only=True)  # as a checkpoint's trainer_state.pt is read
    resumed = RewardAlarms(AlarmsConfig(), echo=lambda line: None)
    resumed.load_state_dict(saved)
    assert head + steps(resumed, 7, 14) == whole
    for name in ("length_explosion", "format_only_reward", "train_val_divergence"):
        assert any(r[f"alarm/{name}"] for r in whole[6:]), name  # each alarm's state matters after the resume


def _save(obj):
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf
