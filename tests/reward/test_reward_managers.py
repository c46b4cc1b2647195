"""Reward managers: decoding, reward placement, failure containment, overlong shaping (B21, B25)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from verl.protocol import DataProto
from verl.reward import (
    REWARD_MANAGERS,
    BatchRewardManager,
    NaiveRewardManager,
    OverlongBufferConfig,
    create_reward_manager,
)
from verl.reward.scorers import math_answer
from verl.utils.registry import RegistryError

PAD, EOS = 0, 2


class CharTokenizer:
    """Token id = ord(character); ids 0 (PAD) and 2 (EOS) are special."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def batch_decode(self, ids: Sequence[Sequence[int]], skip_special_tokens: bool = False) -> list[str]:
        skip = {PAD, EOS} if skip_special_tokens else set()
        return ["".join(chr(i) for i in row if i not in skip) for row in ids]


def make_batch(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    ground_truths: Sequence[str],
    data_source: str = "builtin/arithmetic",
    width: int | None = None,
    pad_id: int = PAD,
) -> DataProto:
    """Left-padded prompts (B, P), right-padded responses (B, R) and masks."""
    p_len = max(len(p) for p in prompts)
    r_len = width or max(max(len(r) for r in responses), 1)
    n = len(prompts)
    prompt_ids = torch.full((n, p_len), pad_id)
    response_ids = torch.full((n, r_len), pad_id)
    prompt_mask = torch.zeros(n, p_len, dtype=torch.long)
    response_mask = torch.zeros(n, r_len, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        if p:
            prompt_ids[i, p_len - len(p) :] = torch.tensor(p)
            prompt_mask[i, p_len - len(p) :] = 1
        if r:
            response_ids[i, : len(r)] = torch.tensor(r)
            response_mask[i, : len(r)] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "response_mask": response_mask,
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
        },
        non_tensors={
            "data_source": [data_source] * n,
            "reward_model": [{"ground_truth": g, "style": "rule"} for g in ground_truths],
            "extra_info": [{"index": i} for i in range(n)],
        },
    )


TOK = CharTokenizer()


def test_reward_manager_registry_names_and_miss() -> None:
    assert REWARD_MANAGERS.names() == ["batch", "dapo", "gdpo", "naive", "prime"]
    assert isinstance(create_reward_manager("naive", TOK), NaiveRewardManager)
    with pytest.raises(RegistryError, match="Did you mean 'naive'"):
        create_reward_manager("naiv", TOK)


@pytest.mark.parametrize("name", ["naive", "batch"])
def test_reward_manager_places_score_on_last_valid_token(name: str) -> None:
    batch = make_batch(
        prompts=[TOK.encode("What is 37+58?"), TOK.encode("1+1?"), TOK.encode("2+2?")],
        responses=[TOK.encode("37+58=95") + [EOS], TOK.encode("3"), []],
        ground_truths=["95", "2", "4"],
        width=12,
    )
    out = create_reward_manager(name, TOK)(batch)
    expected = torch.zeros(3, 12)
    expected[0, 8] = 1.0  # 9 valid tokens (EOS included) -> index 8
    assert torch.equal(out["reward_tensor"], expected)  # wrong answer and empty response: zero rows
    assert out["reward_metrics"] == {"reward/num_errors": 0.0, "reward/num_nonfinite": 0.0, "reward/num_timeouts": 0.0}
    assert out["reward_extra_info"]["reward_error"] == [False, False, False]


def test_reward_manager_mask_with_a_hole_rewards_the_last_valid_token() -> None:
    """A masked-out span (e.g. a tool observation) is skipped; the reward lands on the last 1."""
    batch = make_batch([[65]], [TOK.encode("7x7")], ["77"], width=5)
    batch.batch["response_mask"][0] = torch.tensor([1, 0, 1, 0, 0])
    out = NaiveRewardManager(TOK)(batch)
    assert torch.equal(out["reward_tensor"], torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0]]))


def test_reward_manager_return_dict_false_gives_tensor() -> None:
    batch = make_batch([TOK.encode("q")], [TOK.encode("7")], ["7"], width=3)
    tensor = NaiveRewardManager(TOK)(batch, return_dict=False)
    assert torch.equal(tensor, torch.tensor([[1.0, 0.0, 0.0]]))


def test_reward_manager_decodes_only_masked_response_tokens() -> None:
    """Tokens outside response_mask (and the prompt) never reach the scorer."""
    seen: list[str] = []

    def record(data_source: str, solution_str: str, ground_truth: str, extra_info: Any) -> float:
        seen.append(solution_str)
        return 0.0

    batch = make_batch([TOK.encode("#### 5")], [TOK.encode("6") + [EOS]], ["5"], width=4)
    batch.batch["responses"][0, 2:] = torch.tensor(TOK.encode("55"))  # junk after the mask
    NaiveRewardManager(TOK, compute_score=record)(batch)
    assert seen == ["6"]


