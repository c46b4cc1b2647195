"""Masked reductions over response tokens.

Masks are bool or float tensors broadcastable to the values, 1 (or a positive weight) where a
token counts and 0 on padding. Every reduction here *selects* with `torch.where` instead of
multiplying by the mask, so sentinel values in padded slots (NaN, inf, the +1.0 "invalid
logprob" placeholder) can never leak into a result: ``NaN * 0`` is NaN, ``where`` is not.
"""

from __future__ import annotations

import torch

__all__ = [
    "zero_masked",
    "compute_response_mask_from_lengths",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]

Dim = int | tuple[int, ...] | None


def _weights(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mask as a weight tensor in ``values``' dtype (bool → 0/1)."""
    return mask.to(values.dtype)


def zero_masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` with masked positions set to exactly 0 (and gradient 0 there), even where ``x`` is NaN/inf.

    Args:
        x: any shape, e.g. `(B, R)`.
        mask: same shape, bool or float; nonzero where a value counts.
    """
    return torch.where(mask != 0, x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: Dim = None, keepdim: bool = False) -> torch.Tensor:
    """Σ mask·values over ``axis`` (all dims when None), ignoring whatever padded slots hold.

    Args:
        values: any shape, e.g. `(B, R)`.
        mask: same shape (or broadcastable), bool or float weights.
        axis: dimension(s) to reduce; None reduces everything to a 0-d tensor.
        keepdim: keep reduced dimensions with size 1 (ignored when ``axis`` is None).

    Returns:
        The masked sum.
    """
    w = _weights(values, mask)
    terms = torch.where(w != 0, values * w, torch.zeros((), dtype=values.dtype, device=values.device))
    return terms.sum() if axis is None else terms.sum(dim=axis, keepdim=keepdim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: Dim = None, keepdim: bool = False) -> torch.Tensor:
    """Σ mask·values / Σ mask over ``axis``; 0 where the mask is empty (never NaN).

    Args:
        values: any shape, e.g. `(B, R)`.
        mask: same shape (or broadcastable), bool or float weights.
        axis: dimension(s) to reduce; None reduces everything.
        keepdim: keep reduced dimensions with size 1 (ignored when ``axis`` is None).

    Returns:
        The masked mean.
    """
    w = _weights(values, mask).expand_as(values)
    total = masked_sum(values, w, axis, keepdim)
    count = w.sum() if axis is None else w.sum(dim=axis, keepdim=keepdim)
    # An empty mask would give 0/0 = NaN; report 0 and keep the graph.
    safe = torch.where(count > 0, count, torch.ones_like(count))
    return torch.where(count > 0, total / safe, torch.zeros_like(total))


def masked_var(values: torch.Tensor, mask: torch.Tensor, axis: Dim = None, unbiased: bool = True) -> torch.Tensor:
    """Masked variance Σ mask·(x − mean)² / n, with Bessel's n/(n − 1) when ``unbiased``.

    With fewer than two valid elements the Bessel factor is undefined; the (biased) variance,
    which is 0 for a single element, is returned instead of NaN/inf.

    Args:
        values: any shape, e.g. `(B, R)`.
        mask: same shape, bool or float weights.
        axis: dimension(s) to reduce; None reduces everything.
        unbiased: apply Bessel's correction.

    Returns:
        The masked variance, with ``axis`` removed.
    """
    w = _weights(values, mask).expand_as(values)
    mean = masked_mean(values, w, axis, keepdim=True)
    var = masked_mean((values - mean) ** 2, w, axis)
    if unbiased:
        n = w.sum() if axis is None else w.sum(dim=axis)
        factor = torch.where(n > 1, n / torch.where(n > 1, n - 1, torch.ones_like(n)), torch.ones_like(n))
        var = var * factor
    return var


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """Whiten over all valid elements: (x − mean) / sqrt(var + eps), var unbiased.

    Args:
        values: `(B, R)` (any shape).
        mask: same shape, bool or float weights.
        shift_mean: if False the mean is added back, i.e. only the scale is normalised.
        eps: added to the variance; guards a constant input (var 0 → division by 0).

    Returns:
        `(B, R)` whitened values, exactly 0 on masked positions.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return zero_masked(whitened, mask)


def compute_response_mask_from_lengths(
    lengths: torch.Tensor, width: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Response mask from the lengths the rollout engine reported.

    The mask is positional: token j of row b counts iff j < lengths[b]. It never looks at token
    values, so a response that stopped without EOS, or whose pad id equals EOS, is masked right.

    Args:
        lengths: `(B,)` integer number of generated tokens per response (EOS included).
        width: R, the padded response width.
        dtype: dtype of the returned mask.

    Returns:
        `(B, R)` mask, 1 on the first ``lengths[b]`` positions of each row.

    Raises:
        ValueError: if a length is negative or exceeds ``width``.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(lengths.shape)}")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > width):
        raise ValueError(
            f"response lengths must lie in [0, {width}], got min {int(lengths.min())} max {int(lengths.max())}"
        )
    positions = torch.arange(width, device=lengths.device)
    return (positions.unsqueeze(0) < lengths.unsqueeze(1)).to(dtype)
