"""The ``hf`` engine's decode step, eager or compiled (``rollout.enforce_eager``).

One decode step is the model forward of one new token per row against the KV cache, returning
the next-token logits `(B, V)`. Sampling (`verl.workers.rollout.sampling`) is never compiled: its
per-row inverse-CDF draw reads a float32 ``cumsum`` whose summation order a compiled kernel may
change, which would change the sampled tokens.

``enforce_eager=true`` (the default) runs the forward as is, passing the attention mask of the
``P' + t + 1`` positions filled so far. ``enforce_eager=false`` is the CPU analogue of a server
engine's graph mode: the forward runs under ``torch.compile(fullgraph=True, dynamic=True)``
(Inductor: the ~30 small ops of a layer fused into a few C++ / Triton kernels), with two changes
that keep every shape of the step constant while tokens are added and rows finish:

- the KV cache must be the pre-allocated ``StaticCache`` (its length never changes; the cache
  itself tracks how many positions are filled, as a tensor);
- the attention mask passed is always the full `(B, P' + R)` one; positions not written yet are
  excluded by the causal mask (key index > query position), so the result is the same.

With grouped-query attention (fewer KV heads than query heads, as in Qwen2), transformers'
``sdpa`` attention copies every layer's whole KV cache to the query-head count (``repeat_kv``)
under ``torch.compile``, though eagerly it folds the query heads onto the KV heads for a one-token
query instead (``pack_gqa``). That copy made the compiled step slower than eager (measured:
benchmarks/README.md), so the compiled decode runs the module with the attention function
``verl_decode_sdpa`` registered here (transformers ``AttentionInterface``): the same folding,
under compile too; every other call (prefill, training forwards) is transformers' ``sdpa``.

Rows that finish keep being decoded (their tokens are then overwritten by the pad id), so the
batch size is constant within a call. ``dynamic=True`` marks the batch size and the cache length
symbolic from the first compile: a new prompt length, response length or micro-batch size
(> 1; Dynamo specialises sizes 0 and 1) reuses the compiled step instead of recompiling
(without it the first two such changes each cost a full compile).
The prefill stays eager: it runs once per call, with the prompt length as its shape.

Compiled kernels may reorder float operations, so logits (hence ``rollout_log_probs`` and, when
two tokens are within rounding of each other, a sampled or greedy token) can differ from eager
in the last bits; tests/workers/rollout/hf/test_rollout_compile.py measures the difference on a tiny model.
Old log-probs never come from the rollout (`verl.workers.actor.reuses_old_log_probs` reuses the
update forward's), so this reaches training only through ``algorithm.rollout_correction`` (its
mismatch metrics and weights, or ``bypass_mode``, which takes ``rollout_log_probs`` as the old
log-probs by the user's choice). Measured on CPU (benchmarks/README.md): about 1.1x per rollout
at the GSM8K bench shape, for a compile of 25-90 s per process; hence off by default.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from verl.workers.rollout.hf.decode_head import decode_head, head_logits

try:
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError:  # older transformers build masks inside each model: there is no mask registry
    AttentionMaskInterface = sdpa_mask = None

__all__ = ["DECODE_ATTENTION", "DecodeStep", "decode_sdpa_attention"]

DECODE_ATTENTION = "verl_decode_sdpa"
"""Name of `decode_sdpa_attention` in transformers' attention and mask registries."""


