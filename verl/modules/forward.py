"""Training-style forwards shared by the rollout engine, the actor, the critic and the reward model.

Every forward passes explicit ``position_ids`` derived from the attention mask. Under left
padding the model's default ``arange`` positions would score a row at shifted positions; rotary
models partly hide that, learned absolute position embeddings do not.

Sequence layout (T = P + R): ``input_ids = [left-padded prompt (P) | right-padded response (R)]``.
The logit at position t predicts token t + 1, so response token j (at position P + j) is scored
by the logit at position P + j − 1: the response log-probs use logits ``[P − 1, T − 1)``, i.e.
the last R + 1 logits without the final one. Values follow the same convention: ``values[:, j]``
is V of the state before response token j (verl's layout).
"""

from __future__ import annotations

import torch
from torch import nn

from verl.algorithms.logprob import logprobs_and_entropy_from_logits
from verl.algorithms.logprob_head import logprobs_from_hidden
from verl.modules.packing import (
    PackedResponses,
    check_packing_separates,
    pack_responses,
    pack_targets,
    unpack_responses,
)
from verl.modules.sp_packing import refuse_padded_under_sp, run_packed
from verl.modules.ulysses import suspended
from verl.utils.torch_functional import position_ids_from_attention_mask

__all__ = [
    "compute_log_probs",
    "compute_log_probs_and_entropy",
    "compute_rm_scores",
    "compute_token_log_probs",
    "compute_values",
    "position_ids_from_attention_mask",
    "response_logits",
]


def response_logits(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
) -> torch.Tensor:
    """Logits that score the last ``response_length`` tokens of each row.

    Only the last R + 1 positions go through the LM head (``logits_to_keep``), so the `(B, T, V)`
    logits of the prompt are never materialised.

    Args:
        module: a causal LM (transformers, peft or FSDP-wrapped).
        input_ids: `(B, T)` prompt + response ids.
        attention_mask: `(B, T)` 1 on real tokens.
        position_ids: `(B, T)` positions (`position_ids_from_attention_mask`).
        response_length: R.

    Returns:
        `(B, R, V)` logits in the model's dtype; row j predicts response token j.
    """
    refuse_padded_under_sp("response_logits")
    out = module(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        logits_to_keep=response_length + 1,
    )
    return out.logits[:, -response_length - 1 : -1]


