"""Preference-pair dataset for DPO: ``prompt``, ``chosen``, ``rejected`` -> two tokenized sequences.

Formats (per row; TRL's "standard" and "conversational" preference formats):

* text: ``prompt`` a string (rendered as one user message with the chat template and the
  generation prompt), ``chosen`` / ``rejected`` strings (``+ eos_token``);
* messages: ``prompt`` a list of chat messages, ``chosen`` / ``rejected`` either strings or lists
  of messages ending with the assistant answer (e.g. ``[{"role": "assistant", "content": "85"}]``).
  With messages the whole chat is rendered and only the final assistant turn is in the mask.

Each item holds ``chosen_{input_ids, attention_mask, position_ids, loss_mask}`` and the same with
``rejected_``, `(T,)` unpadded; ``loss_mask`` is 1 exactly on the response tokens. Column names
are ``data.prompt_key`` / ``data.chosen_key`` / ``data.rejected_key``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from verl.data.sft_dataset import (
    collate_right_padded,
    read_sft_rows,
    sequence_item,
    tokenize_conversation,
    tokenize_prompt_response,
    truncate,
)

__all__ = ["PreferenceDataset", "collate_pairs", "tokenize_pair_side"]


def tokenize_pair_side(tokenizer: Any, prompt: Any, answer: Any, where: str) -> tuple[list[int], list[int]]:
    """(ids, loss_mask) of prompt + one answer; the mask covers exactly the answer's tokens.

    Raises:
        ValueError: a prompt / answer of an unsupported type.
    """
    if isinstance(answer, list):
        if not isinstance(prompt, list):
            prompt = [{"role": "user", "content": prompt}]
        return tokenize_conversation(tokenizer, list(prompt) + list(answer), last_turn_only=True)
    if not isinstance(answer, str) or not isinstance(prompt, (str, list)):
        raise ValueError(f"{where}: prompt must be text or messages and each answer text or messages")
    return tokenize_prompt_response(tokenizer, prompt, answer)


class PreferenceDataset(Dataset):
    """Preference pairs from parquet / jsonl files or ``builtin://arithmetic_preference/<split>``.

    Args:
        files: data paths.
        tokenizer: the policy's tokenizer.
        config: the ``data`` section (`verl.config.sft_schema.SFTDataConfig`): ``prompt_key``,
            ``chosen_key``, ``rejected_key``, ``max_length``, ``truncation``.
    """

    def __init__(self, files: Sequence[str], tokenizer: Any, config: Any) -> None:
        self.tokenizer, self.config = tokenizer, config
        self.rows = read_sft_rows(files)
        if not self.rows:
            raise ValueError(f"no rows in {list(files)}")
        keys = (config.prompt_key, config.chosen_key, config.rejected_key)
        for i, row in enumerate(self.rows):
            missing = [k for k in keys if k not in row]
            if missing:
                raise ValueError(f"preference row {i}: missing column(s) {missing} (have {sorted(row)}; "
                                 "set data.prompt_key / chosen_key / rejected_key)")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        cfg, row, where = self.config, self.rows[index], f"preference row {index}"
        out: dict[str, torch.Tensor] = {}
        for side, key in (("chosen_", cfg.chosen_key), ("rejected_", cfg.rejected_key)):
            ids, mask = tokenize_pair_side(self.tokenizer, row[cfg.prompt_key], row[key], where)
            ids, mask = truncate(ids, mask, cfg.max_length, cfg.truncation, where)
            mask[0] = 0
            out.update({side + k: v for k, v in sequence_item(ids, mask).items()})
        return out


def collate_pairs(items: Sequence[dict[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad chosen and rejected sides separately into `(B, T_c)` / `(B, T_r)` tensors."""
    return {**collate_right_padded(items, pad_id, "chosen_"), **collate_right_padded(items, pad_id, "rejected_")}
