"""Task streams of the supervised trainers: what one optimizer step takes from each data source.

A *stream* owns its data, its sampler and its loss. `verl sft` trains on one ``sft`` stream,
`verl dpo` on one ``dpo`` stream, and ``trainer.algorithm=hybrid`` on several (``sft``, ``dpo``
and ``rl``, see `verl.trainer.supervised.rl_stream`); the trainer loop is the same for all three
(`verl.trainer.sft_trainer`).

Per optimizer step a stream contributes exactly ``batch_size`` rows (SFT sequences, DPO pairs,
RL prompts), the next ones of its own shuffled epoch: stream i at step s reads rows
``[(s−1) mod E_i · b_i, …)`` of the permutation of epoch ``(s−1) div E_i`` (E_i = rows // b_i
batches per epoch, the incomplete last batch dropped). The permutation depends only on
``trainer.seed`` and the epoch, so a resumed run reads exactly the rows it would have read.
With data parallelism each rank takes a contiguous ``b_i / world_size`` slice of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from verl.algorithms.dpo import dpo_loss, dpo_metric_sums
from verl.algorithms.masked import masked_sum
from verl.algorithms.sft import sft_loss
from verl.engine.base import GlobalCounts, MicroBatchSpec
from verl.protocol import DataProto

__all__ = ["DPOStream", "SFTStream", "StepSampler", "sequence_logps", "token_log_probs"]


@dataclass
class StepSampler:
    """Row indices of step ``s`` of one stream (see the module docstring).

    Args:
        num_rows: rows in the stream's dataset.
        batch_size: rows per step, global.
        seed: shuffle seed (``trainer.seed``).
        shuffle: False keeps file order.
    """

    num_rows: int
    batch_size: int
    seed: int
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.batch_size > self.num_rows:
            raise ValueError(f"batch size {self.batch_size} is larger than the dataset ({self.num_rows} rows)")
        self.steps_per_epoch = self.num_rows // self.batch_size

    def indices(self, step: int, rank: int = 0, world_size: int = 1) -> list[int]:
        """This rank's row indices for optimizer step ``step`` (1-based)."""
        epoch, k = divmod(step - 1, self.steps_per_epoch)
        if self.shuffle:
            perm = torch.randperm(self.num_rows, generator=torch.Generator().manual_seed(self.seed * 100003 + epoch))
        else:
            perm = torch.arange(self.num_rows)
        rows = perm[k * self.batch_size : (k + 1) * self.batch_size].tolist()
        share = self.batch_size // world_size
        return rows[rank * share : (rank + 1) * share]


def token_log_probs(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    remove_padding: bool = False,
) -> torch.Tensor:
    """log π(token t | tokens < t) of the loss tokens, `(B, T − 1)` float32 (column t − 1 scores
    token t, aligned with ``loss_mask[:, 1:]``), 0 off the loss tokens.

    Only the loss tokens go through the LM head (`verl.modules.forward.compute_token_log_probs`):
    no `(B, T, V)` logits. ``remove_padding`` packs the real tokens (``use_remove_padding``).
    A loss token in column 0 has nothing before it and is not scored (as ``loss_mask[:, 1:]`` drops it).
    """
    from verl.modules.forward import compute_token_log_probs

    targets = loss_mask.bool() & attention_mask.bool()
    targets[:, 0] = False
    return compute_token_log_probs(
        module, input_ids, attention_mask, position_ids, targets, remove_padding=remove_padding
    )[:, 1:]


