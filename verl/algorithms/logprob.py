"""Token log-probabilities and entropies from logits, naive and memory-bounded (chunked).

With a 150k vocabulary a full float32 log-softmax of 4096 tokens is 2.5 GB on top of the logits.
`logprobs_and_entropy_from_logits` processes row blocks of at most ``chunk_size`` rows, upcasts
only the block to float32, and keeps only per-row scalars (log-sum-exp, entropy) for backward,
where the gradient is recomputed block by block. Peak extra memory is O(chunk_size · V) instead
of O(N · V), in the forward and in the backward pass.

Formulas (x = logits / temperature, lse = log Σ_v exp x_v, p = softmax x):
    log π(y) = x_y − lse
    H        = lse − Σ_v p_v x_v
    ∂ log π(y) / ∂x = onehot(y) − p
    ∂ H / ∂x        = −p ⊙ (log p + H)
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.autograd.function import once_differentiable

__all__ = [
    "entropy_from_logits",
    "logprobs_and_entropy_from_logits",
    "logprobs_from_logits",
    "sum_pi_squared_from_logits",
]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Categorical entropy H = lse(x) − Σ softmax(x)·x over the last dim (naive, float32).

    Args:
        logits: `(..., V)`.

    Returns:
        `(...)` float32 entropies.
    """
    x = logits.float()
    p = torch.softmax(x, dim=-1)
    return torch.logsumexp(x, dim=-1) - (p * x).sum(dim=-1)


@torch.no_grad()
def sum_pi_squared_from_logits(logits: torch.Tensor, temperature: float = 1.0, chunk_size: int = 512) -> torch.Tensor:
    """Σ_v π(v)² of π = softmax(logits / temperature) per row, float32, no gradient.

    The score-function norm proxy of the optimal token baseline (`verl.algorithms.token_baselines`):
    ‖∇_z log π(y)‖² = 1 − 2 π(y) + Σ_v π(v)². Computed in blocks of ``chunk_size`` rows of the
    flattened leading dimensions, so at most a `(chunk_size, V)` float32 block is live.

    Args:
        logits: `(..., V)`, e.g. `(B, R, V)`.
        temperature: τ > 0.
        chunk_size: rows per block (>= 1).

    Returns:
        `(...)` float32.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, flat.shape[0], max(chunk_size, 1)):
        block = torch.softmax(flat[start : start + chunk_size].float() / temperature, dim=-1)
        out[start : start + chunk_size] = block.square().sum(-1)
    return out.view(logits.shape[:-1])


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] (naive: materialises the full float32 log-softmax).

    Args:
        logits: `(..., V)`.
        labels: `(...)` integer token ids.

    Returns:
        `(...)` float32 log-probabilities.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)


def _blocks(batch: int, length: int, chunk_size: int) -> Iterator[tuple[slice, slice]]:
    """Row blocks of a `(B, T, V)` tensor holding at most ``max(chunk_size, 1)`` rows each.

    Blocks are slices of the original tensor (views), so a non-contiguous input such as
    ``logits[:, P - 1 : -1]`` is never copied as a whole.
    """
    if length >= chunk_size:
        for b in range(batch):
            for t0 in range(0, length, chunk_size):
                yield slice(b, b + 1), slice(t0, min(t0 + chunk_size, length))
    else:
        step = max(chunk_size // max(length, 1), 1)
        for b0 in range(0, batch, step):
            yield slice(b0, min(b0 + step, batch)), slice(0, length)


def _scaled_block(block: torch.Tensor, temperature: float) -> torch.Tensor:
    """A block as float32 divided by the temperature, copying at most once."""
    x = block.float()
    if temperature == 1.0:
        return x
    if x.data_ptr() == block.data_ptr():  # float32 input: .float() is a view, do not modify it
        return x / temperature
    return x.div_(temperature)


class _ChunkedLogprobEntropy(torch.autograd.Function):
    """Autograd function; see `logprobs_and_entropy_from_logits`."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        logits: torch.Tensor,
        labels: torch.Tensor,
        chunk_size: int,
        compute_entropy: bool,
        temperature: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, _ = logits.shape
        kw = {"dtype": torch.float32, "device": logits.device}
        logp = torch.empty(batch, length, **kw)
        lse = torch.empty(batch, length, **kw)
        ent = torch.empty(batch, length, **kw) if compute_entropy else torch.empty(0, **kw)
        for rows, cols in _blocks(batch, length, chunk_size):
            x = _scaled_block(logits[rows, cols], temperature)
            block_lse = torch.logsumexp(x, dim=-1)
            lse[rows, cols] = block_lse
            logp[rows, cols] = x.gather(-1, labels[rows, cols].unsqueeze(-1)).squeeze(-1) - block_lse
            if compute_entropy:
                # softmax is the block's only (rows, V) temporary; p·x is formed in place.
                ent[rows, cols] = block_lse - torch.softmax(x, dim=-1).mul_(x).sum(-1)
        ctx.save_for_backward(logits, labels, lse, ent)
        # an output the loss does not use gets grad None (not a zero tensor): an entropy computed
        # only for a metric then costs nothing in backward
        ctx.set_materialize_grads(False)
        ctx.chunk_size = chunk_size
        ctx.temperature = temperature
        ctx.compute_entropy = compute_entropy
        return logp, ent

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_logp: torch.Tensor, grad_ent: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        logits, labels, lse, ent = ctx.saved_tensors
        entropy_grad = ctx.compute_entropy and grad_ent is not None
        if grad_logp is None and not entropy_grad:
            return None, None, None, None, None
        if grad_logp is None:
            grad_logp = torch.zeros_like(lse)
        grad = torch.empty_like(logits)
        batch, length, _ = logits.shape
        for rows, cols in _blocks(batch, length, ctx.chunk_size):
            x = _scaled_block(logits[rows, cols], ctx.temperature)
            # In-place arithmetic keeps at most two (rows, V) float32 temporaries alive.
            log_p = x - lse[rows, cols].unsqueeze(-1)
            p = torch.exp(log_p)
            g_lp = grad_logp[rows, cols].unsqueeze(-1)
            if entropy_grad:
                g_h = grad_ent[rows, cols].unsqueeze(-1)
                g = log_p.add_(ent[rows, cols].unsqueeze(-1)).mul_(p).mul_(-g_h)  # −g_H p (log p + H)
                g.sub_(p.mul_(g_lp))
            else:
                g = p.mul_(-g_lp)
            g.scatter_add_(-1, labels[rows, cols].unsqueeze(-1), g_lp)
            if ctx.temperature != 1.0:
                g.div_(ctx.temperature)
            grad[rows, cols] = g
        return grad, None, None, None, None


