"""RL prompt dataset: verl-schema rows -> chat-templated, left-padded prompt tensors.

A row (parquet, jsonl or a built-in task) holds::

    data_source   str                          routes the sample to its reward scorer
    prompt        list[{role: str, content: str}]  chat messages (column name = data.prompt_key)
    ability       str                          optional task family, e.g. "math"
    reward_model  {style: str, ground_truth}   ground_truth is what the scorer compares with
    extra_info    dict                         optional; extra_info["index"] is the sample id

Every row is validated and every prompt is rendered and tokenized when the dataset is built, so a
malformed row or an overlong prompt fails before any model is loaded, with the file and row named.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset

from verl.config.schema import DataConfig
from verl.data.tokenizer import BUILTIN_SCHEME
from verl.utils.errors import DataError
from verl.utils.torch_functional import position_ids_from_attention_mask


TRUNCATION_MODES = ("error", "left", "right", "middle")
logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ reading
def _read_builtin(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    spec = path[len(BUILTIN_SCHEME) :]
    task, _, split = spec.partition("/")
    if not task or not split:
        raise ValueError(f"built-in data path must be 'builtin://<task>/<split>', got {path!r}")
    from verl.data.builtin_task import load_builtin_rows

    rows = load_builtin_rows(task, split)
    return rows, [f"row {i}" for i in range(len(rows))]


def _read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    labels: list[str] = []
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path}: line {line_no}: not valid UTF-8 (byte {raw[e.start]:#04x} at column "
                    f"{e.start + 1}); data files must be UTF-8 encoded"
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: row {len(rows)} (line {line_no}): invalid JSON: {e}") from e
            rows.append(row)
            labels.append(f"row {len(labels)} (line {line_no})")
    return rows, labels


def read_rows(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Read every row of one data file.

    Args:
        path: a ``.parquet`` file, a ``.jsonl``/``.json`` file (one JSON object per line), or
            ``builtin://<task>/<split>`` (rows from `verl.data.builtin_task.load_builtin_rows`).

    Returns:
        The rows as dicts, and one location label per row (``"row 3"``, or ``"row 3 (line 5)"``
        for jsonl) used in error messages.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: unknown extension; `DataError` (a ValueError) for a jsonl line that is
            not UTF-8 or not valid JSON, naming the file and line.
    """
    if path.startswith(BUILTIN_SCHEME):
        return _read_builtin(path)
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    if p.suffix == ".parquet":
        rows = pq.read_table(p).to_pylist()
        return rows, [f"row {i}" for i in range(len(rows))]
    if p.suffix in (".jsonl", ".json"):
        return _read_jsonl(p)
    raise ValueError(f"{path}: unsupported data file type {p.suffix!r} (expected .parquet, .jsonl or builtin://)")


# ------------------------------------------------------------------------------------ validation
def prompt_error(row: dict[str, Any], prompt_key: str = "prompt") -> str | None:
    """Say what is wrong with a row's chat messages (a non-empty list of ``{role, content}``), or None."""
    prompt = row.get(prompt_key)
    if not isinstance(prompt, list) or not prompt:
        return f"field '{prompt_key}' must be a non-empty list of {{role, content}} messages, got {prompt!r:.80}"
    for j, msg in enumerate(prompt):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or not isinstance(msg.get("content"), str):
            return f"field '{prompt_key}[{j}]' must be {{'role': str, 'content': str}}, got {msg!r:.80}"
    return None


