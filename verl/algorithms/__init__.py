"""RL algorithm library: pure functions on tensors.

No DataProto, no config objects, no logging, no process groups: inputs are tensors and plain
scalars, outputs are tensors plus a dict of metrics. Shapes: B sequences, R response length,
V vocabulary; masks are bool/float `(B, R)`, 1 where a token counts.

- `advantages` / `group_advantages` / `group_advantages_verl` / `token_baselines`:
  `ADV_ESTIMATORS` registry and `compute_advantage`
- `policy_loss` / `policy_loss_cov` / `policy_loss_variants` / `policy_loss_bypass`:
  `POLICY_LOSSES` registry (per-token losses)
- `aggregation`: `agg_loss`, the only reduction of a per-token loss
- `kl`: KL estimators, KL controllers, in-reward KL penalty
- `value`: clipped critic loss
- `masked`, `logprob`, `groups`: masked statistics, (chunked) log-probs and entropy, group stats
"""

from __future__ import annotations

# these modules register their entries on import.
from verl.algorithms import group_advantages as _group_advantages  # noqa: F401
from verl.algorithms import group_advantages_verl as _group_advantages_verl  # noqa: F401
from verl.algorithms import policy_loss_bypass as _policy_loss_bypass  # noqa: F401
from verl.algorithms import policy_loss_cov as _policy_loss_cov  # noqa: F401
from verl.algorithms import policy_loss_variants as _policy_loss_variants  # noqa: F401
from verl.algorithms import token_baselines as _token_baselines  # noqa: F401
from verl.algorithms.advantages import (
    ADV_ESTIMATORS,
    AdvantageConfig,
    AdvantageEstimatorFn,
    compute_advantage,
    estimator_inputs,
)
from verl.algorithms.aggregation import LOSS_AGG_MODES, agg_loss, loss_normalizers
from verl.algorithms.kl import (
    KL_PENALTY_TYPES,
    AdaptiveKLController,
    FixedKLController,
    KLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
)
from verl.algorithms.logprob import (
    entropy_from_logits,
    logprobs_and_entropy_from_logits,
    logprobs_from_logits,
)
from verl.algorithms.masked import (
    compute_response_mask_from_lengths,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    zero_masked,
)
from verl.algorithms.policy_loss import POLICY_LOSSES, PolicyLossFn
from verl.algorithms.value import compute_value_loss

__all__ = [
    "ADV_ESTIMATORS",
    "KL_PENALTY_TYPES",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "AdvantageConfig",
    "AdvantageEstimatorFn",
    "FixedKLController",
    "KLController",
    "PolicyLossFn",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_response_mask_from_lengths",
    "compute_value_loss",
    "entropy_from_logits",
    "estimator_inputs",
    "get_kl_controller",
    "kl_penalty",
    "logprobs_and_entropy_from_logits",
    "logprobs_from_logits",
    "loss_normalizers",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "zero_masked",
]