def logprobs_and_entropy_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int = 512,
    compute_entropy: bool = False,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunked log π(label) and entropy of softmax(logits / temperature), differentiable.

    Never materialises a full float32 `(N, V)` log-softmax: at most ``chunk_size`` rows are
    upcast at once (bf16 logits are upcast per block only), in forward and in backward. Equals
    `logprobs_from_logits(logits / temperature, labels)` and `entropy_from_logits` to float32
    rounding.

    Args:
        logits: `(N, V)` or `(B, T, V)`, any float dtype; may be a non-contiguous view.
        labels: `(N,)` or `(B, T)` integer token ids.
        chunk_size: rows per block; bounds extra memory to a few `(chunk_size, V)` float32 tensors.
        compute_entropy: also return the per-token entropy.
        temperature: sampling temperature the logits are divided by (> 0), as at rollout time.

    Returns:
        (log_probs, entropy): float32 tensors shaped like ``labels``; entropy is None unless
        ``compute_entropy``.

    Raises:
        ValueError: on mismatched shapes, ``chunk_size < 1`` or ``temperature <= 0``.
    """
    if logits.dim() not in (2, 3) or tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"expected logits (N, V) or (B, T, V) and labels of the leading shape, got "
            f"{tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    squeeze = logits.dim() == 2
    logits3 = logits.unsqueeze(0) if squeeze else logits
    labels3 = (labels.unsqueeze(0) if squeeze else labels).long()
    logp, ent = _ChunkedLogprobEntropy.apply(logits3, labels3, chunk_size, compute_entropy, float(temperature))
    if squeeze:
        logp = logp.squeeze(0)
        ent = ent.squeeze(0) if compute_entropy else ent
    return logp, (ent if compute_entropy else None)
