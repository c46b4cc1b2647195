"""SFT dataset: prompt / response rows (or chat conversations) -> token ids and a response loss mask.

Two row formats, chosen by ``data.multiturn.enable`` (verl's SFT keys):

* **single turn** — ``row[prompt_key]`` and ``row[response_key]``; when those columns hold dicts
  (verl's GSM8K parquet keeps ``extra_info: {question, answer}``), ``prompt_dict_keys`` /
  ``response_dict_keys`` name the nested key(s) to read, e.g. ``prompt_key=extra_info
  prompt_dict_keys=[question]``. The prompt is rendered as one user message with the
  tokenizer's chat template and the generation prompt (plain text when the tokenizer has no
  template); the response is ``response + eos_token``, tokenized separately (as verl does).
* **multi turn** — ``row[messages_key]`` is a list of ``{role, content}`` messages (and
  ``row[tools_key]`` optional tool schemas passed to the template). The conversation is rendered
  once per message boundary; an assistant turn's tokens are what the template adds after the
  generation prompt (for Qwen2.5: ``content<|im_end|>\\n``). Only those are in the loss mask;
  system, user and tool turns and the role headers are not.

Each item holds ``input_ids``, ``attention_mask``, ``position_ids`` and ``loss_mask``, all `(T,)`
unpadded; `collate_right_padded` right-pads a list of items into `(B, T)` tensors.
``loss_mask[t] = 1`` iff token t is a response / assistant token (a *target*: predicted from
position t − 1), so ``loss_mask[0]`` is always 0.

Sequences longer than ``data.max_length`` follow ``data.truncation``: ``error`` (raise, naming
the row), ``left`` (keep the last max_length tokens) or ``right`` (keep the first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from verl.utils.errors import DataError

__all__ = [
    "SFTDataset",
    "check_rows",
    "collate_right_padded",
    "extract_field",
    "read_labelled_sft_rows",
    "read_sft_rows",
    "tokenize_conversation",
    "tokenize_prompt_response",
    "truncate",
]

SFT_TRUNCATION_MODES = ("error", "left", "right")


def read_sft_rows(files: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of every file (parquet, jsonl or ``builtin://``), in order."""
    return read_labelled_sft_rows(files)[0]


