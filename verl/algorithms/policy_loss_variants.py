"""Policy losses sapo, geo_mean, dppo_tv, dppo_kl and dro, registered in `POLICY_LOSSES`.

Same signature and per-token output as `policy_loss` (see its module docstring); each follows
the formula of verl's loss of the same name (``verl.trainer.ppo.core_algos``) and reads the same
settings, passed as keyword arguments by the actor:

- sapo: ``tau_pos``, ``tau_neg`` (``actor.tau_pos`` / ``actor.tau_neg``);
- geo_mean: ``clip_ratio_low`` / ``clip_ratio_high`` (bounds on the *log* ratio);
- dppo_tv / dppo_kl: ``clip_ratio_low`` / ``clip_ratio_high`` (divergence thresholds, not ratio
  bounds) and ``clip_ratio_c`` (truncation of the importance weight);
- dro: ``dro_beta`` (``actor.policy_loss.dro_beta``, required).

Every input is first selected with `valid_only` (masked slots set to 0 by ``torch.where``).
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms.masked import masked_sum, zero_masked
from verl.algorithms.policy_loss import POLICY_LOSSES, aggregated_by, frac, log_ratio, metrics, valid_only

__all__ = [
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dro",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_sapo",
]

# verl's constant inside the binary KL's logs: keeps log(1 − p) finite when p rounds to 1.
BINARY_KL_EPS = 1e-8
# verl's constant added to a row's token count in GMPO's means (0-length rows divide by it, not 0).
GEO_MEAN_EPS = 1e-8


@POLICY_LOSSES.register("sapo")
@aggregated_by("seq-mean-token-mean")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAPO ("Soft Adaptive Policy Optimization", 2025, arXiv 2511.20347): a soft gate.

    r = exp(clamp(log π_θ − log π_old, −20, 20)); τ = τ_pos if A > 0 else τ_neg;
    L = −f_τ(r) · A with f_τ(r) = σ(τ (r − 1)) · 4 / τ, a smooth trust region in place of the
    hard clip (f_τ'(1) = 1, so at r = 1 the gradient is the policy gradient's). The clip
    arguments are ignored and the clip fractions are 0. As in verl, the policy-gradient term is
    always aggregated ``seq-mean-token-mean`` (`aggregated_by`).

    Args:
        **extra: ``tau_pos`` (default 1.0), ``tau_neg`` (default 1.05), both > 0.

    Raises:
        ValueError: if ``tau_pos`` or ``tau_neg`` is not > 0.
    """
    tau_pos, tau_neg = float(extra.get("tau_pos", 1.0)), float(extra.get("tau_neg", 1.05))
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"sapo needs tau_pos > 0 and tau_neg > 0, got {tau_pos} and {tau_neg}")
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    ratio = torch.exp(log_ratio(old_log_prob, log_prob))
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    pg_losses = -gate * advantages
    return zero_masked(pg_losses, response_mask), metrics(old_log_prob, log_prob, response_mask)


