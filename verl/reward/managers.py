"""Reward managers: turn a rolled-out :class:`~verl.protocol.DataProto` into token-level scores.

A manager decodes ONLY the valid response tokens of each sample (``responses`` selected by
``response_mask``, special tokens skipped), never the prompt: a prompt that contains
"\\boxed{}" or a few-shot "#### 5" must not earn a format or answer reward. It scores the
text with a rule-based ``compute_score`` and places the reward on the last valid response token.

Registered managers (:data:`REWARD_MANAGERS`, all with the same constructor):

- ``naive``: one ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` call
  per sample, each under its own ``timeout_s`` deadline.
- ``dapo``: the same manager under verl's name for DAPO runs (set ``overlong_buffer``).
- ``gdpo``: the same manager under verl's name for GDPO runs (``compute_score`` returns a dict
  whose component keys ``algorithm.gdpo_reward_keys`` names).
- ``batch``: one ``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)``
  call for the whole batch (returning a list of B results) under one ``timeout_s`` deadline;
  use it for scorers that batch requests (e.g. to a verifier service).

Failure containment: a scorer that raises, exceeds ``timeout_s``, returns something that is
not a number, or returns NaN / ±inf gives reward 0.0 for the affected samples (all B for the
batch manager), is counted in ``reward_extra_info`` (``reward_error`` / ``reward_nonfinite`` /
``reward_timeout`` per sample) and in ``reward_metrics`` (``reward/num_errors`` — non-finite
scores included —, ``reward/num_nonfinite``, ``reward/num_timeouts``), and is logged once per
kind per manager with the sample's index and data source; it never stops training. The
trainer leaves such unscored samples out of the loss (`verl.trainer.ppo.reward_errors`). See :mod:`verl.reward.timeout` for how hung scorers are abandoned.

Every path applies the DAPO overlong penalty when ``overlong_buffer.enable``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from verl.reward.overlong import OverlongBufferConfig
from verl.reward.manager_steps import (
    SampleResult,
    ScoredBatch,
    assemble_rewards,
    check_data_sources,
    gather_inputs,
    outcome_to_result,
)
from verl.reward.scorers import default_compute_score
from verl.reward.timeout import CallOutcome, TimeoutCaller
from verl.utils.registry import Registry

logger = logging.getLogger(__name__)

REWARD_MANAGERS: Registry[Any] = Registry("reward manager")


class _ManagerSettings:
    """Constructor arguments shared by every manager (stored, validated, nothing built)."""

    def __init__(
        self,
        tokenizer: Any,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        timeout_s: float | None = 10.0,
        overlong_buffer: OverlongBufferConfig | None = None,
        max_response_length: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.uses_default_scorer = compute_score is None
        self.reward_fn_key = reward_fn_key
        self.timeout_s = timeout_s
        self.overlong_buffer = overlong_buffer or OverlongBufferConfig()
        self.overlong_buffer.validate(max_response_length)
        self.max_response_length = max_response_length
        self._caller = TimeoutCaller(timeout_s)
        self._warned: set[str] = set()

    def _warn_once(self, results: Sequence[SampleResult], data_sources: Sequence[str]) -> None:
        """Logs the first failure of each kind (error, non-finite, timeout) seen by this manager,
        with the sample's index in the batch and its data source."""
        for i, (result, source) in enumerate(zip(results, data_sources, strict=True)):
            kind = "non-finite score" if result.nonfinite else result.status
            if result.status != "ok" and kind not in self._warned:
                self._warned.add(kind)
                counter = {"error": "num_errors", "timeout": "num_timeouts"}.get(kind, "num_nonfinite")
                logger.warning(
                    "reward %s on sample %d (data_source=%r): %s; the sample gets reward 0.0 and is "
                    "left out of the loss. Further ones are only counted in reward/%s.",
                    kind, i, source, result.message, counter,
                )

    def _finish(self, batch: ScoredBatch, outcomes: list[CallOutcome], return_dict: bool) -> Any:
        results = [outcome_to_result(o) for o in outcomes]
        self._warn_once(results, batch.data_sources)
        result = assemble_rewards(
            batch,
            results,
            overlong_buffer=self.overlong_buffer,
            max_response_length=self.max_response_length,
        )
        return result if return_dict else result["reward_tensor"]