def read_labelled_sft_rows(files: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of every file, in order, and one label per row naming its file and row
    (``"train.jsonl: row 3 (line 5)"``) for error messages.

    Built-in SFT / preference sets (`verl.data.builtin_preference`) are read here; other
    ``builtin://`` paths and files go through `verl.data.rl_dataset.read_rows`.

    Raises:
        DataError: a missing or unreadable file (naming it).
    """
    from verl.data.builtin_preference import is_builtin_supervised, load_builtin_supervised
    from verl.data.rl_dataset import read_rows

    rows: list[dict[str, Any]] = []
    labels: list[str] = []
    for path in files:
        if is_builtin_supervised(path):
            got = load_builtin_supervised(path)
            where = [f"row {i}" for i in range(len(got))]
        else:
            try:
                got, where = read_rows(path)
            except FileNotFoundError as e:
                raise DataError(str(e)) from None
        rows.extend(got)
        labels.extend(f"{path}: {w}" for w in where)
    return rows, labels


def extract_field(row: dict[str, Any], key: str, dict_keys: Sequence[str], where: str, setting: str = "") -> str:
    """``row[key]``, descending into nested dicts through ``dict_keys`` when the column holds a dict.

    ``setting`` (e.g. ``data.prompt_key``) is the config key that names the column, for messages.

    Raises:
        ValueError: a missing key, or a value that is not a string at the end.
    """
    if key not in row:
        raise DataError(f"{where}: no column {key!r} ({f'{setting}; ' if setting else ''}columns: {sorted(row)})")
    value = row[key]
    for k in dict_keys or ():
        if not isinstance(value, dict):
            break
        if k not in value:
            raise ValueError(f"{where}: column {key!r} has no key {k!r} (keys: {sorted(value)})")
        value = value[k]
    if not isinstance(value, str):
        raise ValueError(
            f"{where}: {key!r} must be a string (set data.*_dict_keys for dict columns), got {type(value).__name__}"
        )
    return value


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tokenize_prompt_response(
    tokenizer: Any, prompt: str | list[dict[str, Any]], response: str
) -> tuple[list[int], list[int]]:
    """(ids, loss_mask) of one prompt + response; the mask is 1 exactly on the response + eos tokens.

    Args:
        tokenizer: a Hugging Face tokenizer with an ``eos_token``.
        prompt: text (rendered as one user message) or a list of chat messages.
        response: the response text; ``eos_token`` is appended.
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if getattr(tokenizer, "chat_template", None):
        prompt_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        prompt_text = "".join(m["content"] for m in messages)
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has no eos_token: a response could never end")
    p_ids, r_ids = _encode(tokenizer, prompt_text), _encode(tokenizer, response + tokenizer.eos_token)
    return p_ids + r_ids, [0] * len(p_ids) + [1] * len(r_ids)


def tokenize_conversation(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: Any = None,
    last_turn_only: bool = False,
    template_kwargs: dict[str, Any] | None = None,
) -> tuple[list[int], list[int]]:
    """(ids, loss_mask) of a chat; the mask is 1 exactly on the assistant turns' own tokens.

    The template is rendered at every message boundary; an assistant turn's tokens are the text
    the template adds between ``render(messages[:i], add_generation_prompt=True)`` and
    ``render(messages[:i + 1])``. Each segment is tokenized on its own, so a mask boundary never
    falls inside a token.

    Args:
        tokenizer: tokenizer with a chat template.
        messages: ``{role, content}`` dicts (``tool_calls`` etc. passed through to the template).
        tools: tool schemas for the template (``data.multiturn.tools_key``), or None.
        last_turn_only: mask only the final assistant turn (DPO responses).
        template_kwargs: extra ``apply_chat_template`` keyword arguments (e.g. ``enable_thinking``).

    Raises:
        ValueError: no chat template, no assistant turn, or a template whose rendering of a
            prefix of the chat is not a prefix of the whole (it rewrites earlier turns).
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("multi-turn SFT needs a tokenizer with a chat template")
    kwargs = {**(template_kwargs or {}), **({"tools": tools} if tools else {})}

    def render(msgs: list[dict[str, Any]], gen: bool) -> str:
        return tokenizer.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False, **kwargs)

    assistant_idx = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not assistant_idx:
        raise ValueError("the conversation has no assistant turn to train on")
    trained = set(assistant_idx[-1:] if last_turn_only else assistant_idx)
    ids: list[int] = []
    mask: list[int] = []
    done = ""
    for i, m in enumerate(messages):
        pieces = []
        if m.get("role") == "assistant":
            pieces.append((render(messages[:i], True), 0))
        pieces.append((render(messages[: i + 1], False), 1 if i in trained else 0))
        for text, flag in pieces:
            if not text.startswith(done):
                raise ValueError(
                    "the chat template renders earlier turns differently once later turns are added; "
                    "per-turn loss masks need a prefix-stable template"
                )
            seg = _encode(tokenizer, text[len(done) :])
            ids += seg
            mask += [flag] * len(seg)
            done = text
    return ids, mask


def truncate(ids: list[int], mask: list[int], max_length: int, mode: str, where: str) -> tuple[list[int], list[int]]:
    """Apply ``data.truncation`` to a sequence longer than ``max_length`` tokens.

    Raises:
        ValueError: mode ``error`` and too long, or an unknown mode.
    """
    if mode not in SFT_TRUNCATION_MODES:
        raise ValueError(f"data.truncation must be one of {SFT_TRUNCATION_MODES}, got {mode!r}")
    if len(ids) <= max_length:
        return ids, mask
    if mode == "error":
        raise DataError(
            f"{where}: {len(ids)} tokens > data.max_length={max_length} "
            "(raise data.max_length or set data.truncation=left|right)"
        )
    if mode == "left":
        return ids[-max_length:], mask[-max_length:]
    return ids[:max_length], mask[:max_length]


class SFTDataset(Dataset):
    """Rows of SFT files, tokenized on access.

    Every row is tokenized once when the dataset is built (before any model is loaded), so a
    missing column (``data.prompt_key`` / ``response_key`` / ``multiturn.messages_key``) or a row
    longer than ``data.max_length`` under ``truncation=error`` is reported at once, naming the
    file and row.

    Args:
        files: parquet / jsonl paths or ``builtin://`` SFT sets.
        tokenizer: the model's tokenizer.
        config: the ``data`` section (`verl.config.sft_schema.SFTDataConfig`).

    Raises:
        DataError: no rows, or a row that cannot be tokenized (naming file, row and key).
    """

    def __init__(self, files: Sequence[str], tokenizer: Any, config: Any, max_samples: int = -1) -> None:
        self.tokenizer, self.config = tokenizer, config
        self.rows, self.labels = read_labelled_sft_rows(files)
        if max_samples > 0:  # data.train_max_samples / val_max_samples: the first N rows
            self.rows, self.labels = self.rows[:max_samples], self.labels[:max_samples]
        if not self.rows:
            raise DataError(f"no rows in {list(files)}")
        check_rows(self, len(self.rows))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        cfg, row, where = self.config, self.rows[index], self.labels[index]
        if cfg.multiturn.enable:
            if cfg.multiturn.messages_key not in row:
                raise DataError(
                    f"{where}: no column {cfg.multiturn.messages_key!r} (data.multiturn.messages_key; "
                    f"columns: {sorted(row)})"
                )
            tools = _tools_of(row.get(cfg.multiturn.tools_key) if cfg.multiturn.tools_key else None)
            ids, mask = tokenize_conversation(
                self.tokenizer,
                list(row[cfg.multiturn.messages_key]),
                tools,
                template_kwargs=_template_kwargs(cfg.multiturn, row),
            )
        else:
            prompt = extract_field(row, cfg.prompt_key, cfg.prompt_dict_keys, where, "data.prompt_key")
            response = extract_field(row, cfg.response_key, cfg.response_dict_keys, where, "data.response_key")
            ids, mask = tokenize_prompt_response(self.tokenizer, prompt, response)
        ids, mask = truncate(ids, mask, cfg.max_length, cfg.truncation, where)
        mask[0] = 0  # the first token has no predecessor, so it can never be a target
        return sequence_item(ids, mask)


def _tools_of(value: Any) -> Any:
    """A row's tool schemas: a JSON string is parsed; null fields (parquet's struct padding) are dropped."""
    import json

    if isinstance(value, str):
        value = json.loads(value) if value.strip() else None

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if v is not None}
        return [clean(v) for v in x] if isinstance(x, list) else x

    return clean(value) if value else None


def _template_kwargs(mt: Any, row: dict[str, Any]) -> dict[str, Any]:
    """``apply_chat_template_kwargs`` plus ``enable_thinking`` from ``row[enable_thinking_key]`` (or the default)."""
    kwargs = dict(getattr(mt, "apply_chat_template_kwargs", None) or {})
    key = getattr(mt, "enable_thinking_key", None)
    value = row.get(key) if key and row.get(key) is not None else getattr(mt, "enable_thinking_default", None)
    if value is not None:
        kwargs["enable_thinking"] = bool(value)
    return kwargs


def check_rows(dataset: Any, n: int) -> None:
    """Tokenize rows ``0..n-1`` of ``dataset`` once; the first failure becomes a `DataError`
    naming its file and row (``dataset.labels``).

    Raises:
        DataError: the first row whose tokenization raises ``ValueError`` / ``KeyError`` /
            ``TypeError``.
    """
    for i in range(n):
        try:
            dataset[i]
        except DataError:
            raise
        except (ValueError, KeyError, TypeError) as e:
            text = str(e)
            raise DataError(text if text.startswith(dataset.labels[i]) else f"{dataset.labels[i]}: {text}") from None


def sequence_item(ids: list[int], mask: list[int]) -> dict[str, torch.Tensor]:
    """Unpadded `(T,)` tensors of one sequence: ids, attention and loss masks, positions."""
    n = len(ids)
    return {
        "input_ids": torch.tensor(ids, dtype=torch.long),
        "attention_mask": torch.ones(n, dtype=torch.long),
        "position_ids": torch.arange(n, dtype=torch.long),
        "loss_mask": torch.tensor(mask, dtype=torch.long),
    }


def collate_right_padded(
    items: Sequence[dict[str, torch.Tensor]], pad_id: int, prefix: str = ""
) -> dict[str, torch.Tensor]:
    """Right-pad `(T_i,)` items into `(B, max T_i)` tensors (pad id for ids, 0 for masks / positions).

    Right padding keeps every real token at the same positions as unpadded, so with causal
    attention the padding width never changes a real token's logits.

    Args:
        items: `sequence_item` dicts (keys may carry ``prefix``).
        pad_id: the tokenizer's pad token id.
        prefix: key prefix (``chosen_`` / ``rejected_`` for preference pairs).
    """
    width = max(len(it[f"{prefix}input_ids"]) for it in items)
    out = {}
    for key in ("input_ids", "attention_mask", "position_ids", "loss_mask"):
        full = f"{prefix}{key}"
        fill = pad_id if key == "input_ids" else 0
        t = torch.full((len(items), width), fill, dtype=torch.long)
        for i, it in enumerate(items):
            t[i, : len(it[full])] = it[full]
        out[full] = t
    return out