def test_reward_manager_dict_results_fill_extra_info() -> None:
    def scorer(data_source: str, solution_str: str, ground_truth: str, extra_info: Any) -> Any:
        if solution_str == "7":
            return {"score": 1.0, "acc": True, "pred": "7"}
        return {"score": 0.25, "acc": False}

    batch = make_batch([[65], [66]], [TOK.encode("7"), TOK.encode("8")], ["7", "7"], width=2)
    out = NaiveRewardManager(TOK, compute_score=scorer)(batch)
    assert torch.equal(out["reward_tensor"], torch.tensor([[1.0, 0.0], [0.25, 0.0]]))
    assert out["reward_extra_info"]["acc"] == [True, False]
    assert out["reward_extra_info"]["pred"] == ["7", None]
    assert "score" not in out["reward_extra_info"]


def test_reward_manager_unknown_data_source_fails_fast() -> None:
    batch = make_batch([[65]], [TOK.encode("7")], ["7"], data_source="openai/gsm8kk")
    with pytest.raises(RegistryError, match="Did you mean 'openai/gsm8k'"):
        NaiveRewardManager(TOK)(batch)


def test_reward_manager_raising_scorer_is_contained_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    def scorer(data_source: str, solution_str: str, ground_truth: str, extra_info: Any) -> float:
        if ground_truth == "boom":
            raise ZeroDivisionError("bad sample")
        return 1.0 if solution_str == ground_truth else 0.0

    manager = NaiveRewardManager(TOK, compute_score=scorer, timeout_s=5.0)
    batch = make_batch([[65]] * 3, [TOK.encode("1"), TOK.encode("2"), TOK.encode("3")], ["1", "boom", "3"])
    with caplog.at_level(logging.WARNING, logger="verl.reward.managers"):
        out = manager(batch)
        out2 = manager(batch)
    assert out["reward_tensor"][:, 0].tolist() == [1.0, 0.0, 1.0]
    assert out["reward_metrics"]["reward/num_errors"] == 1.0
    assert out["reward_extra_info"]["reward_error"] == [False, True, False]
    assert out2["reward_metrics"]["reward/num_errors"] == 1.0
    warnings = [r for r in caplog.records if "ZeroDivisionError" in r.getMessage()]
    assert len(warnings) == 1


def test_reward_manager_hanging_scorer_times_out(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()

    def scorer(data_source: str, solution_str: str, ground_truth: str, extra_info: Any) -> float:
        if solution_str == "hang":
            release.wait(10.0)
        return 1.0

    manager = NaiveRewardManager(TOK, compute_score=scorer, timeout_s=0.2)
    batch = make_batch([[65]] * 3, [TOK.encode("1"), TOK.encode("hang"), TOK.encode("3")], ["1", "1", "1"])
    try:
        start = time.perf_counter()
        with caplog.at_level(logging.WARNING, logger="verl.reward.managers"):
            out = manager(batch)
            out2 = manager(batch)
        elapsed = time.perf_counter() - start
    finally:
        release.set()
    assert out["reward_tensor"][:, 0].tolist() == [1.0, 0.0, 1.0]  # samples after the hang still scored
    assert out["reward_extra_info"]["reward_timeout"] == [False, True, False]
    assert out["reward_metrics"] == {"reward/num_errors": 0.0, "reward/num_nonfinite": 0.0, "reward/num_timeouts": 1.0}
    assert out2["reward_metrics"]["reward/num_timeouts"] == 1.0
    assert elapsed < 3.0
    assert len([r for r in caplog.records if "timeout" in r.getMessage()]) == 1


def test_reward_batch_manager_calls_once_with_lists() -> None:
    calls: list[dict[str, Any]] = []

    def batched(data_sources: list[str], solution_strs: list[str], ground_truths: list[str], extra_infos: list[Any]):
        calls.append({"sources": data_sources, "solutions": solution_strs, "extra": extra_infos})
        return [float(s == g) for s, g in zip(solution_strs, ground_truths, strict=True)]

    batch = make_batch([[65], [66]], [TOK.encode("7"), TOK.encode("9")], ["7", "8"], width=2)
    out = BatchRewardManager(TOK, compute_score=batched)(batch)
    assert len(calls) == 1 and calls[0]["solutions"] == ["7", "9"]
    assert calls[0]["extra"] == [{"index": 0}, {"index": 1}]
    assert torch.equal(out["reward_tensor"], torch.tensor([[1.0, 0.0], [0.0, 0.0]]))


def test_reward_batch_manager_failures_zero_the_whole_batch() -> None:
    release = threading.Event()

    def hangs(**kwargs: Any) -> list[float]:
        release.wait(10.0)
        return [1.0, 1.0]

    def wrong_length(**kwargs: Any) -> list[float]:
        return [1.0]

    batch = make_batch([[65], [66]], [TOK.encode("7"), TOK.encode("9")], ["7", "9"], width=2)
    try:
        out = BatchRewardManager(TOK, compute_score=hangs, timeout_s=0.2)(batch)
    finally:
        release.set()
    assert out["reward_metrics"]["reward/num_timeouts"] == 2.0
    assert torch.count_nonzero(out["reward_tensor"]) == 0
    out = BatchRewardManager(TOK, compute_score=wrong_length)(batch)
    assert out["reward_metrics"]["reward/num_errors"] == 2.0


@pytest.mark.parametrize("name", ["naive", "batch"])
def test_reward_manager_b25_overlong_penalty_on_every_path(name: str) -> None:
    """B25: lengths 15/16/17/18/20 with max 20, buffer 4 -> 1, 1, 0.75, 0.5, 0; prompt length ignored."""
    lengths = [15, 16, 17, 18, 20]
    responses = [TOK.encode("9" * (n - 1)) + [EOS] for n in lengths]
    truths = ["9" * (n - 1) for n in lengths]
    config = OverlongBufferConfig(enable=True, len=4, penalty_factor=1.0)
    rows = []
    for prompt_len in (3, 30):
        batch = make_batch([[65] * prompt_len] * 5, responses, truths, width=20)
        manager = create_reward_manager(name, TOK, overlong_buffer=config, max_response_length=20)
        out = manager(batch)
        rows.append(out["reward_tensor"])
        scores = out["reward_tensor"][torch.arange(5), torch.tensor(lengths) - 1]
        torch.testing.assert_close(scores, torch.tensor([1.0, 1.0, 0.75, 0.5, 0.0]), atol=1e-5, rtol=0)
        assert out["reward_extra_info"]["overlong_penalty"] == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0])
    assert torch.equal(rows[0], rows[1])