def decode_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, with a one-token GQA query folded onto the KV heads.

    For a decode step (query length 1) of a module with ``num_key_value_groups`` g > 1, the query
    `(B, H, 1, D)` is viewed as `(B, H/g, g, D)`: the g query heads sharing a KV head become g
    query rows against that head, so no `(B, H, L, D)` copy of the cache is made. A mask shared by
    all heads `(B, 1, 1, L)` broadcasts over the g rows; a per-head mask `(B, H, 1, L)` is folded
    the same way. Anything else goes to ``sdpa_attention_forward`` unchanged.

    Args:
        module: the attention module (reads ``num_key_value_groups``).
        query: `(B, H, q, D)`; key, value: `(B, H/g, L, D)`.
        attention_mask: boolean or additive mask `(B, 1 or H, q, L)`, or None.

    Returns:
        (`(B, q, H, D)` attention output, None), as transformers' attention functions return.
    """
    groups = int(getattr(module, "num_key_value_groups", 1))
    if (
        query.shape[2] != 1
        or groups == 1
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    batch, heads, _, dim = query.shape
    folded = query.reshape(batch, heads // groups, groups, dim)
    if attention_mask is not None and attention_mask.shape[1] != 1:
        attention_mask = attention_mask.reshape(batch, heads // groups, groups, attention_mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(
        folded, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


AttentionInterface.register(DECODE_ATTENTION, decode_sdpa_attention)
if AttentionMaskInterface is not None:
    AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)


def _forward_last_logits(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache_kwarg: dict[str, Any],
) -> torch.Tensor:
    """Next-token logits `(B, V)` of a one-token-per-row forward against the cache."""
    out = module(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **cache_kwarg
    )
    return out.logits[:, -1]


# One compiled function per process: Dynamo keeps its graphs per code object, guarded on the
# module's class and structure (parameters are graph inputs), so engines share the compile and
# weight updates in place never recompile.
_compiled_forward = torch.compile(_forward_last_logits, fullgraph=True, dynamic=True)


class DecodeStep:
    """The decode-step forward of `verl.workers.rollout.HFRollout`.

    Args:
        compiled: run the forward under ``torch.compile`` (``rollout.enforce_eager=false``).
    """

    def __init__(self, compiled: bool) -> None:
        self.compiled = compiled
        self._head: nn.Linear | None = None

    @contextlib.contextmanager
    def session(self, module: nn.Module) -> Iterator[None]:
        """Context of one ``generate_sequences`` call: when compiled, a module on transformers'
        ``sdpa`` attention runs on `decode_sdpa_attention` inside it (restored on exit, also on
        error). Eager float32 on CPU: a large LM head runs in the faster matmul layout
        (`verl.workers.rollout.hf.decode_head`)."""
        eager_fp32 = not self.compiled and not torch.is_autocast_enabled("cpu")
        self._head = decode_head(module) if eager_fp32 else None
        config = getattr(module, "config", None)
        switch = (
            self.compiled
            and getattr(config, "_attn_implementation", None) == "sdpa"
            and hasattr(module, "set_attn_implementation")
        )
        try:
            if not switch:
                yield
                return
            module.set_attn_implementation(DECODE_ATTENTION)
            try:
                yield
            finally:
                module.set_attn_implementation("sdpa")
        finally:
            self._head = None  # no reference to a module the engine may replace (update_weights)

    def __call__(
        self,
        module: nn.Module,
        input_ids: torch.Tensor,
        full_mask: torch.Tensor,
        filled: int,
        position_ids: torch.Tensor,
        cache_kwarg: dict[str, Any],
    ) -> torch.Tensor:
        """Logits of the next token after ``input_ids``.

        Args:
            module: the causal LM.
            input_ids: `(B, 1)` the tokens sampled at the previous step.
            full_mask: `(B, P' + R)` attention mask of prompt and response slots (1 = attend).
            filled: P' + t + 1, the positions in the cache after this step.
            position_ids: `(B, 1)` positions of ``input_ids``.
            cache_kwarg: ``{cache keyword: the KV cache}`` (`cache_keyword`); a ``StaticCache``
                when compiled.

        Returns:
            `(B, V)` float logits.
        """
        if self.compiled:
            # a column of the (B, R) responses has stride R, which Dynamo would specialise on: a
            # contiguous copy of the B ids keeps one graph across response lengths
            return _compiled_forward(module, input_ids.contiguous(), full_mask, position_ids, cache_kwarg)
        if self._head is not None:
            base = getattr(module, module.base_model_prefix)
            out = base(
                input_ids=input_ids,
                attention_mask=full_mask[:, :filled],
                position_ids=position_ids,
                use_cache=True,
                **cache_kwarg,
            )
            return head_logits(self._head.weight, out.last_hidden_state[:, -1])
        return _forward_last_logits(module, input_ids, full_mask[:, :filled], position_ids, cache_kwarg)