@POLICY_LOSSES.register("geo_mean")
@aggregated_by("seq-mean-token-mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GMPO ("Geometric-Mean Policy Optimization", Zhao et al. 2025, arXiv 2507.20673).

    Per token ℓ_t = log π_θ − log π_old, clipped in log space *pessimistically* for the sign of A:
    ℓ̃_t = sgn(A) · min(sgn(A) ℓ_t, sgn(A) clip(ℓ_t, −ε_low, ε_high)). Per sequence i with n_i
    valid tokens: s_i = exp(Σ_t ℓ̃_t / (n_i + 1e-8)) (the geometric mean of the clipped token
    ratios), Ā_i = Σ_t A_t / (n_i + 1e-8), and the loss L_i = −Ā_i s_i. As verl (which only
    supports sequence-level advantages here), the policy-gradient term is the mean of L_i over
    sequences: every valid token of row i carries L_i and the term is aggregated
    ``seq-mean-token-mean`` (`aggregated_by`); unlike verl's plain mean over all rows, rows
    without a valid token do not count. The exponent is clamped to [−20, 20] against overflow.

    Metrics: ``pg_clipfrac`` = fraction of tokens with A > 0 whose ℓ_t was clipped,
    ``pg_clipfrac_lower`` = the same for A < 0.
    """
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    lr = zero_masked(log_prob - old_log_prob, response_mask)
    sign = torch.sign(advantages)
    lr_clipped = torch.clamp(lr, -clip_ratio_low, clip_ratio_high)
    lr_pessimistic = sign * torch.minimum(sign * lr, sign * lr_clipped)
    lengths = (response_mask != 0).to(lr.dtype).sum(-1) + GEO_MEAN_EPS
    seq_log_ratio = masked_sum(lr_pessimistic, response_mask, axis=-1) / lengths
    seq_ratio = torch.exp(seq_log_ratio.clamp(-20.0, 20.0))
    seq_adv = masked_sum(advantages, response_mask, axis=-1) / lengths
    seq_loss = -seq_adv * seq_ratio
    pg_losses = zero_masked(seq_loss.unsqueeze(-1).expand_as(lr), response_mask)
    clipped = lr != lr_clipped
    return pg_losses, metrics(
        old_log_prob,
        log_prob,
        response_mask,
        clipfrac=frac(clipped & (advantages > 0), response_mask),
        clipfrac_lower=frac(clipped & (advantages < 0), response_mask),
    )


def _dppo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    trusted: torch.Tensor,
    clip_ratio_c: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """L = −A · sg[min(r, C)] · log π_θ on tokens of the trust region ``trusted``, 0 elsewhere."""
    ratio = torch.exp(log_ratio(old_log_prob, log_prob))
    weight = torch.clamp(ratio, max=clip_ratio_c).detach()
    pg_losses = torch.where(trusted, -advantages * weight * log_prob, torch.zeros_like(log_prob))
    return zero_masked(pg_losses, response_mask), metrics(
        old_log_prob,
        log_prob,
        response_mask,
        clipfrac=frac(~trusted, response_mask),
        clipfrac_lower=frac((ratio > clip_ratio_c) & trusted, response_mask),
    )


@POLICY_LOSSES.register("dppo_tv")
def compute_policy_loss_dppo_tv(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPPO-Binary-TV (divergence-based PPO, arXiv 2602.04879, as verl's ``dppo_tv``).

    With p = π_θ(y_t), p_old = π_old(y_t): a token is in the trust region when
    p − p_old <= δ_high (A > 0) or p − p_old >= −δ_low (A <= 0), δ = ``clip_ratio_high`` /
    ``clip_ratio_low`` read as total-variation thresholds. In the region
    L = −A · sg[min(r, C)] · log π_θ (truncated importance sampling with C = ``clip_ratio_c``
    in place of dual clip; the paper recommends a large C), outside L = 0.

    Metrics: ``pg_clipfrac`` = fraction of tokens outside the region, ``pg_clipfrac_lower`` =
    fraction inside it whose weight was truncated (r > C).
    """
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    change = torch.exp(log_prob) - torch.exp(old_log_prob)
    trusted = torch.where(advantages > 0, change <= clip_ratio_high, change >= -clip_ratio_low).detach()
    return _dppo_loss(old_log_prob, log_prob, advantages, response_mask, trusted, clip_ratio_c)


@POLICY_LOSSES.register("dppo_kl")
def compute_policy_loss_dppo_kl(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPPO-Binary-KL (divergence-based PPO, arXiv 2602.04879, as verl's ``dppo_kl``).

    The binary KL between Bernoulli(p_old) and Bernoulli(p) of the sampled token,
    D = p_old (log p_old − log p) + (1 − p_old) log((1 − p_old + 1e-8) / (1 − p + 1e-8)),
    bounds the trust region: a token is in it when D <= δ_high or p <= p_old (A > 0), and when
    D <= δ_low or p >= p_old (A <= 0), δ = ``clip_ratio_high`` / ``clip_ratio_low`` read as KL
    thresholds. Loss and metrics as `compute_policy_loss_dppo_tv`.
    """
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + BINARY_KL_EPS) / (1.0 - prob + BINARY_KL_EPS)
    )
    up_ok = (binary_kl <= clip_ratio_high) | (prob <= old_prob)
    down_ok = (binary_kl <= clip_ratio_low) | (prob >= old_prob)
    trusted = torch.where(advantages > 0, up_ok, down_ok).detach()
    return _dppo_loss(old_log_prob, log_prob, advantages, response_mask, trusted, clip_ratio_c)


@POLICY_LOSSES.register("dro")
def compute_policy_loss_dro(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DRO, Direct Reward Optimisation (Richemond et al. 2024, arXiv 2405.19107), as verl's ``dro``.

    L = −(A · log π_θ − β/2 · (log π_θ − log π_old)²): the policy gradient with a quadratic
    penalty on the log ratio in place of clipping (the clip arguments are ignored; the clip
    fractions are 0).

    Args:
        **extra: ``dro_beta`` β (``actor.policy_loss.dro_beta``), required, > 0.

    Raises:
        ValueError: if ``dro_beta`` is missing or not > 0.
    """
    beta = extra.get("dro_beta")
    if beta is None or not float(beta) > 0:
        raise ValueError(f"loss_mode=dro needs actor.policy_loss.dro_beta > 0, got {beta!r}")
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    diff = log_prob - old_log_prob
    pg_losses = -(log_prob * advantages - 0.5 * float(beta) * diff.square())
    return zero_masked(pg_losses, response_mask), metrics(old_log_prob, log_prob, response_mask)
