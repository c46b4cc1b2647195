"""One scoring core and one failure policy (`verl.reward.scoring`) for the managers, ``verl eval`` and the
trainer; every registered manager built by the same call (`verl.trainer.ppo.reward.load_reward_manager`)."""

from __future__ import annotations

import copy
import inspect
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from test_reward_managers import TOK, make_batch

from verl.commands.evaluate import evaluate
from verl.config import load_config
from verl.config.offline import load_eval_config
from verl.reward import REWARD_MANAGERS, NaiveRewardManager, OverlongBufferConfig, load_custom_reward_fn
from verl.reward.scoring import FailureCounts, RewardFailureError, RewardFailurePolicy, contain, score_calls
from verl.reward.timeout import CallOutcome, TimeoutCaller
from verl.reward.verl_managers import VerlManagerAdapter, register
from verl.trainer.ppo.reward import build_reward_fns, load_reward_manager, overlong_settings, training_scorer
from verl.trainer.ppo.trainer import RLTrainer

SCORER = """
import time

def score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "raise":
        raise RuntimeError("broken scorer")
    if solution_str == "hang":
        time.sleep(1.5)
    if solution_str == "nan":
        return float("nan")
    return float(solution_str == ground_truth)
"""
# row: response (ground truth 1) -> score, failure kind
# 0 "1" -> 1.0; 1 "raise" -> 0, error; 2 "hang" -> 0, timeout (0.3 s deadline); 3 "nan" -> 0, error + non-finite;
# 4 "2" -> 0.0
RESPONSES = ["1", "raise", "hang", "nan", "2"]
EXPECTED = FailureCounts(total=5, errors=2, nonfinite=1, timeouts=1, skipped=0)
TIMEOUT_S = 0.3


@pytest.fixture()
def scorer_file(tmp_path: Path) -> Path:
    path = tmp_path / "scorer.py"
    path.write_text(SCORER)
    return path


def _same_counts(counts: FailureCounts, expected: FailureCounts) -> None:
    got = (counts.total, counts.errors, counts.nonfinite, counts.timeouts, counts.skipped)
    assert got == (expected.total, expected.errors, expected.nonfinite, expected.timeouts, expected.skipped)


def _eval_file(tmp_path: Path, responses: list[str], name: str = "gen.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(
        "".join(
            json.dumps({"data_source": "a", "reward_model": {"ground_truth": "1"}, "responses": [r]}) + "\n"
            for r in responses
        )
    )
    return path


def _eval(data: Path, scorer_file: Path, log: Any = None) -> dict[str, float]:
    cfg = load_eval_config(
        None,
        [
            f"data.path={data}",
            f"custom_reward_function.path={scorer_file}",
            "custom_reward_function.name=score",
            f"reward_model.timeout_s={TIMEOUT_S}",
        ],
    )
    return evaluate(cfg, log=log or (lambda *_: None))


def _manager(scorer_file: Path) -> NaiveRewardManager:
    return NaiveRewardManager(TOK, compute_score=load_custom_reward_fn(str(scorer_file), "score"), timeout_s=TIMEOUT_S)


def _batch(responses: list[str]) -> Any:
    return make_batch(
        [[65]] * len(responses), [TOK.encode(r) for r in responses], ["1"] * len(responses), data_source="a"
    )


def test_score_calls_counts_by_hand(scorer_file: Path) -> None:
    fn = load_custom_reward_fn(str(scorer_file), "score")
    calls = [{"data_source": "a", "solution_str": r, "ground_truth": "1", "extra_info": {}} for r in RESPONSES]
    results, counts = score_calls(fn, calls, TimeoutCaller(TIMEOUT_S), lambda i: f"row {i}")
    assert [r.score for r in results] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert [r.status for r in results] == ["ok", "error", "timeout", "error", "ok"]
    _same_counts(counts, EXPECTED)
    assert counts.failed == 3 and counts.hung_at == ""
    # the first failure of each kind, in the order the kinds occurred, with where it happened
    assert counts.first == {
        "error": "row 1: RuntimeError('broken scorer')",
        "timeout": f"row 2: no result within {TIMEOUT_S} s",
        "nonfinite": "row 3: score is nan",
    }
    assert counts.metrics() == {"reward/num_errors": 2.0, "reward/num_nonfinite": 1.0, "reward/num_timeouts": 1.0}


