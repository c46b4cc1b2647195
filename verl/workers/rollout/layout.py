"""The rollout batch layout every engine returns (``hf``, ``vllm`` and the agent loops), and its seeds.

One place for what the three paths must agree on:

- `check_prompts`: the input contract (left-padded prompts, ``rollout.prompt_length``,
  ``rollout.max_model_len``), one error line per violation;
- `prompt_position_ids`: the prompt's position ids (given, or from the attention mask);
- `assemble`: the output `DataProto` (tensors below, verl's ``min_global_steps`` /
  ``max_global_steps`` non-tensors), with one position-id rule for the response part;
- `row_seeds`: one sampling seed per row, from ``sample_seeds`` or ``meta_info["seed"]``, so
  the same seeded request samples the same tokens on every path; `derive_seeds` makes seeds
  from integer keys (the trainer's ``sample_seeds``, continuations, tool turns).

Output layout (B rows, prompt width P, response width R):

    prompts                  (B, P)      left-padded prompt ids
    responses                (B, R)      response ids, padding after each row's length
    input_ids                (B, P + R)  prompts then responses
    attention_mask           (B, P + R)  the prompt's mask, then 1 on the first ``lengths[i]`` response slots
    position_ids             (B, P + R)  the prompt's positions, then last prompt position + 1, + 2, ...
                                         (padding after a response continues the count)
    response_mask            (B, R)      1 on the tokens the loss uses (default: the first ``lengths[i]``)
    rollout_log_probs        (B, R)      float32 sampling log-probs, 0 elsewhere (absent when not computed)
    rollout_policy_versions  (B, R)      int64 policy version of each sampled token, -1 elsewhere
    rollout_finished         (B,)        bool, rows that need no more tokens (engines that can stop a call)
    sample_seeds             (B,)        passed through from the prompt batch when it has them
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from verl.algorithms.masked import compute_response_mask_from_lengths
from verl.protocol import DataProto
from verl.utils.torch_functional import position_ids_from_attention_mask
from verl.workers.rollout.partial import version_bounds

__all__ = ["assemble", "check_prompts", "derive_seeds", "prompt_position_ids", "row_seeds", "token_ids"]

_SEED_MASK = 2**63 - 1  # x & _SEED_MASK == x mod 2**63 for every int64 x (two's complement)


def derive_seeds(key: Sequence[int], n: int) -> torch.Tensor:
    """`(n,)` int64 seeds (non-negative, 63 bits) derived from ``key`` by `numpy.random.SeedSequence`:
    the same ``key`` always gives the same seeds, different keys independent ones (``sample_seeds``).

    Seed i depends on ``key`` and i only, not on ``n`` (``generate_state`` is prefix-stable).

    Args:
        key: non-negative integers.
        n: how many seeds.
    """
    state = np.random.SeedSequence(list(key)).generate_state(n, dtype=np.uint64)
    return torch.from_numpy((state >> np.uint64(1)).astype(np.int64))


def row_seeds(batch: Any, meta_info: Mapping[str, Any]) -> torch.Tensor | None:
    """Each row's sampling seed: the one rule of the ``hf`` engine, the ``vllm`` engine and the agent loops.

    - ``sample_seeds`` `(B,)` in the batch: those, reduced mod 2**63 (a negative int64 ``s``
      becomes ``s + 2**63``);
    - else ``meta_info["seed"]`` = S (an int): row i gets ``derive_seeds([S mod 2**63], B)[i]``,
      which depends on S and i only (not on B);
    - else None: the engine's own generator decides.

    Args:
        batch: the prompt batch's tensors (``DataProto.batch``: ``keys()`` and ``batch_size``).
        meta_info: the prompt batch's meta info.

    Returns:
        `(B,)` int64 seeds in [0, 2**63), or None.
    """
    if "sample_seeds" in batch.keys():
        return batch["sample_seeds"].long() & _SEED_MASK
    if meta_info.get("seed") is not None:
        return derive_seeds([int(meta_info["seed"]) % 2**63], int(batch.batch_size[0]))
    return None


def check_prompts(
    attention_mask: torch.Tensor, prompt_length: int | None, max_model_len: int | None, response_length: int
) -> None:
    """Reject prompts an engine must never receive (the data layer truncates).

    Args:
        attention_mask: `(B, P)` prompt mask, 1 on real tokens; B = 0 passes.
        prompt_length: ``rollout.prompt_length``, the longest prompt allowed (None = no limit).
        max_model_len: ``rollout.max_model_len``, the longest prompt + response (None = no limit).
        response_length: R, the response budget of the call.

    Raises:
        ValueError: prompts that are not left-padded (the last column not all 1), a prompt
            longer than ``prompt_length``, or longest prompt + R longer than ``max_model_len``.
    """
    if attention_mask.shape[0] == 0:
        return
    if not bool(attention_mask[:, -1].all()):
        raise ValueError("rollout engines need left-padded prompts: the last column of attention_mask must be all 1")
    longest = int(attention_mask.sum(dim=1).max())
    if prompt_length is not None and longest > int(prompt_length):
        raise ValueError(
            f"prompt of {longest} tokens > rollout.prompt_length {prompt_length}; truncate or filter in the data"
        )
    if max_model_len is not None and longest + response_length > int(max_model_len):
        raise ValueError(
            f"prompt {longest} + response {response_length} tokens > rollout.max_model_len {max_model_len}"
        )


def prompt_position_ids(attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The prompt's position ids `(B, P)`: ``position_ids`` when given, else
    `position_ids_from_attention_mask` (0 on left padding, then 0, 1, 2, ...).

    Raises:
        ValueError: ``position_ids`` that are not `(B, P)` (multi-dimensional rope ids, e.g.
            mrope's `(B, 3, P)`, are not supported yet by the rollout engines).
    """
    if position_ids is None:
        return position_ids_from_attention_mask(attention_mask)
    if position_ids.dim() != 2:
        raise ValueError(
            f"position_ids of shape {tuple(position_ids.shape)} are not supported yet by the rollout "
            "engines: only (batch, prompt_length) ids (no multi-dimensional / mrope ids)"
        )
    return position_ids


