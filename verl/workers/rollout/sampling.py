"""Next-token sampling for the ``hf`` rollout engine: temperature, top-k, top-p, greedy.

Order (as in Hugging Face ``generate`` and vLLM): scale by temperature, keep the top-k logits,
then keep the smallest set of the remaining tokens whose renormalised probability reaches top-p
(nucleus sampling, Holtzman et al. 2019, "The Curious Case of Neural Text Degeneration"), then
draw from the renormalised distribution with an explicit `torch.Generator`.

The reported log-prob of a sampled token is ``log_softmax(logits / temperature)[token]``,
*before* top-k / top-p filtering: that is the distribution the training forward can recompute
(`verl.modules.forward.compute_log_probs`), so ``rollout_log_probs`` and ``old_log_probs``
agree. Greedy decoding reports log-probs at temperature 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "SamplingParams",
    "resolve_sampling",
    "row_generators",
    "row_uniforms",
    "sample_tokens",
    "top_k_top_p_filter",
]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one generation call.

    Attributes:
        do_sample: False = greedy (argmax).
        temperature: τ; τ <= 0 also means greedy.
        top_k: keep the k most likely tokens; <= 0 = off.
        top_p: nucleus threshold in (0, 1]; 1.0 = off.
    """

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax."""
        return not self.do_sample or self.temperature <= 0

    @property
    def logprob_temperature(self) -> float:
        """Temperature of the reported log-probs: τ when sampling, 1 for greedy decoding."""
        return 1.0 if self.greedy else float(self.temperature)


def resolve_sampling(config: Any, meta_info: Mapping[str, Any]) -> SamplingParams:
    """Sampling settings from the rollout config, overridden by the batch's ``meta_info``.

    With ``meta_info["validate"]`` the defaults come from ``config.val_kwargs`` (greedy unless it
    says ``do_sample: true`` with a positive temperature); otherwise from the config's own
    ``do_sample / temperature / top_k / top_p``. Keys of the same names in ``meta_info`` win.

    Args:
        config: a `RolloutConfig`.
        meta_info: the prompt batch's meta info.

    Returns:
        The resolved `SamplingParams`.
    """
    base = config.val_kwargs if meta_info.get("validate", False) else config
    values = {k: getattr(base, k) for k in ("do_sample", "temperature", "top_k", "top_p")}
    values.update({k: meta_info[k] for k in values if meta_info.get(k) is not None})
    return SamplingParams(
        do_sample=bool(values["do_sample"]),
        temperature=float(values["temperature"]),
        top_k=int(values["top_k"]),
        top_p=float(values["top_p"]),
    )


def top_k_top_p_filter(
    logits: torch.Tensor, top_k: int = -1, top_p: float = 1.0, inplace: bool = False
) -> torch.Tensor:
    """Set every logit outside the top-k, then outside the top-p nucleus, to −inf.

    A token survives top-p iff the probability mass of the tokens ranked strictly above it is
    < top_p, so the most likely token always survives and the kept set is the smallest one whose
    mass reaches top_p. Example: probs [0.5, 0.3, 0.2], top_p 0.5 → keep {0}; top_p 0.6 → {0, 1}.

    Args:
        logits: `(B, V)` float logits (already divided by the temperature).
        top_k: k; <= 0 or >= V = off.
        top_p: p in (0, 1]; >= 1 = off.
        inplace: filter ``logits`` itself instead of a copy (the caller owns the tensor).

    Returns:
        `(B, V)` filtered logits: ``logits`` itself when both filters are off or ``inplace``,
        else a new tensor.
    """
    vocab = logits.shape[-1]
    if not (0 < top_k < vocab) and top_p >= 1.0:
        return logits  # nothing to filter: no (B, V) copy
    logits = logits if inplace else logits.clone()
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits[logits < kth] = float("-inf")
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        remove_sorted = mass_before >= top_p
        remove_sorted[:, 0] = False  # the most likely token always stays, even for top_p -> 0
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        logits[remove] = float("-inf")
    return logits


def row_generators(seeds: torch.Tensor) -> list[torch.Generator]:
    """One CPU generator per row, seeded with that row's ``sample_seeds`` entry."""
    return [torch.Generator().manual_seed(int(s) % (2**63)) for s in seeds.tolist()]


def row_uniforms(seeds: torch.Tensor, steps: int) -> torch.Tensor:
    """The uniforms u of ``steps`` decoding steps for each row, drawn once per row up front.

    Row i's column t is exactly the t-th ``torch.rand(())`` of a generator seeded with
    ``seeds[i]`` (`row_generators`): a CPU generator's ``rand(n)`` yields the same sequence as n
    scalar draws, so decoding with these columns samples the same tokens as drawing per step,
    without B Python-level draws per token.

    Args:
        seeds: `(B,)` int64 ``sample_seeds``.
        steps: R, the response length.

    Returns:
        `(B, R)` float32 uniforms in [0, 1) on the CPU.
    """
    out = torch.empty(len(seeds), steps, dtype=torch.float32)
    for i, g in enumerate(row_generators(seeds)):
        torch.rand(steps, generator=g, out=out[i])
    return out


def sample_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    per_row: list[torch.Generator] | torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick the next token of each row and its log-prob.

    With ``per_row`` generators each row draws its own uniform u and takes the token where the
    cumulative distribution first exceeds u (inverse-CDF sampling), so a row's sample depends on
    its seed only — not on which other rows share the batch, the micro-batch or the rank. This
    makes 1-worker and N-worker runs, and resumed and uninterrupted runs, draw the same tokens.

    Args:
        logits: `(B, V)` float32 next-token logits.
        params: sampling settings.
        generator: random source for sampling (device of ``logits``); unused when greedy or
            when ``per_row`` is given.
        per_row: optional `B` generators (see `row_generators`), or this step's `(B,)` column of
            `row_uniforms` (the same draws, precomputed).

    Returns:
        (tokens `(B,)` int64, log_probs `(B,)` float32 = log_softmax(logits / τ)[token], with
        τ = ``params.logprob_temperature``).
    """
    tau = params.logprob_temperature
    scaled = logits.float()
    owned = scaled.data_ptr() != logits.data_ptr()
    if tau != 1.0:
        scaled, owned = scaled / tau, True
    log_probs = torch.log_softmax(scaled, dim=-1)
    if params.greedy:
        tokens = scaled.argmax(dim=-1)
    else:
        if 0 < params.top_k < scaled.shape[-1] or params.top_p < 1.0:
            probs = torch.softmax(top_k_top_p_filter(scaled, params.top_k, params.top_p, inplace=owned), dim=-1)
        else:
            probs = log_probs.exp()  # = softmax(scaled): one pass instead of a second softmax
        if per_row is not None:
            if isinstance(per_row, torch.Tensor):
                u = per_row.to(device=probs.device, dtype=probs.dtype)
            else:
                u = torch.stack([torch.rand((), generator=g) for g in per_row]).to(probs.device)
            cdf = probs.cumsum_(dim=-1)
            # right=True: the first index whose cdf exceeds u * total never has zero probability
            tokens = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
            tokens = tokens.clamp(max=probs.shape[-1] - 1)
        else:
            tokens = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
    return tokens, log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
