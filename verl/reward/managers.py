"""Reward managers: turn a rolled-out :class:`~verl.protocol.DataProto` into token-level scores.

A manager decodes ONLY the valid response tokens of each sample (``responses`` selected by
``response_mask``, special tokens skipped), never the prompt: a prompt that contains
"\\boxed{}" or a few-shot "#### 5" must not earn a format or answer reward. It scores the
text with a rule-based ``compute_score`` and places the reward on the last valid response token.

Registered managers (:data:`REWARD_MANAGERS`, all built with the same call, `NaiveRewardManager`'s
constructor; verl-style classes behind `verl.reward.verl_managers.VerlManagerAdapter`):

- ``naive``: one ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` call
  per sample, each under its own ``timeout_s`` deadline.
- ``dapo``: the same manager under verl's name for DAPO runs (set ``overlong_buffer``).
- ``gdpo``: the same manager under verl's name for GDPO runs (``compute_score`` returns a dict
  whose component keys ``algorithm.gdpo_reward_keys`` names).
- ``prime``: the same manager under the name of verl's process-pool manager (same values).
- ``batch``: one ``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)``
  call for the whole batch (returning a list of B results) under one ``timeout_s`` deadline;
  use it for scorers that batch requests (e.g. to a verifier service).

Failure containment (`verl.reward.scoring`, shared with ``verl eval``): a scorer that raises,
exceeds ``timeout_s``, returns something that is not a number, or returns NaN / ±inf gives
reward 0.0 for the affected samples (all B for the batch manager), is counted in
``reward_extra_info`` (``reward_error`` / ``reward_nonfinite`` / ``reward_timeout`` per sample),
in ``reward_metrics`` (``reward/num_errors`` — non-finite scores included —,
``reward/num_nonfinite``, ``reward/num_timeouts``) and in ``reward_failures`` (a
`FailureCounts`), and is logged once per kind per manager with the sample's index and data
source. A manager never raises for it: the trainer leaves such unscored samples out of the loss
(`verl.trainer.ppo.reward_errors`) and stops the run by `verl.reward.scoring.RewardFailurePolicy`.
See :mod:`verl.reward.timeout` for how hung scorers are abandoned.

Every path applies the DAPO overlong penalty when ``overlong_buffer.enable``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from verl.reward.manager_steps import (
    SampleResult,
    ScoredBatch,
    assemble_rewards,
    check_data_sources,
    gather_inputs,
)
from verl.reward.overlong import OverlongBufferConfig
from verl.reward.scorers import default_compute_score
from verl.reward.scoring import COUNTERS, MAX_CONSECUTIVE_TIMEOUTS, FailureCounts, contain, score_calls
from verl.reward.timeout import CallOutcome, TimeoutCaller
from verl.utils.registry import Registry

logger = logging.getLogger(__name__)

REWARD_MANAGERS: Registry[Any] = Registry("reward manager")
"""name -> manager factory, every one called as ``factory(tokenizer, compute_score=, reward_fn_key=,
timeout_s=, overlong_buffer=, max_response_length=, num_examine=, reward_kwargs=)`` (the
constructor of `NaiveRewardManager`); verl-style classes are registered behind
`verl.reward.verl_managers.VerlManagerAdapter`, which has the same call."""

_KIND_NAMES = {"error": "error", "nonfinite": "non-finite score", "timeout": "timeout"}


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
        num_examine: int = 0,
        reward_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.uses_default_scorer = compute_score is None
        self.reward_fn_key = reward_fn_key
        self.timeout_s = timeout_s
        self.overlong_buffer = overlong_buffer or OverlongBufferConfig()
        self.overlong_buffer.validate(max_response_length)
        self.max_response_length = max_response_length
        if num_examine < 0:
            raise ValueError(f"num_examine must be >= 0, got {num_examine}")
        self.num_examine = num_examine
        self.reward_kwargs = dict(reward_kwargs or {})
        self._caller = TimeoutCaller(timeout_s)
        self._warned: set[str] = set()

    def _bind(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with ``reward_kwargs`` bound as keyword arguments (``fn`` itself without any)."""
        return functools.partial(fn, **self.reward_kwargs) if self.reward_kwargs else fn

    @staticmethod
    def _labels(batch: ScoredBatch) -> Callable[[int], str]:
        return lambda i: f"sample {i} (data_source={batch.data_sources[i]!r})"

    def _warn_once(self, counts: FailureCounts) -> None:
        """Logs the first failure of each kind (error, non-finite, timeout) seen by this manager,
        with the sample's index in the batch and its data source."""
        for kind, where in counts.first.items():
            if kind not in self._warned:
                self._warned.add(kind)
                logger.warning(
                    "reward %s on %s; the sample gets reward 0.0 and is left out of the loss. "
                    "Further ones are only counted in reward/%s.",
                    _KIND_NAMES[kind],
                    where,
                    COUNTERS[kind],
                )

    def _examine(self, batch: ScoredBatch, results: Sequence[SampleResult]) -> None:
        """Logs (INFO) the first ``num_examine`` responses of each data source with their score."""
        shown: dict[str, int] = {}
        for i, source in enumerate(batch.data_sources):
            if shown.get(source, 0) < self.num_examine:
                shown[source] = shown.get(source, 0) + 1
                logger.info(
                    "[data_source] %s [response] %r [ground_truth] %r [score] %s (%s)",
                    source,
                    batch.solution_strs[i],
                    batch.ground_truths[i],
                    results[i].score,
                    results[i].status,
                )

    def _finish(self, batch: ScoredBatch, results: list[SampleResult], counts: FailureCounts, return_dict: bool) -> Any:
        self._warn_once(counts)
        if self.num_examine:
            self._examine(batch, results)
        result = assemble_rewards(
            batch,
            results,
            overlong_buffer=self.overlong_buffer,
            max_response_length=self.max_response_length,
        )
        result["reward_failures"] = counts
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
            3 consecutive timeouts the rest of the batch counts as timed out without waiting
            (`verl.reward.scoring`).
        overlong_buffer: DAPO overlong penalty settings (disabled by default).
        max_response_length: Response budget in tokens, required when the penalty is enabled.
        num_examine: Responses per data source logged at INFO level with their score on each
            call (verl's manager prints them; 0 = none).
        reward_kwargs: Keyword arguments bound to every ``compute_score`` call
            (``reward_model.reward_kwargs``).

    Raises:
        ValueError: An invalid enabled ``overlong_buffer`` (`OverlongBufferConfig.validate`), or
            ``num_examine`` < 0.
    """

    def __init__(self, tokenizer: Any, compute_score: Callable[..., Any] | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, compute_score, **kwargs)
        self.compute_score = self._bind(compute_score or default_compute_score)

    @staticmethod
    def per_sample_scorer(compute_score: Callable[..., Any] | None) -> Callable[..., Any]:
        """The ``fn(data_source, solution_str, ground_truth, extra_info)`` this manager calls per sample.

        ``verl reward test`` probes scorers through it; a manager without it cannot be probed.
        """
        return compute_score or default_compute_score

    def __call__(self, data: Any, return_dict: bool = True) -> Any:
        """Scores a batch.

        Args:
            data: DataProto with ``responses (B, R)``, ``response_mask (B, R)`` and non-tensors
                ``reward_fn_key``, ``reward_model`` (dicts with ``ground_truth``), ``extra_info``.
            return_dict: Return the dict below; False returns only the reward tensor.

        Returns:
            ``{"reward_tensor": (B, R) float32, "reward_extra_info": dict[str, list],
            "reward_metrics": dict[str, float], "reward_failures": FailureCounts}``.

        Raises:
            RegistryError: With the default scorer, if a data source has no registered scorer.
        """
        batch = gather_inputs(data, self.tokenizer, self.reward_fn_key)
        if self.uses_default_scorer:
            check_data_sources(batch.data_sources)
        calls = [
            {
                "data_source": batch.data_sources[i],
                "solution_str": batch.solution_strs[i],
                "ground_truth": batch.ground_truths[i],
                "extra_info": batch.extra_infos[i],
            }
            for i in range(len(batch.solution_strs))
        ]
        # one thread handoff for the batch, a deadline per sample; a scorer that timed out
        # MAX_CONSECUTIVE_TIMEOUTS times in a row is hung: the rest of the batch is not waited for
        results, counts = score_calls(
            self.compute_score, calls, self._caller, self._labels(batch), stop_after_timeouts=MAX_CONSECUTIVE_TIMEOUTS
        )
        return self._finish(batch, results, counts, return_dict)


REWARD_MANAGERS.add("dapo", NaiveRewardManager)
# verl's gdpo manager scores as naive: a dict result's keys become reward_extra_info, where
# algorithm.gdpo_reward_keys finds the reward components
REWARD_MANAGERS.add("gdpo", NaiveRewardManager)
# verl's prime manager scores each sample with compute_score in a process pool: the same values
# as naive (here in one scorer thread with a per-sample deadline)
REWARD_MANAGERS.add("prime", NaiveRewardManager)


def _default_batch_compute_score(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any],
    **kwargs: Any,
) -> list[float | dict[str, Any]]:
    """Batched form of :func:`default_compute_score` (a loop; rule scorers are cheap)."""
    return [
        default_compute_score(s, r, g, e, **kwargs)
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
        overlong_buffer, max_response_length, num_examine, reward_kwargs: As `NaiveRewardManager`
            (``reward_kwargs`` are bound to the batched call).
    """

    def __init__(self, tokenizer: Any, compute_score: Callable[..., Any] | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, compute_score, **kwargs)
        self.compute_score = self._bind(compute_score or _default_batch_compute_score)

    per_sample_note = "the batched scorer is called with batches of one"  # with a custom compute_score

    @staticmethod
    def per_sample_scorer(compute_score: Callable[..., Any] | None) -> Callable[..., Any]:
        """The batched ``compute_score`` called with batches of one, as a per-sample scorer
        (see `NaiveRewardManager.per_sample_scorer`); None gives :func:`default_compute_score`."""
        if compute_score is None:
            return default_compute_score

        def one(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any) -> Any:
            return list(
                compute_score(
                    data_sources=[data_source],
                    solution_strs=[solution_str],
                    ground_truths=[ground_truth],
                    extra_infos=[extra_info],
                )
            )[0]

        return one

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
        results, counts = contain(outcomes, self._labels(batch))
        return self._finish(batch, results, counts, return_dict)


def create_reward_manager(name: str, tokenizer: Any, **kwargs: Any) -> Any:
    """Builds the manager registered under ``name`` (any of `REWARD_MANAGERS`, verl-style ones included).

    Args:
        name: Registry name.
        tokenizer: Tokenizer for decoding responses.
        **kwargs: `NaiveRewardManager`'s constructor arguments (``compute_score``, ``timeout_s``, ...).

    Returns:
        The manager.

    Raises:
        RegistryError: Listing the valid names on an unknown ``name``.
    """
    return REWARD_MANAGERS.get(name)(tokenizer, **kwargs)