def _device_of(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device


def _micro_log_probs(
    module: torch.nn.Module, micro: DataProto, prefix: str, remove_padding: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_log_probs` `(b, T − 1)` of a micro-batch's ``<prefix>`` rows and their ``loss_mask`` `(b, T)`,
    on the module's device."""
    b, dev = micro.batch, _device_of(module)
    ids, attn, pos, mask = (
        b[f"{prefix}{k}"].to(dev) for k in ("input_ids", "attention_mask", "position_ids", "loss_mask")
    )
    return token_log_probs(module, ids, attn, pos, mask, remove_padding), mask


def sequence_logps(
    module: torch.nn.Module, micro: DataProto, prefix: str, length_normalize: bool, remove_padding: bool = False
) -> torch.Tensor:
    """Σ (or mean, ``length_normalize``) of the response-token log-probs of each row, `(B,)`."""
    lp, mask = _micro_log_probs(module, micro, prefix, remove_padding)
    m = mask[:, 1:].to(lp.dtype)
    total = masked_sum(lp, m, axis=-1)  # selected: a -inf log-prob off the mask must not give 0 * -inf = NaN
    return total / m.sum(-1).clamp(min=1) if length_normalize else total


class SFTStream:
    """SFT rows with the token-mean NLL over the global step's response tokens.

    ``remove_padding``: packed forwards of the real tokens (the root key ``use_remove_padding``);
    equal to the padded forward up to float rounding.
    """

    kind = "sft"
    mask_key = "loss_mask"

    def __init__(
        self,
        name: str,
        dataset: Any,
        batch_size: int,
        micro: MicroBatchSpec,
        pad_id: int,
        seed: int,
        shuffle: bool = True,
        remove_padding: bool = False,
    ) -> None:
        from verl.data.sft_dataset import collate_right_padded

        self.name, self.dataset, self.micro, self.remove_padding = name, dataset, micro, remove_padding
        self.sampler = StepSampler(len(dataset), batch_size, seed, shuffle)
        self._collate: Callable[[list], dict] = lambda items: collate_right_padded(items, pad_id)

    def batch(self, step: int, rank: int, world_size: int) -> DataProto:
        """This rank's rows of step ``step`` as a DataProto `(b, T)`."""
        items = [self.dataset[i] for i in self.sampler.indices(step, rank, world_size)]
        return DataProto.from_dict(tensors=self._collate(items))

    def prepare(self, batch: DataProto, step: int) -> tuple[DataProto, dict[str, float]]:
        """Nothing to precompute for SFT."""
        return batch, {}

    def loss_fn(
        self, weight: float
    ) -> Callable[[torch.nn.Module, DataProto, GlobalCounts], tuple[torch.Tensor, dict[str, float]]]:
        """``weight ·`` the SFT loss of a micro-batch; metric ``loss`` sums to the step's token-mean NLL."""

        def fn(
            module: torch.nn.Module, micro: DataProto, counts: GlobalCounts
        ) -> tuple[torch.Tensor, dict[str, float]]:
            lp, mask = _micro_log_probs(module, micro, "", self.remove_padding)
            loss, m = sft_loss(lp, mask[:, 1:], counts.tokens)
            return weight * loss, {"loss": float(loss.detach()), "tokens": m["tokens"]}

        return fn

    def eval_forward(self, module: torch.nn.Module, micro: DataProto) -> dict[str, torch.Tensor]:
        """Per-row summed NLL and token count (validation loss = Σ nll / Σ tokens)."""
        lp, mask = _micro_log_probs(module, micro, "", self.remove_padding)
        m = mask[:, 1:].to(lp.dtype)
        return {"nll": -(lp * m).sum(-1), "tokens": m.sum(-1)}


class DPOStream:
    """Preference pairs with the DPO / IPO loss against reference log-probs computed once per batch.

    Args:
        reference: ``reference(batch) -> (ref_chosen_logps, ref_rejected_logps)`` `(b,)` each,
            evaluated without gradient before the step (a frozen copy of the initial policy, or
            the actor with its LoRA adapters disabled).
        dpo: the ``dpo`` config section (``beta``, ``loss_type``, ``label_smoothing``).
        remove_padding: packed forwards (``use_remove_padding``), the reference's included.
    """

    kind = "dpo"
    mask_key = "chosen_loss_mask"

    def __init__(
        self,
        name: str,
        dataset: Any,
        batch_size: int,
        micro: MicroBatchSpec,
        pad_id: int,
        seed: int,
        reference: Callable[[DataProto], tuple[torch.Tensor, torch.Tensor]],
        dpo: Any,
        shuffle: bool = True,
        remove_padding: bool = False,
    ) -> None:
        from verl.data.dpo_dataset import collate_pairs

        self.name, self.dataset, self.micro, self.reference, self.dpo = name, dataset, micro, reference, dpo
        self.remove_padding = remove_padding
        self.sampler = StepSampler(len(dataset), batch_size, seed, shuffle)
        self._collate: Callable[[list], dict] = lambda items: collate_pairs(items, pad_id)
        # IPO is defined on length-normalised log-probs (as in TRL); DPO on summed ones
        self.length_normalize = dpo.loss_type == "ipo"

    def batch(self, step: int, rank: int, world_size: int) -> DataProto:
        """This rank's pairs of step ``step``."""
        items = [self.dataset[i] for i in self.sampler.indices(step, rank, world_size)]
        return DataProto.from_dict(tensors=self._collate(items))

    def prepare(self, batch: DataProto, step: int) -> tuple[DataProto, dict[str, float]]:
        """Attach ``ref_chosen_logps`` / ``ref_rejected_logps`` `(b,)`, once per batch."""
        ref_c, ref_r = self.reference(batch)
        batch.batch["ref_chosen_logps"], batch.batch["ref_rejected_logps"] = ref_c, ref_r
        return batch, {}

    def policy_forward(self, module: torch.nn.Module, micro: DataProto) -> dict[str, torch.Tensor]:
        """``chosen_logps`` and ``rejected_logps`` `(b,)` of ``module`` (the reference's forward too)."""
        return {
            side + "_logps": sequence_logps(module, micro, side + "_", self.length_normalize, self.remove_padding)
            for side in ("chosen", "rejected")
        }

    def loss_fn(
        self, weight: float
    ) -> Callable[[torch.nn.Module, DataProto, GlobalCounts], tuple[torch.Tensor, dict[str, float]]]:
        """``weight ·`` Σ pair losses / global pairs; metrics sum to the step's pair means."""

        def fn(
            module: torch.nn.Module, micro: DataProto, counts: GlobalCounts
        ) -> tuple[torch.Tensor, dict[str, float]]:
            out = self.policy_forward(module, micro)
            dev = out["chosen_logps"].device
            ref_c, ref_r = micro.batch["ref_chosen_logps"].to(dev), micro.batch["ref_rejected_logps"].to(dev)
            losses = dpo_loss(
                out["chosen_logps"],
                out["rejected_logps"],
                ref_c,
                ref_r,
                beta=self.dpo.beta,
                loss_type=self.dpo.loss_type,
                label_smoothing=self.dpo.label_smoothing,
            )
            loss = losses.sum() / counts.sequences
            sums = dpo_metric_sums(out["chosen_logps"], out["rejected_logps"], ref_c, ref_r, self.dpo.beta)
            metrics = {k: v / counts.sequences for k, v in sums.items()}
            metrics["loss"] = float(loss.detach())
            return weight * loss, metrics

        return fn
