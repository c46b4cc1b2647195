"""``trainer.alarms.*`` and ``trainer.sentinel.*``: run guards against silent training failures.

Alarms watch for reward hacking and only warn (``alarm/*`` metrics, one line when an alarm first
fires); the sentinel watches for numerical divergence and, on a trip, writes an incident bundle
and warns, stops or rolls back (`verl.trainer.guards`). These are not verl keys. Every threshold
lives here, each field documented right under it; range checks are `check_alarms` /
`check_sentinel` (rollback's need for checkpoints is checked with the trainer section).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.errors import ConfigError

__all__ = ["AlarmsConfig", "SENTINEL_ACTIONS", "SentinelConfig", "check_alarms", "check_sentinel"]

SENTINEL_ACTIONS = ("warn", "stop", "rollback")


@dataclass
class AlarmsConfig:
    """Live reward-hacking alarms, evaluated after every RL step (`verl.trainer.guards.alarms`)."""

    enable: bool = True
    # Compute the alarm/* metrics and print one line when an alarm first fires; false = off.
    # Alarms never stop a run.
    window: int = 5
    # Steps per trend window (>= 1): the length alarm compares the mean of the last `window` steps
    # with the mean of the `window` steps before them (so it needs 2 x window steps).
    length_growth: float = 1.5
    # Length explosion: response_length/mean of the last window over the previous window (> 1) at
    # or above this, while critic/score/mean rose between the two windows.
    min_length_increase: float = 16.0
    # ... and the mean response length grew by at least this many tokens (>= 0): a 2 -> 3 token
    # change is not an explosion.
    zero_variance_share: float = 0.9
    # Share of prompt groups (same uid) whose samples all got the same score (in [0, 1]): such groups
    # give group-baseline estimators no signal. Fires at or above it for `patience` steps in a row.
    format_only_share: float = 0.5
    # Share of the step's positive reward earned by samples the scorer marks incorrect (its per-sample
    # `acc` is false) (in [0, 1]), for `patience` steps in a row; needs a scorer that reports `acc`
    # (the built-in ones do), else the alarm is not computed.
    divergence_reward_rise: float = 0.05
    # Train/validation divergence: the mean training score since the best validation rose by at least
    # this (reward units, >= 0) ...
    divergence_val_drop: float = 0.05
    # ... while validation accuracy (val/accuracy, else the mean of val-core/*/acc/mean@N) fell at
    # least this far below its best (absolute, > 0). Evaluated on the step after each validation.
    clip_ratio: float = 1.0
    # response_length/clip_ratio (share of responses cut at max_response_length, in (0, 1]) at or
    # above this for `patience` steps in a row: the policy runs into the length limit.
    patience: int = 3
    # Consecutive steps a share or clip condition must hold before the alarm fires (>= 1).


@dataclass
class SentinelConfig:
    """Divergence sentinel: trips on numerical trouble and writes an incident bundle (`verl.trainer.guards`)."""

    enable: bool = True
    # Check every step; false = off (no bundles, no replay window kept).
    action: str = "warn"
    # On a trip, after writing the bundle: warn (print one line, continue) | stop (raise, exit 1) |
    # rollback (restore the last good checkpoint, skip the tripping batch, continue; needs
    # trainer.save_freq > 0).
    warmup_steps: int = 5
    # Good steps seen before the grad-norm, entropy and reward checks arm (>= 1); the non-finite and
    # rollout-KL checks are always armed.
    window: int = 20
    # Good steps in the running statistics of the z-scores (>= 2).
    grad_norm_z: float = 6.0
    # Trip when the z-score of log(actor/grad_norm) against the window exceeds this (> 0); the window's
    # std is floored at 0.25 (log units), so at least a e^(0.25 z) ~ 4.5x jump trips at 6.
    entropy_jump: float = 1.0
    # Trip when the policy entropy (actor/entropy, else actor/entropy_rollout) changes from the
    # previous good step by more than a factor 1 + entropy_jump (either way, > 0).
    reward_collapse_z: float = 6.0
    # Trip when critic/score/mean falls below the window mean by more than this many window stds
    # (std floored at 0.05 reward units, > 0).
    rollout_kl_max: float = 0.1
    # Trip when training/rollout_k3_kl (KL of the training policy vs the rollout engine's
    # log-probs, nats per token) exceeds this (> 0); skipped when the metric is absent.
    max_bundles: int = 3
    # Incident bundles written per run at most (>= 0); later trips only print.
    replay_window: int = 4
    # Actor update batches kept in memory since the last checkpoint (>= 1), so that `verl replay`
    # can re-run the steps from that checkpoint exactly; a bundle whose checkpoint is further back
    # is marked not exact. Memory: one step's update batch (token ids and (B, R) floats) each.
    incident_dir: Optional[str] = None
    # Where bundles go (incident_step_<N>/ inside); None = <trainer.output_dir>/incidents.


def check_alarms(a: AlarmsConfig, prefix: str) -> None:
    """Ranges of ``trainer.alarms.*``.

    Raises:
        ConfigError: naming the first field out of range.
    """
    rules = [
        ("window", a.window >= 1, ">= 1"),
        ("length_growth", a.length_growth > 1, "> 1"),
        ("min_length_increase", a.min_length_increase >= 0, ">= 0"),
        ("zero_variance_share", 0 <= a.zero_variance_share <= 1, "in [0, 1]"),
        ("format_only_share", 0 <= a.format_only_share <= 1, "in [0, 1]"),
        ("divergence_reward_rise", a.divergence_reward_rise >= 0, ">= 0"),
        ("divergence_val_drop", a.divergence_val_drop > 0, "> 0"),
        ("clip_ratio", 0 < a.clip_ratio <= 1, "in (0, 1]"),
        ("patience", a.patience >= 1, ">= 1"),
    ]
    _raise_first(a, prefix, rules)


def check_sentinel(s: SentinelConfig, prefix: str) -> None:
    """Ranges and the action of ``trainer.sentinel.*``.

    Raises:
        ConfigError: naming the first field out of range, or an unknown action.
    """
    if s.action not in SENTINEL_ACTIONS:
        raise ConfigError(f"{prefix}.action: must be one of {', '.join(SENTINEL_ACTIONS)}, got {s.action!r}")
    rules = [
        ("warmup_steps", s.warmup_steps >= 1, ">= 1"),
        ("window", s.window >= 2, ">= 2"),
        ("grad_norm_z", s.grad_norm_z > 0, "> 0"),
        ("entropy_jump", s.entropy_jump > 0, "> 0"),
        ("reward_collapse_z", s.reward_collapse_z > 0, "> 0"),
        ("rollout_kl_max", s.rollout_kl_max > 0, "> 0"),
        ("max_bundles", s.max_bundles >= 0, ">= 0"),
        ("replay_window", s.replay_window >= 1, ">= 1"),
    ]
    _raise_first(s, prefix, rules)


def _raise_first(section: object, prefix: str, rules: list[tuple[str, bool, str]]) -> None:
    for name, ok, expect in rules:
        if not ok:
            raise ConfigError(f"{prefix}.{name}: must be {expect}, got {getattr(section, name)!r}")