def assemble(
    prompts: DataProto,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    lengths: torch.Tensor,
    log_probs: torch.Tensor | None,
    versions: torch.Tensor,
    *,
    position_ids: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
    finished: torch.Tensor | None = None,
    version: int = 0,
    meta_info: dict[str, Any] | None = None,
    non_tensors: Mapping[str, Any] | None = None,
) -> DataProto:
    """The output batch in the layout of the module docstring.

    Args:
        prompts: the input batch: its non-tensors and ``sample_seeds`` pass through.
        prompt_ids: `(B, P)` left-padded prompt ids (their dtype is that of ``responses`` and ``input_ids``).
        prompt_mask: `(B, P)` prompt attention mask (its dtype is that of ``attention_mask``).
        responses: `(B, R)` response ids, padding after ``lengths``.
        lengths: `(B,)` response tokens per row (model and, in agent loops, tool / user tokens), 0..R.
        log_probs: `(B, R)` float32 sampling log-probs, or None (no ``rollout_log_probs``).
        versions: `(B, R)` int64 policy versions, -1 on tokens no policy sampled.
        position_ids: `(B, P)` prompt positions; None = from ``prompt_mask`` (`prompt_position_ids`).
        response_mask: `(B, R)` loss mask; None = 1 on the first ``lengths[i]`` slots.
        finished: `(B,)` bool ``rollout_finished``, or None (key absent).
        version: ``min_global_steps`` / ``max_global_steps`` of rows without a sampled token.
        meta_info: the output meta info.
        non_tensors: per-row arrays added to (or replacing) the prompt batch's non-tensors.

    Raises:
        ValueError: position ids that are not `(B, P)` (see `prompt_position_ids`).
    """
    position_ids = prompt_position_ids(prompt_mask, position_ids)
    responses = responses.to(prompt_ids.dtype)
    response_length = responses.shape[1]
    attended = compute_response_mask_from_lengths(lengths, response_length, dtype=torch.long)
    offsets = torch.arange(1, response_length + 1, dtype=position_ids.dtype)
    tensors = {
        "prompts": prompt_ids,
        "responses": responses,
        "input_ids": torch.cat([prompt_ids, responses], dim=1),
        "attention_mask": torch.cat([prompt_mask, attended.to(prompt_mask.dtype)], dim=1),
        "position_ids": torch.cat([position_ids, position_ids[:, -1:] + offsets], dim=1),
        "response_mask": attended if response_mask is None else response_mask,
        "rollout_policy_versions": versions,
    }
    if log_probs is not None:
        tensors["rollout_log_probs"] = log_probs
    if finished is not None:
        tensors["rollout_finished"] = finished
    # the seeds travel with the output, so that resubmitting a partial one continues the same draws
    keep = {"sample_seeds": prompts.batch["sample_seeds"]} if "sample_seeds" in prompts.batch.keys() else {}
    rows = dict(prompts.non_tensor_batch)
    rows.update(non_tensors or {})
    rows["min_global_steps"], rows["max_global_steps"] = version_bounds(versions, version)
    return DataProto.from_dict(tensors={**keep, **tensors}, non_tensors=rows, meta_info=dict(meta_info or {}))


def token_ids(ids: int | Sequence[int] | None) -> list[int]:
    """One token id, a list of them, or None (as ``eos_token_id`` is given in configs and model configs) -> a list."""
    if ids is None:
        return []
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]
