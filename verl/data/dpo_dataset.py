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

Both sides of a pair always start with the *same* prompt tokens: the prompt is tokenized once and
``data.truncation`` cuts the pair as one (`truncate_pair`): ``left`` drops the same leading prompt
tokens from both sides until the longer side fits (once the prompt is used up, responses keep
their first tokens), ``right`` keeps the first ``max_length`` tokens of each side, ``error``
refuses a side longer than ``max_length``. A pair that carries no preference signal (a side left
with no response token, or chosen and rejected identical after tokenization and truncation: its
DPO loss is ln 2 whatever the policy) is refused when the dataset is built, before any model is
loaded, naming the file and row: such rows are data errors to fix (or drop) at the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from verl.data.sft_dataset import (
    SFT_TRUNCATION_MODES,
    check_rows,
    collate_right_padded,
    read_labelled_sft_rows,
    sequence_item,
    tokenize_conversation,
    tokenize_prompt_response,
)
from verl.utils.errors import DataError

__all__ = ["PreferenceDataset", "collate_pairs", "tokenize_pair", "tokenize_pair_side", "truncate_pair"]


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


def _split(ids: list[int], mask: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, response ids, response mask): the prompt is everything before the first target."""
    start = mask.index(1) if 1 in mask else len(ids)
    return ids[:start], ids[start:], mask[start:]


def truncate_pair(
    prompt: list[int], responses: Sequence[list[int]], max_length: int, mode: str, where: str
) -> tuple[list[int], list[list[int]]]:
    """Cut a shared prompt and its responses so that every ``prompt + response`` fits ``max_length``.

    Args:
        prompt: the prompt's token ids, `(P,)`, shared by every side.
        responses: each side's response ids, `(R_i,)`.
        max_length: tokens per side (``data.max_length``).
        mode: ``error`` | ``left`` (drop leading prompt tokens, the same on every side; responses
            longer than ``max_length`` alone keep their first tokens) | ``right`` (every side keeps
            its first ``max_length`` tokens).
        where: file and row, for messages.

    Returns:
        (the prompt every side now starts with, each side's response).

    Raises:
        DataError: ``error`` and a side too long; ValueError: an unknown mode.
    """
    if mode not in SFT_TRUNCATION_MODES:
        raise ValueError(f"data.truncation must be one of {SFT_TRUNCATION_MODES}, got {mode!r}")
    longest = len(prompt) + max(len(r) for r in responses)
    if longest <= max_length:
        return prompt, list(responses)
    if mode == "error":
        raise DataError(
            f"{where}: {longest} tokens > data.max_length={max_length} "
            "(raise data.max_length or set data.truncation=left|right)"
        )
    if mode == "left":
        prompt = prompt[min(longest - max_length, len(prompt)) :]
    else:
        prompt = prompt[:max_length]
    room = max_length - len(prompt)
    return prompt, [r[:room] for r in responses]


def tokenize_pair(
    tokenizer: Any, prompt: Any, chosen: Any, rejected: Any, max_length: int, truncation: str, where: str
) -> dict[str, torch.Tensor]:
    """One preference pair as `sequence_item` tensors prefixed ``chosen_`` / ``rejected_``.

    Raises:
        DataError: the two sides render different prompt tokens (e.g. one answer text, the other
            messages), a side too long under ``truncation=error``, a side with no response token
            left, or chosen and rejected identical (no preference signal).
    """
    sides = [_split(*tokenize_pair_side(tokenizer, prompt, answer, where)) for answer in (chosen, rejected)]
    if sides[0][0] != sides[1][0]:
        raise DataError(
            f"{where}: chosen and rejected render different tokens before their final answer (give both "
            "answers as text, or both as messages ending in one assistant turn after the same prompt)"
        )
    shared, responses = truncate_pair(sides[0][0], [s[1] for s in sides], max_length, truncation, where)
    out: dict[str, torch.Tensor] = {}
    for name, (_, _, r_mask), response in zip(("chosen", "rejected"), sides, responses):
        ids, mask = shared + response, [0] * len(shared) + r_mask[: len(response)]
        mask[0] = 0  # the first token has no predecessor, so it can never be a target
        if not any(mask):
            raise DataError(
                f"{where}: the {name} answer has no token left to train on after truncation to "
                f"data.max_length={max_length} (prompt {len(sides[0][0])} tokens); raise data.max_length "
                "or shorten the prompt"
            )
        out.update({f"{name}_{k}": v for k, v in sequence_item(ids, mask).items()})
    if responses[0] == responses[1]:
        raise DataError(
            f"{where}: chosen and rejected are the same {len(responses[0])} response tokens after "
            f"tokenization and truncation (data.max_length={max_length}): the pair has no preference "
            "signal (its DPO loss is ln 2 whatever the policy); remove the row"
        )
    return out


class PreferenceDataset(Dataset):
    """Preference pairs from parquet / jsonl files or ``builtin://arithmetic_preference/<split>``.

    Every pair is tokenized once when the dataset is built (module docstring: shared prompt,
    pairs without signal refused), before any model is loaded.

    Args:
        files: data paths.
        tokenizer: the policy's tokenizer.
        config: the ``data`` section (`verl.config.sft_schema.SFTDataConfig`): ``prompt_key``,
            ``chosen_key``, ``rejected_key``, ``max_length``, ``truncation``.

    Raises:
        DataError: no rows, a missing column or a pair `tokenize_pair` refuses (naming file and row).
    """

    def __init__(self, files: Sequence[str], tokenizer: Any, config: Any) -> None:
        self.tokenizer, self.config = tokenizer, config
        self.rows, self.labels = read_labelled_sft_rows(files)
        if not self.rows:
            raise DataError(f"no rows in {list(files)}")
        keys = {
            "data.prompt_key": config.prompt_key,
            "data.chosen_key": config.chosen_key,
            "data.rejected_key": config.rejected_key,
        }
        for row, label in zip(self.rows, self.labels):
            missing = [f"{v!r} ({k})" for k, v in keys.items() if v not in row]
            if missing:
                raise DataError(f"{label}: missing column(s) {', '.join(missing)} (columns: {sorted(row)})")
        check_rows(self, len(self.rows))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        cfg, row = self.config, self.rows[index]
        return tokenize_pair(
            self.tokenizer,
            row[cfg.prompt_key],
            row[cfg.chosen_key],
            row[cfg.rejected_key],
            cfg.max_length,
            cfg.truncation,
            self.labels[index],
        )


def collate_pairs(items: Sequence[dict[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad chosen and rejected sides separately into `(B, T_c)` / `(B, T_r)` tensors."""
    return {**collate_right_padded(items, pad_id, "chosen_"), **collate_right_padded(items, pad_id, "rejected_")}