def render_prompts(
    tokenizer: Any,
    conversations: list[list[dict[str, str]]],
    chat_template_kwargs: dict[str, Any],
    processor: Any = None,
) -> list[list[int]]:
    """Chat-template and tokenize prompts, exactly as the rollout engine will see them.

    The template is rendered to text (which already holds any BOS it needs) and encoded with
    ``add_special_tokens=False``, so BOS appears once. ``processor``: a
    multimodal processor whose ``apply_chat_template`` renders the text instead.

    Returns:
        One list of token ids per conversation (unpadded, untruncated).
    """
    templater = processor if processor is not None else tokenizer
    texts = templater.apply_chat_template(
        conversations, add_generation_prompt=True, tokenize=False, **chat_template_kwargs
    )
    if isinstance(texts, str):
        texts = [texts]
    return [list(x) for x in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def row_error(row: Any, prompt_key: str = "prompt") -> str | None:
    """Say what is wrong with one row, or None when it follows verl's RL schema.

    Args:
        row: one record as read from the file.
        prompt_key: name of the column holding the chat messages.

    Returns:
        A message naming the offending field, or None.
    """
    if not isinstance(row, dict):
        return f"row is a {type(row).__name__}, expected an object"
    if not isinstance(row.get("data_source"), str):
        return f"field 'data_source' must be a string, got {row.get('data_source')!r}"
    err = prompt_error(row, prompt_key)
    if err is not None:
        return err
    rm = row.get("reward_model")
    if not isinstance(rm, dict) or rm.get("ground_truth") is None:
        return f"field 'reward_model.ground_truth' is missing (reward_model = {rm!r:.80})"
    if row.get("ability") is not None and not isinstance(row["ability"], str):
        return f"field 'ability' must be a string, got {row['ability']!r}"
    if row.get("extra_info") is not None and not isinstance(row["extra_info"], dict):
        return f"field 'extra_info' must be an object, got {row['extra_info']!r:.80}"
    return None


def validate_rows(rows: Sequence[Any], labels: Sequence[str], source: str, prompt_key: str = "prompt") -> None:
    """Check every row; the first bad one raises.

    One Python pass over rows already materialised for the dataset: ~1 µs per row (7.5k GSM8K
    rows in a few ms), so no columnar fast path is needed.

    Raises:
        ValueError: naming the file, the row (and jsonl line) and the field.
    """
    for row, label in zip(rows, labels):
        err = row_error(row, prompt_key)
        if err is not None:
            raise DataError(f"{source}: {label}: {err}")


# ------------------------------------------------------------------------------------ tensors
def truncate_prompt(ids: list[int], max_length: int, mode: str) -> list[int]:
    """Cut a tokenized prompt to ``max_length`` tokens.

    Args:
        ids: prompt token ids, ``len(ids) > max_length``.
        max_length: data.max_prompt_length.
        mode: ``left`` keeps the last tokens, ``right`` the first, ``middle`` the first
            ``max_length // 2`` and the last ``max_length - max_length // 2``.

    Returns:
        The kept ids (max 8, ids 1..12: left 5..12, right 1..8, middle [1..4, 9..12]).

    Raises:
        ValueError: mode ``error`` (message says ``len > max``) or an unknown mode.
    """
    if len(ids) <= max_length:
        return list(ids)
    if mode == "left":
        return list(ids[-max_length:])
    if mode == "right":
        return list(ids[:max_length])
    if mode == "middle":
        head = max_length // 2
        tail = max_length - head
        return list(ids[:head]) + (list(ids[-tail:]) if tail else [])
    if mode == "error":
        raise ValueError(f"prompt has {len(ids)} tokens > data.max_prompt_length {max_length}")
    raise ValueError(f"unknown data.truncation {mode!r}; expected one of {TRUNCATION_MODES}")


def left_pad(ids: list[int], max_length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad one prompt to ``max_length``.

    The mask is built from the prompt's length, never from token values, so a prompt token equal
    to the pad id (pad == eos) keeps its attention.

    Returns:
        ``input_ids``, ``attention_mask``, ``position_ids``, each ``(P,)`` long with P = max_length.
    """
    n_pad = max_length - len(ids)
    if n_pad < 0:
        raise ValueError(f"prompt has {len(ids)} tokens > max_length {max_length}")
    input_ids = torch.tensor([pad_id] * n_pad + list(ids), dtype=torch.long)
    attention_mask = torch.cat([torch.zeros(n_pad, dtype=torch.long), torch.ones(len(ids), dtype=torch.long)])
    return input_ids, attention_mask, position_ids_from_attention_mask(attention_mask)


def pad_token_id(tokenizer: Any) -> int:
    """The tokenizer's pad id; without one, its eos id (as verl does), else 0."""
    for tid in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if tid is not None:
            return int(tid)
    return 0


# ------------------------------------------------------------------------------------ dataset
class RLHFDataset(Dataset):
    """Prompts for RL rollouts, tokenized with the chat template and left-padded.

    Args:
        data_files: one path or a list (parquet, jsonl, ``builtin://<task>/<split>``).
        tokenizer: a Hugging Face tokenizer with a chat template.
        config: the ``data`` section of the config.
        processor: optional multimodal processor; when given, its ``apply_chat_template`` renders
            the prompt text (text-only prompts; the ids still come from ``tokenizer``).
        tool_schemas: the OpenAI function schemas of ``data.tool_config_path`` (as verl's
            dataset loads them). With ``data.filter_overlong_prompts`` a prompt's length is
            measured with them rendered by the chat template (``apply_chat_template(...,
            tools=...)``), which is what a tool agent loop sends to the model; the prompt ids
            kept (the single-turn rollout's input) are rendered without them. None: no tools.

    Raises:
        ValueError: a malformed row (file, row and field named), an overlong prompt under
            ``truncation=error`` (file, row, ``len > max``), an unknown truncation mode, or no rows.
    """

    def __init__(
        self,
        data_files: str | Sequence[str],
        tokenizer: Any,
        config: DataConfig,
        processor: Any = None,
        tool_schemas: list[dict[str, Any]] | None = None,
    ) -> None:
        if config.truncation not in TRUNCATION_MODES:
            raise ValueError(f"unknown data.truncation {config.truncation!r}; expected one of {TRUNCATION_MODES}")
        self.files = [data_files] if isinstance(data_files, str) else list(data_files)
        self.tokenizer = tokenizer
        self.processor = processor
        self.config = config
        self.tool_schemas = tool_schemas
        self.pad_id = pad_token_id(tokenizer)
        self.rows: list[dict[str, Any]] = []
        self.prompt_ids: list[list[int]] = []
        self.num_filtered = 0
        for path in self.files:
            self._add_file(path)
        self.has_agent_name = any(row.get("agent_name") for row in self.rows)
        if not self.rows:
            raise ValueError(f"no prompts left in {self.files} (filtered as overlong: {self.num_filtered})")

    def render(self, conversations: list[list[dict[str, str]]]) -> list[list[int]]:
        """`render_prompts` with this dataset's tokenizer, processor and ``data.apply_chat_template_kwargs``."""
        return render_prompts(self.tokenizer, conversations, self.config.apply_chat_template_kwargs, self.processor)

    def _render_with_tools(self, conversations: list[list[dict[str, str]]]) -> list[list[int]]:
        """`render` with ``tools=tool_schemas`` added to the chat-template keywords."""
        kwargs = {**self.config.apply_chat_template_kwargs, "tools": self.tool_schemas}
        return render_prompts(self.tokenizer, conversations, kwargs, self.processor)

    def _add_file(self, path: str) -> None:
        rows, labels = read_rows(path)
        key = self.config.prompt_key
        validate_rows(rows, labels, path, key)
        conversations = [row[key] for row in rows]
        all_ids = self.render(conversations) if rows else []
        max_len = self.config.max_prompt_length
        filtering = self.config.filter_overlong_prompts
        # verl's filter measures the prompt with the tool schemas rendered, as the tool agent loop renders it
        lengths = (
            [len(x) for x in self._render_with_tools(conversations)]
            if filtering and self.tool_schemas and rows
            else [len(x) for x in all_ids]
        )
        filtered_before = self.num_filtered
        for pos, (row, label, ids, length) in enumerate(zip(rows, labels, all_ids, lengths)):
            if filtering and length > max_len:
                self.num_filtered += 1
                continue
            if len(ids) > max_len:
                try:
                    ids = truncate_prompt(ids, max_len, self.config.truncation)
                except ValueError as e:
                    raise ValueError(
                        f"{path}: {label}: {e} (set data.truncation=left|right|middle or "
                        "data.filter_overlong_prompts=true)"
                    ) from e
            extra = dict(row.get("extra_info") or {})
            extra.setdefault("index", pos)
            self.rows.append({**row, "extra_info": extra})
            self.prompt_ids.append(ids)
        if self.num_filtered > filtered_before:
            logger.warning(
                "%s: filtered %d of %d prompts longer than data.max_prompt_length=%d%s",
                path,
                self.num_filtered - filtered_before,
                len(rows),
                max_len,
                " (tool schemas rendered)" if self.tool_schemas else "",
            )

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: int) -> dict[str, Any]:
        """One sample.

        Returns:
            ``input_ids``, ``attention_mask``, ``position_ids``: ``(P,)`` long, P =
            data.max_prompt_length, left-padded; ``raw_prompt_ids``: unpadded list of ids (what the
            rollout engine receives); ``data_source``, ``reward_model``, ``extra_info``, ``index``,
            ``ability``; ``raw_prompt`` (the messages) when data.return_raw_chat; ``agent_name`` when
            any row of the dataset has one; ``full_prompts`` (the chat-templated prompt text) when
            data.return_full_prompt.
        """
        row = self.rows[item]
        ids = self.prompt_ids[item]
        input_ids, attention_mask, position_ids = left_pad(ids, self.config.max_prompt_length, self.pad_id)
        sample: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "raw_prompt_ids": list(ids),
            "data_source": row["data_source"],
            "reward_model": dict(row["reward_model"]),
            "extra_info": dict(row["extra_info"]),
            "index": row["extra_info"]["index"],
            "ability": row.get("ability") or "unknown",
        }
        if self.config.return_raw_chat:
            sample["raw_prompt"] = [dict(m) for m in row[self.config.prompt_key]]
        if self.has_agent_name:  # verl's column choosing the row's agent loop (None = the default)
            sample["agent_name"] = row.get("agent_name")
        if getattr(self.config, "return_full_prompt", False):  # the templated prompt text
            sample["full_prompts"] = self.tokenizer.decode(ids, skip_special_tokens=False)
        return sample