@REWARD_MANAGERS.register("naive")
class NaiveRewardManager(_ManagerSettings):
    """Scores samples one by one with ``compute_score`` (default: :func:`default_compute_score`).

    Args:
        tokenizer: Hugging Face tokenizer used to decode responses.
        compute_score: ``fn(data_source=, solution_str=, ground_truth=, extra_info=) -> float |
            dict``; None routes by data source with :func:`default_compute_score`.
        reward_fn_key: Non-tensor key holding each sample's data source.
        timeout_s: Deadline per sample in seconds (None or <= 0: no deadline, inline calls). After
            3 consecutive timeouts the rest of the batch counts as timed out without waiting.
        overlong_buffer: DAPO overlong penalty settings (disabled by default).
        max_response_length: Response budget in tokens, required when the penalty is enabled.
    """

    def __init__(self, tokenizer: Any, compute_score: Callable[..., Any] | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, compute_score, **kwargs)
        self.compute_score = compute_score or default_compute_score

    def __call__(self, data: Any, return_dict: bool = True) -> Any:
        """Scores a batch.

        Args:
            data: DataProto with ``responses (B, R)``, ``response_mask (B, R)`` and non-tensors
                ``reward_fn_key``, ``reward_model`` (dicts with ``ground_truth``), ``extra_info``.
            return_dict: Return the dict below; False returns only the reward tensor.

        Returns:
            ``{"reward_tensor": (B, R) float32, "reward_extra_info": dict[str, list],
            "reward_metrics": dict[str, float]}``.

        Raises:
            RegistryError: With the default scorer, if a data source has no registered scorer.
        """
        batch = gather_inputs(data, self.tokenizer, self.reward_fn_key)
        if self.uses_default_scorer:
            check_data_sources(batch.data_sources)
        calls = [{"data_source": batch.data_sources[i], "solution_str": batch.solution_strs[i],
                  "ground_truth": batch.ground_truths[i], "extra_info": batch.extra_infos[i]}
                 for i in range(len(batch.solution_strs))]
        # one thread handoff for the batch, a deadline per sample; a scorer that timed out
        # MAX_CONSECUTIVE_TIMEOUTS times in a row is hung: the rest of the batch is not waited for
        outcomes = self._caller.call_many(self.compute_score, calls, stop_after_timeouts=MAX_CONSECUTIVE_TIMEOUTS)
        return self._finish(batch, outcomes, return_dict)


MAX_CONSECUTIVE_TIMEOUTS = 3


REWARD_MANAGERS.add("dapo", NaiveRewardManager)
# verl's gdpo manager scores as naive: a dict result's keys become reward_extra_info, where
# algorithm.gdpo_reward_keys finds the reward components
REWARD_MANAGERS.add("gdpo", NaiveRewardManager)


def _default_batch_compute_score(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any],
) -> list[float | dict[str, Any]]:
    """Batched form of :func:`default_compute_score` (a loop; rule scorers are cheap)."""
    return [
        default_compute_score(s, r, g, e)
        for s, r, g, e in zip(data_sources, solution_strs, ground_truths, extra_infos, strict=True)
    ]


@REWARD_MANAGERS.register("batch")
class BatchRewardManager(_ManagerSettings):
    """Scores the whole batch with one call of a batched ``compute_score``.

    Args:
        tokenizer: Hugging Face tokenizer used to decode responses.
        compute_score: ``fn(data_sources=, solution_strs=, ground_truths=, extra_infos=) ->
            list`` of B floats or dicts; None loops :func:`default_compute_score`.
        reward_fn_key: Non-tensor key holding each sample's data source.
        timeout_s: Deadline for the whole batched call in seconds.
        overlong_buffer: DAPO overlong penalty settings (disabled by default).
        max_response_length: Response budget in tokens, required when the penalty is enabled.
    """

    def __init__(self, tokenizer: Any, compute_score: Callable[..., Any] | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, compute_score, **kwargs)
        self.compute_score = compute_score or _default_batch_compute_score

    def __call__(self, data: Any, return_dict: bool = True) -> Any:
        """Scores a batch; same inputs and outputs as :meth:`NaiveRewardManager.__call__`.

        A failed, timed-out or wrong-length batched call gives 0.0 to all B samples, each
        counted as an error or a timeout.
        """
        batch = gather_inputs(data, self.tokenizer, self.reward_fn_key)
        if self.uses_default_scorer:
            check_data_sources(batch.data_sources)
        n = len(batch.solution_strs)
        outcome = self._caller(
            self.compute_score,
            data_sources=batch.data_sources,
            solution_strs=batch.solution_strs,
            ground_truths=batch.ground_truths,
            extra_infos=batch.extra_infos,
        )
        if outcome.status == "ok":
            values = outcome.value
            if isinstance(values, (list, tuple)) or hasattr(values, "tolist"):
                values = list(values)
            if isinstance(values, list) and len(values) == n:
                outcomes = [CallOutcome("ok", v) for v in values]
            else:
                error = f"batched compute_score must return a list of {n} results, got {type(values).__name__}"
                outcomes = [CallOutcome("error", error=error)] * n
        else:
            outcomes = [outcome] * n
        return self._finish(batch, outcomes, return_dict)


def create_reward_manager(name: str, tokenizer: Any, **kwargs: Any) -> NaiveRewardManager | BatchRewardManager:
    """Builds the manager registered under ``name`` (``naive``, ``dapo`` or ``batch``).

    Args:
        name: Registry name.
        tokenizer: Tokenizer for decoding responses.
        **kwargs: Constructor arguments (``compute_score``, ``timeout_s``, ...).

    Returns:
        The manager.

    Raises:
        RegistryError: Listing the valid names on an unknown ``name``.
    """
    return REWARD_MANAGERS.get(name)(tokenizer, **kwargs)