def test_reward_manager_b25_disabled_is_unchanged_without_max_length() -> None:
    """B25: enable=False needs no max_response_length and leaves rewards as scored."""
    batch = make_batch([[65]], [TOK.encode("9" * 19) + [EOS]], ["9" * 19], width=20)
    manager = NaiveRewardManager(TOK, overlong_buffer=OverlongBufferConfig(enable=False, len=0))
    out = manager(batch)
    assert out["reward_tensor"][0, 19].item() == 1.0
    assert "overlong_penalty" not in out["reward_extra_info"]
    with pytest.raises(ValueError, match="max_response_length"):
        NaiveRewardManager(TOK, overlong_buffer=OverlongBufferConfig(enable=True, len=4))


@pytest.fixture(scope="module")
def gpt2(shared_dir: Any) -> Any:
    path = shared_dir / "tokenizers" / "gpt2"
    if not path.is_dir():
        pytest.skip(f"{path} not found")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def _math_with_bonus(data_source: str, solution_str: str, ground_truth: str, extra_info: Any) -> float:
    return math_answer.compute_score(solution_str, ground_truth, format_score=0.1)


def test_reward_manager_b21_prompt_never_scored(gpt2: Any) -> None:
    """B21: a prompt with '\\boxed{}' or a few-shot '#### 5' earns no reward; the response does."""
    eos = gpt2.eos_token_id
    prompt = gpt2.encode("Please reason step by step, and put your final answer within \\boxed{}. What is 3+4?")
    responses = ["The answer is 7.", "3+4 = 7, so \\boxed{7}", "so \\boxed{8}"]
    batch = make_batch(
        [prompt] * 3, [gpt2.encode(r) + [eos] for r in responses], ["7"] * 3, data_source="math", pad_id=eos
    )
    out = NaiveRewardManager(gpt2, compute_score=_math_with_bonus)(batch)
    assert out["reward_tensor"].sum(-1).tolist() == pytest.approx([0.0, 1.0, 0.1])

    few_shot = gpt2.encode("Q: What is 2+3?\nA: 2+3=5\n#### 5\nQ: What is 1+5?\nA:")
    batch = make_batch([few_shot], [gpt2.encode(" 6") + [eos]], ["5"], data_source="openai/gsm8k", pad_id=eos)
    for name in ("naive", "batch"):
        out = create_reward_manager(name, gpt2)(batch)
        assert out["reward_tensor"].sum().item() == 0.0


def test_hung_scorer_does_not_stall_the_whole_batch():
    """After 3 consecutive timeouts the rest of the batch is counted as timed out at once."""
    import time as _time

    def hang(**_: Any) -> float:
        _time.sleep(3)
        return 1.0

    batch = make_batch([[1]] * 8, [[ord("5")]] * 8, ["5"] * 8)
    manager = NaiveRewardManager(TOK, compute_score=hang, timeout_s=0.2)
    start = _time.monotonic()
    out = manager(batch)
    assert _time.monotonic() - start < 1.5  # 3 waits of 0.2 s, not 8
    assert out["reward_metrics"]["reward/num_timeouts"] == 8.0
