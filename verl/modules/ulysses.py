"""Ulysses sequence parallelism for transformers models (DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv 2309.14509).

Each rank of a sequence-parallel (SP) group of size ``sp`` holds ``L / sp`` striped columns
(``r, r + sp, ...``, `striped_columns`) of the packed rows (`verl.modules.packing`). Embeddings,
norms, MLPs, rotary positions and the LM head are per token, so they run on the local columns
unchanged. Attention needs every token: in each attention layer q, k and v `(b, heads, L / sp, d)`
go through one all-to-all that trades the sequence split for a head split, `(b, heads / sp, L, d)`;
attention runs on all L tokens of ``heads / sp`` heads (block-diagonal causal mask from the gathered
position ids, so packed sequences stay apart; the gathered columns are put back in their natural
order first, `natural_order`), and a second all-to-all brings the output back to
`(b, L / sp, heads, d)`. The per-token outputs are then gathered along the sequence (`gather_seq`).

The model is not rewritten: `enable_ulysses` switches the model to the attention function
registered here with transformers' ``AttentionInterface`` (``verl_ulysses``). Outside an active
`sequence_parallel` block that function is transformers' ``sdpa`` with transformers' own mask, so a
model switched to it computes exactly what it did before (the rollout may share it).

The same facts as verl's ``verl/utils/ulysses.py`` and ``verl/models/transformers/monkey_patch.py``:
heads and KV heads must be divisible by ``sp``; the gathered outputs' gradient is the local slice
(every rank of the group computes the same loss from the gathered tensor).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "ATTN_NAME",
    "active_group",
    "active_sp_size",
    "check_heads",
    "enable_ulysses",
    "gather_seq",
    "sequence_parallel",
    "sp_rank_and_size",
    "suspended",
]

ATTN_NAME = "verl_ulysses"
_STATE: dict[str, Any] = {"group": None}


@contextlib.contextmanager
def sequence_parallel(group: dist.ProcessGroup | None) -> Iterator[None]:
    """Inside the block, packed forwards split their sequences over ``group`` (None or size 1: no-op)."""
    previous = _STATE["group"]
    _STATE["group"] = group if group is not None and dist.get_world_size(group) > 1 else None
    try:
        yield
    finally:
        _STATE["group"] = previous


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Forwards inside the block see whole sequences (a probe run identically on every rank)."""
    with sequence_parallel(None):
        yield


def active_group() -> dist.ProcessGroup | None:
    """The SP group of the enclosing `sequence_parallel` block, or None."""
    return _STATE["group"]


def active_sp_size() -> int:
    """Size of the active SP group (1 outside `sequence_parallel`)."""
    group = active_group()
    return 1 if group is None else dist.get_world_size(group)


