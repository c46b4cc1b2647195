"""SFT / DPO datasets: the loss mask covers exactly the response (or assistant) tokens."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from verl.data.dpo_dataset import PreferenceDataset, collate_pairs
from verl.data.sft_dataset import SFTDataset, collate_right_padded, tokenize_conversation, truncate

SHARED = Path(os.environ.get("VERL_SHARED_DIR", "/work/shared"))
QWEN = SHARED / "tokenizers" / "qwen2.5"


@pytest.fixture(scope="module")
def qwen():
    from transformers import AutoTokenizer

    if not QWEN.is_dir():
        pytest.skip("qwen2.5 tokenizer not available")
    return AutoTokenizer.from_pretrained(str(QWEN))


@pytest.fixture(scope="module")
def char_tok():
    from verl.modules.builtin import build_tokenizer

    return build_tokenizer()


def data_cfg(**kw):
    base = dict(
        prompt_key="prompt",
        response_key="response",
        prompt_dict_keys=[],
        response_dict_keys=[],
        multiturn=SimpleNamespace(enable=False, messages_key="messages", tools_key=None),
        max_length=256,
        truncation="error",
        chosen_key="chosen",
        rejected_key="rejected",
    )
    base.update(kw)
    return SimpleNamespace(**base)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_single_turn_mask_is_exactly_response_plus_eos(tmp_path, qwen) -> None:
    f = write_jsonl(tmp_path / "d.jsonl", [{"extra_info": {"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}}])
    ds = SFTDataset(
        [f],
        qwen,
        data_cfg(
            prompt_key="extra_info",
            response_key="extra_info",
            prompt_dict_keys=["question"],
            response_dict_keys=["answer"],
        ),
    )
    item = ds[0]
    ids, mask = item["input_ids"], item["loss_mask"].bool()
    assert qwen.decode(ids[mask]) == "2+3=5\n#### 5<|im_end|>"
    prompt = qwen.decode(ids[~mask])
    assert prompt.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    # the mask is one contiguous block at the end
    first = int(mask.nonzero()[0])
    assert mask[first:].all() and not mask[:first].any()


def test_multi_turn_mask_is_exactly_the_assistant_turns(qwen) -> None:
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Sunny."},
    ]
    ids, mask = tokenize_conversation(qwen, msgs)
    full = qwen.apply_chat_template(msgs, tokenize=False)
    assert qwen.decode(ids) == full
    # the masked tokens form exactly two runs, one per assistant turn
    runs, cur = [], []
    for t, m in zip(ids, mask):
        if m:
            cur.append(t)
        elif cur:
            runs.append(qwen.decode(cur))
            cur = []
    if cur:
        runs.append(qwen.decode(cur))
    assert runs == ["Hello!<|im_end|>\n", "Sunny.<|im_end|>\n"]


def test_multi_turn_tool_turns_are_masked(tmp_path, qwen) -> None:
    msgs = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "calc", "arguments": {"x": "2+2"}}]},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "4"},
    ]
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
    f = write_jsonl(tmp_path / "m.jsonl", [{"messages": msgs, "tools": tools}])
    cfg = data_cfg(multiturn=SimpleNamespace(enable=True, messages_key="messages", tools_key="tools"))
    item = SFTDataset([f], qwen, cfg)[0]
    ids, mask = item["input_ids"], item["loss_mask"].bool()
    trained = qwen.decode(ids[mask])
    assert "<tool_response>" not in trained and "# Tools" not in trained and "2+2?" not in trained
    assert trained == '<tool_call>\n{"name": "calc", "arguments": {"x": "2+2"}}\n</tool_call><|im_end|>\n4<|im_end|>\n'


def test_builtin_tokenizer_matches_warm_start_layout(char_tok) -> None:
    ds = SFTDataset(["builtin://arithmetic_sft/train"], char_tok, data_cfg(max_length=32))
    item = ds[0]
    ids, mask = item["input_ids"].tolist(), item["loss_mask"].tolist()
    row = ds.rows[0]
    assert char_tok.decode(ids) == f"<s>Q:{row['prompt']}\nA:{row['response']}</s>"
    n_resp = len(row["response"]) + 1
    assert mask == [0] * (len(ids) - n_resp) + [1] * n_resp and ids[-1] == char_tok.eos_token_id


def test_truncation_modes() -> None:
    ids, mask = list(range(10)), [0] * 6 + [1] * 4
    assert truncate(ids, mask, 4, "left", "r") == ([6, 7, 8, 9], [1, 1, 1, 1])
    assert truncate(ids, mask, 4, "right", "r") == ([0, 1, 2, 3], [0, 0, 0, 0])
    with pytest.raises(ValueError, match="max_length=4"):
        truncate(ids, mask, 4, "error", "row 3")


def test_collate_right_pads(char_tok) -> None:
    ds = SFTDataset(["builtin://arithmetic_sft/train"], char_tok, data_cfg())
    items = [ds[i] for i in range(8)]
    b = collate_right_padded(items, pad_id=0)
    lens = [len(it["input_ids"]) for it in items]
    assert b["input_ids"].shape == (8, max(lens))
    assert b["attention_mask"].sum(-1).tolist() == lens
    assert (b["loss_mask"] <= b["attention_mask"]).all()


def test_preference_pairs_mask_only_the_answer(char_tok, qwen) -> None:
    ds = PreferenceDataset(["builtin://arithmetic_preference/test"], char_tok, data_cfg())
    row, item = ds.rows[0], ds[0]
    a, b = map(int, row["prompt"][0]["content"].split("+"))
    assert row["chosen"] == str(a + b) and row["rejected"] != row["chosen"]
    for side in ("chosen", "rejected"):
        ids, mask = item[f"{side}_input_ids"], item[f"{side}_loss_mask"].bool()
        assert char_tok.decode(ids[mask]) == row[side] + "</s>"
    batch = collate_pairs([ds[i] for i in range(4)], pad_id=0)
    assert batch["chosen_input_ids"].shape[0] == 4 and batch["rejected_loss_mask"].shape[0] == 4
    # messages form: only the final assistant turn counts
    conv = {
        "prompt": [{"role": "user", "content": "1+1"}],
        "chosen": [{"role": "assistant", "content": "2"}],
        "rejected": [{"role": "assistant", "content": "3"}],
    }
    ds.rows = [conv]
    it = ds[0]
    assert qwen is not None
    assert char_tok.decode(it["chosen_input_ids"][it["chosen_loss_mask"].bool()]) == "2</s>"
    assert torch.equal(it["chosen_input_ids"][:-2], it["rejected_input_ids"][:-2])
