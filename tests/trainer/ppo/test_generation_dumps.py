"""One writer for ``trainer.rollout_data_dir`` and ``trainer.validation_data_dir``: the same multi-turn
batch dumped by the training step and by the validation pass gives the same rows."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import torch

from verl.commands.viewer.data import load_dump, pack
from verl.modules.builtin import load_builtin_tokenizer
from verl.protocol import DataProto
from verl.trainer.ppo.dumps import _jsonable, dump_rollout_data
from verl.trainer.ppo.val_loop import run_validation

P, R = 3, 8


def _generated(tok) -> DataProto:
    """B=2, P=3 left-padded, R=8 right-padded. Row 0 is two model turns around a tool turn
    (response_mask 0 on the tool's "=7"); row 1 is one model turn."""
    pad = tok.pad_token_id
    model_a, tool, model_b = tok.encode("ab"), tok.encode("=7"), tok.encode("c")
    prompts = [tok.encode("Q:")[-2:], tok.encode("Q:1")[-3:]]
    responses = [model_a + tool + model_b, tok.encode("xy")]
    prompt_t, resp_t = torch.full((2, P), pad), torch.full((2, R), pad)
    attn = torch.zeros(2, P + R, dtype=torch.long)
    rmask = torch.zeros(2, R, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt_t[i, P - len(p) :] = torch.tensor(p)
        attn[i, P - len(p) : P] = 1
        resp_t[i, : len(r)] = torch.tensor(r)
        attn[i, P : P + len(r)] = 1
        rmask[i, : len(r)] = 1
    rmask[0, len(model_a) : len(model_a) + len(tool)] = 0
    calls = np.empty(2, dtype=object)
    calls[0], calls[1] = [{"name": "calc", "arguments": {"expr": "3+4"}, "status": "ok"}], []
    messages = np.empty(2, dtype=object)
    messages[0] = [
        {"role": "user", "content": "Q:"},
        {"role": "assistant", "content": "ab"},
        {"role": "tool", "content": "=7"},
        {"role": "assistant", "content": "c"},
    ]
    messages[1] = [{"role": "user", "content": "Q:1"}, {"role": "assistant", "content": "xy"}]
    return DataProto.from_dict(
        tensors={"prompts": prompt_t, "responses": resp_t, "attention_mask": attn, "response_mask": rmask},
        non_tensors={
            "num_turns": np.array([4, 2]),
            "tool_calls": calls,
            "messages": messages,
            "turn_scores": np.array([[0.5], []], dtype=object),
        },
    )


def _dataset_rows() -> dict[str, object]:
    return {
        "data_source": np.array(["calc", "calc"], dtype=object),
        "reward_model": np.array([{"ground_truth": "7"}, {"ground_truth": np.int64(1)}], dtype=object),
    }


def _scores() -> torch.Tensor:
    s = torch.zeros(2, R)
    s[0, 4], s[1, 1] = 1.0, 0.25
    return s


def _training_batch(tok) -> DataProto:
    batch = DataProto.from_dict(
        non_tensors={
            **_dataset_rows(),
            "uid": np.array(["val-0-0", "val-0-1"], dtype=object),
            "acc": np.array([True, False], dtype=object),
        }
    )
    batch.union(_generated(tok))
    batch.batch["token_level_scores"] = _scores()
    return batch


def _validation_dump(tok, tmp_path, global_step: int) -> list[dict]:
    """Run the validation pass on the same rows with a generation and a reward stand-in."""
    gen = _generated(tok)
    parts = SimpleNamespace(
        tokenizer=tok,
        val_dataloader=[{**_dataset_rows(), "dummy": torch.zeros(2)}],
        actor_rollout_wg=SimpleNamespace(generate_sequences=lambda seeded: gen),
        val_reward_fn=lambda batch, return_dict: {
            "reward_tensor": _scores(),
            "reward_extra_info": {"acc": [True, False]},
        },
    )
    cfg = SimpleNamespace(
        actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(val_kwargs=SimpleNamespace(n=1))),
        trainer=SimpleNamespace(
            log_val_generations=1, validation_data_dir=str(tmp_path / "val"), output_dir=str(tmp_path)
        ),
    )
    metrics = run_validation(
        parts, cfg, global_step, lambda batch, validate: batch.select(batch_keys=["dummy"]), lambda g, purpose: g
    )
    assert metrics["val-aux/calc/reward/mean@1"] == 0.625 and metrics["val-core/calc/acc/mean@1"] == 0.5
    rows = [json.loads(x) for x in (tmp_path / "val" / f"{global_step}.jsonl").read_text().splitlines()]
    (sample,) = [json.loads(x) for x in (tmp_path / "val_generations.jsonl").read_text().splitlines()]
    assert sample in [{"step": global_step, **{k: r[k] for k in ("input", "output", "score")}} for r in rows]
    return rows


def test_training_and_validation_dumps_of_a_multi_turn_batch_are_the_same_rows(tmp_path):
    tok = load_builtin_tokenizer()
    jsonl, _ = dump_rollout_data(_training_batch(tok), tok, tmp_path / "train", 3, score_keys=["acc"], policy_version=2)
    train = [json.loads(x) for x in jsonl.read_text().splitlines()]
    val = _validation_dump(tok, tmp_path, global_step=2)
    assert [list(r) for r in train] == [list(r) for r in val]  # same keys, same order
    assert [r["output"] for r in train] == [r["output"] for r in val] == ["ab=7c", "xy"]
    # the output keeps the tool turn the response mask leaves out (the reward manager decodes "abc")
    gen = _generated(tok)
    scored = gen.batch["responses"][0][gen.batch["response_mask"][0].bool()]
    assert tok.decode(scored, skip_special_tokens=True) == "abc"
    assert [r["step"] for r in train] == [3, 3] and [r["step"] for r in val] == [2, 2]
    for t, v in zip(train, val):
        assert {k: x for k, x in t.items() if k != "step"} == {k: x for k, x in v.items() if k != "step"}
    assert train[0] == {
        "input": "Q:",
        "output": "ab=7c",
        "gts": "7",
        "score": 1.0,
        "step": 3,
        "uid": "val-0-0",
        "data_source": "calc",
        "num_turns": 4,
        "tool_calls": [{"name": "calc", "arguments": {"expr": "3+4"}, "status": "ok"}],
        "messages": gen.non_tensor_batch["messages"][0],
        "turn_scores": [0.5],
        "prompt_length": 2,
        "response_length": 5,
        "truncated": False,
        "policy_version": 2,
        "acc": True,
    }
    assert train[1]["gts"] == 1 and train[1]["score"] == 0.25 and train[1]["input"] == "Q:1"


def test_the_viewer_and_reward_test_read_both_kinds(tmp_path):
    from verl.commands.reward_test import _dump_probes

    tok = load_builtin_tokenizer()
    dump_rollout_data(_training_batch(tok), tok, tmp_path / "train", 3, score_keys=["acc"], policy_version=2)
    _validation_dump(tok, tmp_path, global_step=2)
    for kind, has_tokens in (("train", True), ("val", False)):
        (sd,) = load_dump(tmp_path / kind)
        assert (sd.tokens is not None) == has_tokens and len(sd.rows) == 2
        meta, chunks, _ = pack([sd])
        assert len(chunks) == 2 and meta["hasTokens"] == has_tokens
        probes = _dump_probes(str(tmp_path / kind))
        assert [(p.source, p.solution_str, p.ground_truth, p.logged_score) for p in probes] == [
            ("calc", "ab=7c", "7", 1.0),
            ("calc", "xy", 1, 0.25),
        ]


def test_jsonable_gives_json_types():
    value = {"a": np.arange(3), 1: (np.float32(0.5), torch.tensor([2])), "b": [np.bool_(True), None, object]}
    out = _jsonable(value)
    assert out == {"a": [0, 1, 2], "1": [0.5, [2]], "b": [True, None, str(object)]}
    assert json.loads(json.dumps(out)) == out