def sp_rank_and_size(group: dist.ProcessGroup) -> tuple[int, int]:
    """(this rank's index in ``group``, ``group``'s size)."""
    return dist.get_rank(group), dist.get_world_size(group)


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` on dim 0 (``sp`` equal chunks); its adjoint is the same exchange."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:  # noqa: D102
        ctx.group = group
        x = x.contiguous()  # empty_like keeps a permuted input's strides; the exchange writes row-major
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: D102
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad, group=ctx.group)
        return out, None


class _GatherSeq(torch.autograd.Function):
    """All-gather along ``dim``; backward keeps this rank's slice of the gradient (no sum).

    Every rank of the group computes the same loss from the gathered tensor, so the gradient of
    its own slice is complete on each rank; summing the copies would count it ``sp`` times.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, group: dist.ProcessGroup) -> torch.Tensor:  # noqa: D102
        rank, size = sp_rank_and_size(group)
        ctx.dim, ctx.rank, ctx.size = dim, rank, size
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x, group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # noqa: D102
        return grad.chunk(ctx.size, dim=ctx.dim)[ctx.rank].contiguous(), None, None


def gather_seq(x: torch.Tensor, dim: int, group: dist.ProcessGroup) -> torch.Tensor:
    """Concatenate the group's local slices of ``x`` along ``dim`` in rank order (differentiable)."""
    return _GatherSeq.apply(x, dim, group)


def _seq_to_heads(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """`(b, h, l, d)` local columns of all heads -> `(b, h / sp, sp * l, d)` all columns of this rank's heads."""
    _, sp = sp_rank_and_size(group)
    b, h, local, d = x.shape
    chunks = x.reshape(b, sp, h // sp, local, d).transpose(0, 1)  # dim 0: the head group sent to each rank
    got = _AllToAll.apply(chunks, group)  # dim 0: the source rank = its column block
    return got.permute(1, 2, 0, 3, 4).reshape(b, h // sp, sp * local, d)


def _heads_to_seq(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """`(b, L, h / sp, d)` all columns of this rank's heads -> `(b, L / sp, h, d)` local columns of all heads."""
    _, sp = sp_rank_and_size(group)
    b, length, hs, d = x.shape
    chunks = x.reshape(b, sp, length // sp, hs, d).transpose(0, 1)  # dim 0: the column block sent to each rank
    got = _AllToAll.apply(chunks, group)  # dim 0: the source rank = its head group
    return got.permute(1, 2, 0, 3, 4).reshape(b, length // sp, sp * hs, d)


def striped_columns(length: int, rank: int, sp: int) -> torch.Tensor:
    """The columns of a padded row of ``length`` (a multiple of ``sp``) that SP rank ``rank`` holds:
    ``rank, rank + sp, rank + 2·sp, ...`` (striped, so that the response tokens closing every
    sequence — the scored positions, whose LM-head logits dominate the memory — and the causal
    attention work spread evenly over the group)."""
    return torch.arange(rank, length, sp)


def natural_order(length: int, sp: int, device: torch.device) -> torch.Tensor:
    """Index into a rank-major gathered row (rank 0's striped columns, then rank 1's, ...) that puts
    the columns back in their natural order: column c sits at ``(c mod sp) · (length / sp) + c // sp``."""
    c = torch.arange(length, device=device)
    return (c % sp) * (length // sp) + c // sp


def _packed_causal_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """`(b, 1, L, L)` bool: causal within each packed sequence (a new one wherever positions do not
    step by one, transformers' ``find_packed_sequence_indices`` rule)."""
    first = position_ids[:, :1] - 1
    seq = (torch.diff(position_ids, prepend=first, dim=-1) != 1).cumsum(-1)
    length = position_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=position_ids.device).tril()
    return ((seq[:, :, None] == seq[:, None, :]) & causal)[:, None]


def ulysses_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: sdpa over all tokens of ``heads / sp`` heads inside
    `sequence_parallel`, plain sdpa (with transformers' mask) outside.

    Args:
        query: `(b, heads, L / sp, d)` (rotary already applied at the local positions).
        key, value: `(b, kv_heads, L / sp, d)`.
        attention_mask: transformers' mask; unused under SP (packed rows carry none: the mask is
            rebuilt from the gathered ``position_ids``).
        kwargs: the attention layer's keywords; ``position_ids`` `(b, L / sp)` is required under SP.

    Returns:
        (`(b, L / sp, heads, d)` output, None).

    Raises:
        RuntimeError: under SP, the model passes no ``position_ids`` to its attention layers.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    group = active_group()
    if group is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    position_ids = kwargs.pop("position_ids", None)
    if position_ids is None:
        raise RuntimeError(
            f"ulysses_sequence_parallel_size > 1: {type(module).__name__} passes no position_ids "
            "to its attention function; this architecture is not supported with sequence parallelism"
        )
    _, sp = sp_rank_and_size(group)
    length = position_ids.shape[-1] * sp
    order = natural_order(length, sp, query.device)  # the gathered columns are striped, rank-major
    full_pos = gather_seq(position_ids.expand(query.shape[0], -1), 1, group)[:, order]
    q, k, v = (_seq_to_heads(t, group)[:, :, order] for t in (query, key, value))
    out, _ = sdpa_attention_forward(module, q, k, v, _packed_causal_mask(full_pos), **kwargs)
    back = torch.empty_like(order).index_put_((order,), torch.arange(length, device=order.device))
    return _heads_to_seq(out[:, back], group), None


def check_heads(config: Any, sp: int, what: str = "ulysses_sequence_parallel_size", tp: int = 1) -> None:
    """Refuse a model whose attention heads or KV heads (``/ tp``: those one tensor-parallel rank
    holds, when the blocks are also split over ``tp`` ranks) are not divisible by ``sp``.

    Raises:
        ConfigError: naming the numbers (one line).
    """
    from verl.config.errors import ConfigError

    cfg = getattr(config, "text_config", None) or config
    heads = getattr(cfg, "num_attention_heads", None)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    if heads is None:
        raise ConfigError(f"{what}={sp}: the model config names no num_attention_heads; sequence parallelism needs it")
    for name, n in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if tp > 1 and (n % tp or (n // tp) % sp):
            raise ConfigError(
                f"{what}={sp} does not divide the {name} one tensor-parallel rank holds: {name}={n} / "
                f"tensor_parallel_size={tp} = {n / tp:g}; use sp x tp dividing {n}"
            )
        if n % sp:
            raise ConfigError(f"{what}={sp} does not divide the model's {name}={n}; use a divisor of {n}")


_REGISTERED: dict[str, bool] = {}


def _register() -> None:
    if _REGISTERED.get(ATTN_NAME):
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTN_NAME, ulysses_attention)
    # outside SP the function is sdpa: it needs sdpa's masks (padded and packed forwards, generation)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_NAME, sdpa_mask)
    _REGISTERED[ATTN_NAME] = True


def enable_ulysses(model: torch.nn.Module, sp: int, what: str = "ulysses_sequence_parallel_size", tp: int = 1) -> None:
    """Switch ``model`` (a transformers model, or a wrapper holding one) to the Ulysses attention.

    Args:
        tp: the tensor-parallel degree its blocks are split over (the all-to-all exchanges the
            ``heads / tp`` heads of one TP rank).

    Raises:
        ConfigError: heads or KV heads (``/ tp``) not divisible by ``sp`` (`check_heads`), or a model whose
            attention is not ``sdpa`` / ``eager`` (flash / flex kernels are not wrapped here).
    """
    from transformers import PreTrainedModel

    from verl.config.errors import ConfigError

    models = [m for m in model.modules() if isinstance(m, PreTrainedModel)]
    if not models:
        raise ConfigError(f"{what}={sp}: {type(model).__name__} is not a transformers model")
    check_heads(models[0].config, sp, what, tp)
    _register()
    for m in models:
        impl = m.config._attn_implementation
        if impl not in ("sdpa", "eager", ATTN_NAME):
            raise ConfigError(
                f"{what}={sp}: attention implementation {impl!r} is not supported with sequence parallelism; use sdpa"
            )
        m.config._attn_implementation = ATTN_NAME