def test_manager_and_verl_eval_give_the_same_counts(scorer_file: Path, tmp_path: Path) -> None:
    out = _manager(scorer_file)(_batch(RESPONSES))
    counts = out["reward_failures"]
    _same_counts(counts, EXPECTED)
    assert out["reward_metrics"] == counts.metrics()  # the manager's metrics are the same counts
    assert out["reward_tensor"].sum(-1).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert counts.first["error"] == "sample 1 (data_source='a'): RuntimeError('broken scorer')"
    logged: list[str] = []
    metrics = _eval(_eval_file(tmp_path, RESPONSES), scorer_file, logged.append)
    assert {k: metrics[k] for k in ("num_errors", "num_nonfinite", "num_timeouts")} == counts.metrics(prefix="")
    assert metrics["test_score/a"] == pytest.approx(1 / 5)
    # verl eval prints the first failure of each kind: the same message, the row of the file instead of the sample
    assert len(logged) == 3
    for line, kind in zip(logged, ("error", "timeout", "nonfinite"), strict=True):
        assert "gen.jsonl: row " in line and line.endswith(counts.first[kind].split("): ", 1)[1])
    assert logged[0].startswith("warning: 2 responses scored 0 (num_errors)")


def test_the_same_policy_stops_training_and_eval_on_a_scorer_that_always_fails(
    scorer_file: Path, tmp_path: Path
) -> None:
    responses = ["raise", "nan", "raise"]
    with pytest.raises(RewardFailureError, match=r"failed on every one of the 3 responses.*broken scorer"):
        _eval(_eval_file(tmp_path, responses), scorer_file)
    manager, batch = _manager(scorer_file), _batch(responses)
    trainer = SimpleNamespace(_reward_failures=RewardFailurePolicy(timeout_s=TIMEOUT_S))
    # training: contained for 2 steps, the 3rd failed step in a row raises (a RuntimeError)
    for _ in range(2):
        RLTrainer._check_reward_failures(trainer, manager(batch), len(batch))
    with pytest.raises(
        RuntimeError,
        match=r"failed \(raised or timed out\) on every sample for 3 consecutive steps; "
        r"in the last one, .*every one of the 3 samples.*sample 0 .*broken scorer",
    ):
        RLTrainer._check_reward_failures(trainer, manager(batch), len(batch))
    # one step that scores resets the count
    policy = RewardFailurePolicy()
    failing, fine = manager(batch)["reward_failures"], manager(_batch(["1", "raise", "2"]))["reward_failures"]
    for counts in (failing, failing, fine, failing, failing):
        policy.check(counts)
    assert policy.failed_steps == 2
    # the same rule with patience 1 raises on the manager's counts as verl eval does
    with pytest.raises(RewardFailureError, match="failed on every one of the 3 samples"):
        RewardFailurePolicy(patience=1).check(failing)


def test_the_same_policy_stops_training_and_eval_on_a_hung_scorer(scorer_file: Path, tmp_path: Path) -> None:
    responses = ["1", "hang", "hang", "hang", "1", "1"]
    start = time.perf_counter()
    with pytest.raises(
        RewardFailureError, match=r"timed out on 3 responses in a row, the last at .*gen.jsonl: row 3 \(line 4\)"
    ):
        _eval(_eval_file(tmp_path, responses), scorer_file)
    out = _manager(scorer_file)(_batch(responses))
    assert time.perf_counter() - start < 6 * 1.5  # the skipped calls were not waited for
    counts = out["reward_failures"]
    _same_counts(counts, FailureCounts(total=6, timeouts=5, skipped=2))
    assert counts.hung_at == "sample 3 (data_source='a')"
    assert out["reward_tensor"].sum(-1).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    policy = RewardFailurePolicy(timeout_s=TIMEOUT_S)
    assert policy.step_failed(counts) and counts.failed < counts.total  # hung, though not every sample failed
    policy.check(counts)
    policy.check(counts)
    with pytest.raises(
        RewardFailureError,
        match=r"failed on every sample or looked hung for 3 consecutive steps; .*"
        r"timed out on 3 samples in a row, the last at sample 3 .*now 0.3 s",
    ):
        policy.check(counts)