def compute_log_probs_and_entropy(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    chunk_size: int = 512,
    compute_entropy: bool = True,
    remove_padding: bool = False,
    head_recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs and entropies of the response tokens under softmax(logits / temperature).

    ``log π(y_j) = log_softmax(z_{P+j−1} / τ)[y_j]``, the same quantity the rollout engine reports
    as ``rollout_log_probs`` (before its top-k / top-p filtering). Differentiable; the float32
    log-softmax is computed in row blocks (`verl.algorithms.logprob`). Where `fused_lm_head`
    applies, the LM head runs fused with the log-prob (`verl.algorithms.logprob_head`): same
    values, no `(K, V)` logits gradient (measured on the GSM8K shape's 1,040 scored rows: head +
    log-prob forward and backward ≈ 20 % faster than the unfused path).

    Args:
        module: causal LM.
        input_ids, attention_mask, position_ids: `(B, T)`.
        response_length: R; the responses are ``input_ids[:, -R:]``.
        temperature: τ > 0, the rollout sampling temperature.
        chunk_size: rows per float32 block.
        compute_entropy: False skips the entropy (then returned as None).
        remove_padding: packed forward of the real tokens only (`verl.modules.packing`);
            equal to the padded forward up to float rounding.
        head_recompute: fused path only: recompute each chunk's logits in backward instead of
            keeping the `(K, V)` logits (``actor.logprob_head_recompute``).

    Returns:
        (log_probs, entropy), both `(B, R)` float32. Padding positions hold finite garbage
        (0 with ``remove_padding``); mask them with ``response_mask``.
    """
    head = fused_lm_head(module)
    if remove_padding:
        packed = pack_responses(input_ids, attention_mask, position_ids, response_length)
        logp, ent = _packed_logprobs(
            module, head, packed, input_ids.device, chunk_size, compute_entropy, temperature, head_recompute
        )
        return unpack_responses(logp, packed), (unpack_responses(ent, packed) if ent is not None else None)
    refuse_padded_under_sp("compute_log_probs_and_entropy")
    labels = input_ids[:, -response_length:]
    if head is not None:
        hidden = _last_hidden(module, input_ids, attention_mask, position_ids)[:, -response_length - 1 : -1]
        logp, ent = _fused_logprobs(
            hidden.reshape(-1, hidden.shape[-1]),
            head.weight,
            labels.reshape(-1),
            chunk_size,
            compute_entropy,
            temperature,
            head_recompute,
        )
        return logp.view_as(labels), (ent.view_as(labels) if ent is not None else None)
    logits = response_logits(module, input_ids, attention_mask, position_ids, response_length)
    return logprobs_and_entropy_from_logits(
        logits, labels, chunk_size=chunk_size, compute_entropy=compute_entropy, temperature=temperature
    )


def _packed_logprobs(
    module: nn.Module,
    head: nn.Linear | None,
    packed: PackedResponses,
    device: torch.device,
    chunk_size: int,
    compute_entropy: bool,
    temperature: float,
    head_recompute: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`(K,)` log-probs (and entropies) of ``packed.labels``: one forward of the packed rows, the LM
    head on the K scored positions only (fused with the log-prob where ``head`` is given)."""
    with suspended():  # the probe runs whole sequences, the same on every rank
        if head is not None:
            check_packing_separates(module, lambda i, m, p: _last_hidden(module, i, m, p), device)
        else:
            check_packing_separates(
                module,
                lambda i, m, p: module(input_ids=i, attention_mask=m, position_ids=p, use_cache=False).logits,
                device,
            )

    def forward(
        ids: torch.Tensor, pos: torch.Tensor, keep: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if head is not None:
            hidden = _last_hidden(module, ids, None, pos)[keep]  # row-major, the order of ``labels``
            return _fused_logprobs(
                hidden, head.weight, labels, chunk_size, compute_entropy, temperature, head_recompute
            )
        logits = _kept_logits(module, ids, None, pos, keep)
        return logprobs_and_entropy_from_logits(
            logits, labels, chunk_size=chunk_size, compute_entropy=compute_entropy, temperature=temperature
        )

    logp, ent = run_packed(packed, device, forward)  # split over the Ulysses SP group when one is active
    return logp, ent


def _kept_logits(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor,
    keep: torch.Tensor,
) -> torch.Tensor:
    """`(K, V)` logits of the model's own forward at the K positions of the boolean `(rows, L)`
    ``keep``, in row-major order: through ``logits_to_keep`` where this transformers takes a mask,
    else from the full logits (`_logits_to_keep_takes_masks`)."""
    mask_keep = _logits_to_keep_takes_masks()
    out = module(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        logits_to_keep=keep if mask_keep else 0,
    )
    logits = out.logits if mask_keep else out.logits[keep]
    return logits.reshape(-1, logits.shape[-1])


def compute_token_log_probs(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    targets: torch.Tensor,
    chunk_size: int = 1024,
    remove_padding: bool = False,
) -> torch.Tensor:
    """``log π(x_t | x_<t)`` of the marked tokens of each row, the supervised trainers' forward (SFT, DPO).

    Only the K target positions go through the LM head (fused with the log-prob where
    `fused_lm_head` applies), so neither the `(B, T, V)` logits nor their log-softmax exist: the
    head's memory is `chunk_size × V` floats, not `B × T × V` (same values as a full
    ``log_softmax(logits)`` gathered at the targets, up to float rounding).

    Args:
        module: causal LM (transformers, peft or FSDP-wrapped).
        input_ids, attention_mask, position_ids: `(B, T)` rows, any padding side.
        targets: `(B, T)` bool, True on the real tokens to score (an SFT ``loss_mask``, a DPO
            response); each needs a real token before it in its row.
        chunk_size: rows per float32 log-softmax block.
        remove_padding: packed forward of the real tokens only (`verl.modules.packing.pack_targets`).

    Returns:
        `(B, T)` float32, the log-prob of token t at column t where ``targets``, 0 elsewhere.

    Raises:
        ValueError: a target is padding or has no real token before it.
    """
    head = fused_lm_head(module)
    targets = targets.bool()
    if remove_padding:
        packed = pack_targets(input_ids, attention_mask, position_ids, targets)
        logp, _ = _packed_logprobs(module, head, packed, input_ids.device, chunk_size, False, 1.0, False)
        return unpack_responses(logp, packed)
    refuse_padded_under_sp("compute_token_log_probs")
    real = attention_mask.bool()
    before = torch.zeros_like(real)
    before[:, 1:] = real[:, :-1]
    if bool((targets & ~(real & before)).any()):
        raise ValueError("a scored token is padding or has no real token before it")
    rows, cols = targets.nonzero(as_tuple=True)  # row-major
    labels = input_ids[rows, cols]
    if head is not None:
        hidden = _last_hidden(module, input_ids, attention_mask, position_ids)[rows, cols - 1]
        logp, _ = _fused_logprobs(hidden, head.weight, labels, chunk_size, False, 1.0, False)
    else:
        keep = torch.zeros_like(targets)
        keep[:, :-1] = targets[:, 1:]  # the position before each target, in the same row-major order
        logits = _kept_logits(module, input_ids, attention_mask, position_ids, keep)
        logp, _ = logprobs_and_entropy_from_logits(logits, labels, chunk_size=chunk_size, compute_entropy=False)
    return logp.new_zeros(targets.shape).index_put((rows, cols), logp)


# Config fields by which a transformers causal LM changes its logits after the LM-head matmul
# (soft-capping, a multiplier or a divisor); a value of None, 0 or 1 leaves them unchanged.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier")


def fused_lm_head(module: nn.Module) -> nn.Linear | None:
    """The LM head when the fused head + log-prob path applies to ``module``, else None.

    It applies to a plain (unwrapped, unsharded) transformers causal LM whose logits are exactly
    ``last_hidden_state @ lm_head.weightᵀ``: an ``nn.Linear`` head without bias, no logit
    soft-capping or scaling in its config or its ``text_config`` (`LOGIT_TRANSFORMS`: Gemma 2's
    ``final_logit_softcapping``, Cohere's ``logit_scale``, Granite's ``logits_scaling``, ...).
    Peft-wrapped models (LoRA may adapt the head) and FSDP2 shards (the root's unshard hook runs
    only when the whole model is called) take the unfused path: the model's own forward with
    ``logits_to_keep``, then the chunked log-prob. Under autocast the fused head runs in the
    autocast dtype, as the model's own head would.
    """
    from torch.distributed.tensor import DTensor
    from transformers import PreTrainedModel

    if not isinstance(module, PreTrainedModel):
        return None
    head = module.get_output_embeddings()
    base = getattr(module, module.base_model_prefix, None)
    cfg = module.config
    configs = [cfg, getattr(cfg, "text_config", None)]
    transformed = any(
        getattr(c, k, None) not in (None, 1.0, 0.0) for c in configs if c is not None for k in LOGIT_TRANSFORMS
    )
    if (
        type(head) is not nn.Linear
        or head.bias is not None
        or base is None
        or base is module
        or isinstance(head.weight, DTensor)
        or transformed
    ):
        return None
    return head


def _fused_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int,
    compute_entropy: bool,
    temperature: float,
    recompute: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`logprobs_from_hidden` in the dtype autocast would give the head's matmul (mixed precision:
    bf16 hidden and weight, a differentiable cast, so the float32 weight still gets its gradient)."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device_type=device, enabled=False):
            return logprobs_from_hidden(
                hidden.to(dtype), weight.to(dtype), labels, chunk_size, compute_entropy, temperature, recompute
            )
    hidden = hidden.to(weight.dtype)  # a float32 final norm in a bf16 model: the head's own dtype
    return logprobs_from_hidden(hidden, weight, labels, chunk_size, compute_entropy, temperature, recompute)


def _last_hidden(
    module: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor
) -> torch.Tensor:
    """`(rows, L, H)` final hidden states (after the final norm) of ``module``'s decoder."""
    base = getattr(module, module.base_model_prefix)
    out = base(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    return out.last_hidden_state


def _logits_to_keep_takes_masks() -> bool:
    """Whether this transformers accepts a boolean ``(rows, L)`` mask as ``logits_to_keep``
    (``modeling_utils.slice_logits_to_keep``, 5.20+). Earlier releases index ``hidden[:, mask, :]``
    and fail on a 2-D mask (seen with 5.17 on a GPU check), so the LM head then runs on every
    position and the scored rows are selected afterwards: same values, more LM-head work."""
    import transformers.modeling_utils as mu

    return hasattr(mu, "slice_logits_to_keep")


def compute_log_probs(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    chunk_size: int = 512,
) -> torch.Tensor:
    """Response log-probs ``log softmax(z / τ)[y]``, `(B, R)` float32 (see `compute_log_probs_and_entropy`)."""
    logp, _ = compute_log_probs_and_entropy(
        module, input_ids, attention_mask, position_ids, response_length, temperature, chunk_size, compute_entropy=False
    )
    return logp


def _critic_probe(
    critic: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor
) -> torch.Tensor:
    """`(rows, L, H)` hidden states of the critic's backbone (a fresh value head is zero, so the values
    alone cannot show attention across sequences), captured by a hook while the whole critic runs
    (an FSDP2 root unshards its parameters only when it is called itself); `(rows, L, 1)` values
    when the critic has no ``backbone``."""
    backbone = getattr(critic, "backbone", None)
    captured: list[torch.Tensor] = []
    handle = (
        backbone.register_forward_hook(lambda _m, _i, out: captured.append(out.last_hidden_state)) if backbone else None
    )
    try:
        values = critic(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    finally:
        if handle is not None:
            handle.remove()
    return captured[0] if captured else values[..., None]


def compute_values(
    critic: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    remove_padding: bool = False,
) -> torch.Tensor:
    """Critic values of the states before each response token.

    Args:
        critic: a `ValueModel` (``forward(...) -> (B, T)``).
        input_ids, attention_mask, position_ids: `(B, T)`.
        response_length: R.
        remove_padding: packed forward of the real tokens only (`verl.modules.packing`).

    Returns:
        `(B, R)` float32, ``values[:, j] = V(prompt + response[:j])`` (position P + j − 1); 0 on
        padding with ``remove_padding``.
    """
    if remove_padding:
        packed = pack_responses(input_ids, attention_mask, position_ids, response_length)
        device = input_ids.device
        with suspended():  # the probe runs whole sequences, the same on every rank
            check_packing_separates(critic, lambda i, m, p: _critic_probe(critic, i, m, p), device)
        (values,) = run_packed(
            packed,
            device,
            lambda i, p, keep, _labels: (critic(input_ids=i, attention_mask=None, position_ids=p)[keep],),
        )
        return unpack_responses(values, packed)
    refuse_padded_under_sp("compute_values")
    values = critic(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    return values[:, -response_length - 1 : -1]


def compute_rm_scores(
    reward_model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
) -> torch.Tensor:
    """Sequence scores of a ``*ForSequenceClassification`` reward model at the last real token.

    Hugging Face's classifier forward finds the last token by value (``input_ids != pad_id``),
    which picks the wrong token when pad == eos and the response ends in EOS.
    Here the per-position output of the ``score`` head is captured with a forward hook and the
    score is read at the last position whose attention mask is 1, whatever the token values are.

    Args:
        reward_model: a sequence classifier with one label and a ``score`` head.
        input_ids, attention_mask, position_ids: `(B, T)`.

    Returns:
        `(B,)` float32 scores.

    Raises:
        TypeError: if the model has no ``score`` head.
    """
    head = getattr(reward_model, "score", None)
    if head is None:
        raise TypeError(f"{type(reward_model).__name__} has no 'score' head")
    captured: dict[str, torch.Tensor] = {}
    # the whole model runs (so FSDP2 unshards every parameter, head included); the head's
    # per-position output is captured before Hugging Face pools it by token value
    handle = head.register_forward_hook(lambda _m, _i, out: captured.__setitem__("scores", out))
    try:
        reward_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    finally:
        handle.remove()
    per_position = captured["scores"]  # (B, T, 1)
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)
    last = (positions * attention_mask.long()).argmax(dim=-1)
    return per_position[torch.arange(per_position.shape[0], device=per_position.device), last].squeeze(-1).float()
