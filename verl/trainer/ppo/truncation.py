"""The trainer's truncated-completion stage (``actor_rollout_ref.actor.mask_truncated_completions``).

A response is *truncated* when the engine stopped it at the length limit: every one of its R
slots holds a real token (``attention_mask`` of the response part is 1 at slot R − 1) and that
last token is not an EOS id of the rollout (``meta_info["eos_token_id"]``). A response that ends
on EOS exactly at slot R − 1 is complete. (A stop string that ends exactly at the limit is not
told apart from a cut: it counts as truncated.)

The stage runs after advantages and the critic update, just before the actor update, so truncated
responses still count in group baselines (TRL's ``mask_truncated_completions``) and only leave
the policy loss; the loss denominators (global token counts) then count only the remaining tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from verl.protocol import DataProto

__all__ = ["mask_truncated_stage", "truncated_rows"]


def truncated_rows(
    responses: torch.Tensor, response_attention: torch.Tensor, eos_token_ids: Sequence[int]
) -> torch.Tensor:
    """`(B,)` bool: the rows cut at the length limit (see the module docstring).

    Args:
        responses: `(B, R)` response token ids.
        response_attention: `(B, R)` the response part of ``attention_mask`` (1 on real tokens).
        eos_token_ids: the rollout's EOS ids.
    """
    last = responses[:, -1]
    eos = torch.tensor(list(eos_token_ids), dtype=last.dtype, device=last.device)
    return (response_attention[:, -1] != 0) & ~torch.isin(last, eos)


def mask_truncated_stage(batch: DataProto, eos_token_ids: Sequence[int] | None) -> dict[str, float]:
    """Zero ``response_mask`` on truncated rows, in place; returns the fraction masked.

    Args:
        batch: trajectories with ``responses``, ``attention_mask`` and ``response_mask``.
        eos_token_ids: the rollout's EOS ids (``meta_info["eos_token_id"]``).

    Returns:
        ``{"response_length/masked_truncated_ratio": fraction of rows masked}``.

    Raises:
        ValueError: no EOS ids known (truncation cannot be told from a complete response).
    """
    if not eos_token_ids:
        raise ValueError(
            "actor_rollout_ref.actor.mask_truncated_completions needs the rollout's eos_token_id "
            "(meta_info['eos_token_id'] is empty)"
        )
    b = batch.batch
    r = b["responses"].shape[-1]
    cut = truncated_rows(b["responses"], b["attention_mask"][:, -r:], eos_token_ids)
    b["response_mask"] = torch.where(cut.unsqueeze(-1), torch.zeros_like(b["response_mask"]), b["response_mask"])
    return {"response_length/masked_truncated_ratio": float(cut.float().mean()) if len(cut) else 0.0}