def test_contain_and_counts_arithmetic() -> None:
    outcomes = [
        CallOutcome("ok", {"score": 0.5, "acc": True}),
        CallOutcome("ok", "x"),
        CallOutcome("timeout", error="late"),
        CallOutcome("timeout", error="skipped", skipped=True),
    ]
    results, counts = contain(outcomes)
    assert [r.score for r in results] == [0.5, 0.0, 0.0, 0.0] and results[0].extras == {"acc": True}
    _same_counts(counts, FailureCounts(total=4, errors=1, timeouts=2, skipped=1))
    assert counts.hung_at == "call 2" and counts.first["error"].startswith("call 1: score is not a number")
    both = counts + FailureCounts(total=2, errors=1, nonfinite=1, first={"nonfinite": "x", "error": "y"})
    _same_counts(both, FailureCounts(total=6, errors=2, nonfinite=1, timeouts=2, skipped=1))
    assert both.first["error"] == counts.first["error"] and both.first["nonfinite"] == "x"
    assert FailureCounts.from_metrics({"reward/num_errors": 2.0, "reward/num_timeouts": 1.0}, 5) == FailureCounts(
        5, 2, 0, 1
    )
    assert not RewardFailurePolicy.step_failed(FailureCounts())  # an empty step is not a failed one
    with pytest.raises(ValueError, match="patience"):
        RewardFailurePolicy(patience=0)


class VerlStyleManager:
    """A manager in verl's convention: per-row ``compute_score``, reward on the last valid token."""

    def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source", scale=1.0, **kwargs):
        self.tokenizer, self.num_examine, self.compute_score, self.key = (
            tokenizer,
            num_examine,
            compute_score,
            reward_fn_key,
        )
        self.scale, self.kwargs = scale, kwargs

    def __call__(self, data, return_dict=False):
        reward = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        for i in range(len(data)):
            item = data[i]
            valid = int(item.batch["response_mask"].sum())
            text = self.tokenizer.batch_decode([item.batch["responses"][:valid].tolist()], skip_special_tokens=True)[0]
            score = self.compute_score(
                item.non_tensor_batch[self.key],
                text,
                item.non_tensor_batch["reward_model"]["ground_truth"],
                item.non_tensor_batch["extra_info"],
            )
            reward[i, valid - 1] = self.scale * float(score["score"] if isinstance(score, dict) else score)
        return {"reward_tensor": reward, "reward_extra_info": {}} if return_dict else reward


@pytest.fixture()
def verl_style_name():
    name = "test_scoring_verl_style"
    register(name)(VerlStyleManager)
    yield name
    REWARD_MANAGERS.remove(name)


def test_every_registered_manager_builds_through_load_reward_manager(verl_style_name: str) -> None:
    assert isinstance(REWARD_MANAGERS.get(verl_style_name), VerlManagerAdapter)
    assert {"naive", "dapo", "gdpo", "prime", "batch", verl_style_name} <= set(REWARD_MANAGERS.names())
    batch = make_batch([[65], [66]], [TOK.encode("7"), TOK.encode("9")], ["7", "8"], width=3)
    base = load_config(None, [])
    for name in REWARD_MANAGERS.names():
        for older in (True, False):  # verl's older key reward_model.reward_manager and the newer reward_manager.name
            cfg = copy.deepcopy(base)
            if older:
                cfg.reward_model.reward_manager = name
            else:
                cfg.reward_manager.name = name
            train, val = build_reward_fns(cfg, TOK)
            assert (train.num_examine, val.num_examine) == (0, 1), name
            for manager in (train, val):
                out = manager(batch, return_dict=True)
                assert torch.equal(out["reward_tensor"], torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])), name
    # the loader has no branch on names: the registry decides what is built
    source = inspect.getsource(load_reward_manager)
    assert not [name for name in REWARD_MANAGERS.names() if repr(name) in source or f'"{name}"' in source]
    assert "is_verl_manager" not in source


def test_a_manager_class_loaded_by_path_is_built_by_the_same_adapter(tmp_path: Path) -> None:
    path = tmp_path / "my_manager.py"
    path.write_text("import torch\n\n" + inspect.getsource(VerlStyleManager))
    cfg = load_config(
        None,
        [
            "reward_manager.source=importlib",
            f"reward_manager.module.path={path}",
            "reward_manager.module.name=VerlStyleManager",
            "+reward_model.reward_kwargs.scale=3.0",
        ],
    )
    train, val = build_reward_fns(cfg, TOK)
    assert type(train).__name__ == "VerlStyleManager" and (train.num_examine, val.num_examine, train.scale) == (
        0,
        1,
        3.0,
    )
    batch = make_batch([[65], [66]], [TOK.encode("7"), TOK.encode("9")], ["7", "8"], width=3)
    assert train(batch, return_dict=True)["reward_tensor"].sum(-1).tolist() == [3.0, 0.0]


def test_reward_kwargs_reach_the_scorer_or_the_verl_constructor(verl_style_name: str, scorer_file: Path) -> None:
    bonus = scorer_file.parent / "bonus.py"
    bonus.write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0, scale=None):\n"
        "    return float(solution_str == ground_truth) + bonus\n"
    )
    batch = _batch(["1", "2"])
    common = [f"custom_reward_function.path={bonus}", "custom_reward_function.name=score"]
    naive = load_reward_manager(load_config(None, [*common, "+reward_model.reward_kwargs.bonus=0.5"]), TOK)
    assert naive(batch)["reward_tensor"].sum(-1).tolist() == [1.5, 0.5]
    assert (
        training_scorer(load_config(None, [*common, "+reward_model.reward_kwargs.bonus=0.5"]))[1](
            data_source="a", solution_str="1", ground_truth="1"
        )
        == 1.5
    )
    verl = load_reward_manager(
        load_config(
            None, [*common, f"reward_model.reward_manager={verl_style_name}", "+reward_model.reward_kwargs.scale=2.0"]
        ),
        TOK,
    )
    assert verl.scale == 2.0 and verl.kwargs == {}  # a constructor keyword, not a scorer keyword
    assert verl(batch, return_dict=True)["reward_tensor"].sum(-1).tolist() == [2.0, 0.0]


def test_dapo_overlong_buffer_cfg_is_the_reward_model_overlong_buffer(verl_style_name: str) -> None:
    dapo = [
        "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4",
        "+reward_model.reward_kwargs.max_resp_len=20",
    ]
    schema = [
        "reward_model.overlong_buffer.enable=true",
        "reward_model.overlong_buffer.len=4",
        "data.max_response_length=20",
    ]
    expected = (OverlongBufferConfig(enable=True, len=4, penalty_factor=1.0), 20)
    dapo_cfg = load_config(None, dapo)
    assert overlong_settings(dapo_cfg) == overlong_settings(load_config(None, schema)) == expected
    assert overlong_settings(load_config(None, []))[0] == OverlongBufferConfig()
    # lengths 16 / 17 / 18 of 20 with a buffer of 4: penalties 0, -0.25, -0.5 (training only)
    responses = ["1" * 15 + "\x02", "1" * 16 + "\x02", "1" * 17 + "\x02"]
    batch = make_batch(
        [[65]] * 3,
        [TOK.encode(r) for r in responses],
        ["1" * 15, "1" * 16, "1" * 17],
        width=20,
        data_source="builtin/arithmetic",
    )
    for name in ("dapo", "naive"):
        dapo_cfg.reward_model.reward_manager = name
        train, val = build_reward_fns(dapo_cfg, TOK)
        assert train.overlong_buffer == expected[0] and train.max_response_length == 20
        assert train(batch)["reward_tensor"].sum(-1).tolist() == [
            1.0,
            0.75,
            0.5,
        ]  # the DAPO keys never reach the scorer
        assert val(batch)["reward_tensor"].sum(-1).tolist() == [1.0, 1.0, 1.0] and not val.overlong_buffer.enable
    # a verl-style class gets them back as verl's DAPO constructor keywords, in training
    train, val = build_reward_fns(load_config(None, [f"reward_model.reward_manager={verl_style_name}", *schema]), TOK)
    assert train.kwargs == {"overlong_buffer_cfg": expected[0], "max_resp_len": 20} and val.kwargs == {}
    assert OverlongBufferConfig.from_config({"enable": True, "len": "3"}) == OverlongBufferConfig(True, 3, 1.0)
    with pytest.raises(ValueError, match="overlong_buffer.len: must be in"):
        build_reward_fns(
            load_config(
                None,
                [
                    *dapo[:1],
                    "+reward_model.reward_kwargs.overlong_buffer_cfg.len=40",
                    "+reward_model.reward_kwargs.max_resp_len=20",
                ],
            ),
            TOK,
        )
