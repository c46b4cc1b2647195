"""`AgentLoopRollout`: a rollout engine whose rows run through agent loops, batched back.

Each row picks its loop by the batch's ``agent_name`` non-tensor (verl's column); rows without
one use ``tool_agent`` when ``multi_turn.enable`` is true, else ``agent.default_agent_loop``. All
trajectories of a batch run concurrently in one asyncio event loop over the engine's token-level
request API (`verl.workers.rollout.hf.hf_server.HFTokenServer` for ``hf``, vLLM's async engine for
``vllm``: `verl.workers.rollout.vllm.vllm_async.VLLMAsyncTokenEngine`), and are assembled into
the usual `DataProto` layout (``rollout_log_probs`` is left out when the inner engine's
``returns_log_probs`` is false; an inner engine with ``sleep()`` is put to sleep after the batch,
its ``token_engine()`` wakes it; `verl.workers.rollout.layout.assemble`, the layout of the engines):

    prompts            (B, P)   left-padded to rollout.prompt_length (tool schemas included)
    responses          (B, R)   every token after the prompt, right-padded, R = response_length
    response_mask      (B, R)   1 on model-generated tokens, 0 on tool / user tokens and padding
    rollout_log_probs  (B, R)   sampling log-probs of model tokens, 0 elsewhere
    input_ids / attention_mask / position_ids  (B, P + R)  attention 1 on every real token
    non-tensors: num_turns (B,), tool_calls, messages, tool_rewards, turn_scores (per row),
                 tokenization_mismatch (B,), aborted (B,) and failed (B,) 0/1 flags

Row i's trajectory samples with seed ``row_seeds(...)[i]`` (`verl.workers.rollout.layout.row_seeds`:
``sample_seeds``, else derived from ``meta_info["seed"]``), the seed the engines give row i, so
``single_turn_agent`` reproduces the engine's ``generate_sequences`` token for token.

A row whose agent loop raises (a bug in an interaction, a chat template that cannot
append a turn, an engine error for that request) fails alone: it comes back like an aborted
row, with its prompt and an empty response (``response_mask`` all 0, so it adds nothing to the
loss), flagged in ``failed`` and logged with its error as one warning line. Only a batch in which
every row failed raises, with row 0's own error (nothing is left to train on: a configuration
or engine error).

A batch whose rows all use ``single_turn_agent`` in ``rollout.mode=sync`` goes straight to the
engine's batched ``generate_sequences`` (same tokens, no event loop); ``mode=async`` sends it
through the agent loops as well.

``rollout.over_sample_rate`` r > 0 (training batches only, as in verl): once ``ceil((1 - r) * B)``
trajectories have finished, the rest are aborted and come back with an empty response
(flagged in ``aborted``; `verl.workers.rollout.trajectories.agent_loop_metrics` counts them).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.utils.arrays import object_array
from verl.workers.rollout import layout
from verl.workers.rollout.agent_loop.base import AGENT_LOOPS, AgentContext, AgentLoopOutput, AgentRow
from verl.workers.rollout.agent_loop.chat import ChatTemplate
from verl.workers.rollout.partial import NOT_SAMPLED
from verl.workers.rollout.sampling import resolve_sampling

__all__ = ["AgentLoopRollout", "builtin_config_file"]

logger = logging.getLogger(__name__)


def builtin_config_file(path: str, kind: str) -> str:
    """``builtin://NAME`` -> the shipped ``verl/tools/configs/NAME_<kind>_config.yaml`` (kind ``tool``
    or ``interaction``); any other path as given.

    Raises:
        ValueError: an unknown built-in name (lists the shipped ones).
    """
    from verl.tools.registry import BUILTIN_CONFIG_DIR

    if not str(path).startswith("builtin://"):
        return str(path)
    name = str(path)[len("builtin://") :]
    file = BUILTIN_CONFIG_DIR / f"{name}_{kind}_config.yaml"
    if not file.is_file():
        known = sorted(p.name[: -len(f"_{kind}_config.yaml")] for p in BUILTIN_CONFIG_DIR.glob(f"*_{kind}_config.yaml"))
        raise ValueError(f"no built-in {kind} config {name!r}; built-in: {', '.join(known)}")
    return str(file)


class AgentLoopRollout:
    """Rollout engine wrapper (`RolloutEngine`) that runs agent loops.

    Args:
        engine: the inner engine (``generate_sequences``, ``update_weights``; served as a token
            engine by `verl.workers.rollout.hf.hf_server.as_token_engine`).
        config: the rollout section (`RolloutConfig`).
        tokenizer: the actor's tokenizer.
        template_kwargs: extra ``apply_chat_template`` keywords; a batch's
            ``meta_info["apply_chat_template_kwargs"]`` (the trainer passes ``data.apply_chat_template_kwargs``) wins.

    Raises:
        ValueError: from loading the tool or interaction config files, or tools with a tokenizer
            whose chat template ignores them.
    """

    def __init__(self, engine: Any, config: Any, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        self.engine, self.config, self.tokenizer = engine, config, tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        mt = config.multi_turn
        self.tools: dict[str, Any] = {}
        self.interactions: dict[str, Any] = {}
        if mt.tool_config_path:
            from verl.tools.registry import load_tools

            self.tools = load_tools(builtin_config_file(mt.tool_config_path, "tool"))
        if mt.function_tool_path:  # verl's plain-function tools (@function_tool), beside the configured ones
            from verl.tools.function_tool import FunctionToolAdapter, load_function_tools_from_path

            self.tools.update(
                {t.name: FunctionToolAdapter(t) for t in load_function_tools_from_path(mt.function_tool_path)}
            )
        if mt.interaction_config_path:
            from verl.interactions import load_interactions

            self.interactions = load_interactions(builtin_config_file(mt.interaction_config_path, "interaction"))
        if config.agent.agent_loop_config_path:  # verl's {name, _target_} list of (verl-API) agent loops
            from verl.workers.rollout.agent_loop.verl_api import load_agent_loop_config

            load_agent_loop_config(config.agent.agent_loop_config_path)
        self.default_agent = "tool_agent" if mt.enable else config.agent.default_agent_loop
        self.on_trajectories_finished: Any = None  # hook(rows, data) per finished trajectory (rollout.streaming)
        if self.tools and tokenizer is not None:  # a template that ignores tools fails here, before training
            ChatTemplate(tokenizer, self._tool_schemas(), self.template_kwargs)
        if mt.enable and tokenizer is not None and mt.template_audit:
            from verl.workers.rollout.agent_loop.template_audit import log_template_audit

            log_template_audit(tokenizer, self._tool_schemas(), self.template_kwargs)

    def _tool_schemas(self) -> list[dict[str, Any]] | None:
        return [t.tool_schema for t in self.tools.values()] or None

    def __getattr__(self, name: str) -> Any:  # rng_state, set_rng_state, ... of the inner engine
        if name == "engine":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.engine, name)

    def update_weights(self, state_dict_or_model: Any, version: int | None = None) -> None:
        """Forward to the inner engine (``version``: its new ``policy_version``, when given)."""
        if version is None:
            self.engine.update_weights(state_dict_or_model)
        else:
            self.engine.update_weights(state_dict_or_model, version=version)

    def agent_names(self, prompts: DataProto) -> list[str]:
        """Each row's agent loop name (validated against the registry)."""
        names = prompts.non_tensor_batch.get("agent_name")
        out = [str(n) if n else self.default_agent for n in (names if names is not None else [None] * len(prompts))]
        for name in set(out):
            AGENT_LOOPS.get(name)  # an unknown name lists the registered loops
        return out

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Roll out every row with its agent loop; see the module docstring for the layout.

        Raises:
            Exception: row 0's error when every row's agent loop raised (a row that raises alone
                comes back flagged ``failed`` instead).
        """
        names = self.agent_names(prompts)
        over_sample = self.config.over_sample_rate > 0 and not prompts.meta_info.get("validate", False)
        batched = self.config.mode == "sync" and not over_sample and hasattr(self.engine, "generate_sequences")
        if batched and set(names) == {"single_turn_agent"}:
            out = self._batched(prompts)
            n = len(out)
            out.non_tensor_batch["num_turns"] = np.ones(n, dtype=np.int64)
            out.non_tensor_batch["tool_calls"] = object_array([[] for _ in range(n)])
            return out
        if "rollout_finished" in prompts.batch.keys():
            raise ValueError(
                "resubmitting a partial rollout through agent loops is not supported yet: agent-loop "
                "trajectories resume in place (engine.pause() / resume()), never from an output"
            )
        try:
            results, meta = asyncio.run(self._run_all(prompts, names))
        finally:
            if callable(getattr(self.engine, "sleep", None)):  # free_cache_engine of a server engine (vLLM)
                self.engine.sleep()
        out = self._assemble(prompts, results, meta)
        if "tool_agent" in names:  # the token-drift monitor (verl.workers.rollout.agent_loop.drift)
            from verl.workers.rollout.agent_loop.drift import mark_drift

            kwargs = dict(prompts.meta_info.get("apply_chat_template_kwargs") or self.template_kwargs)
            chat = ChatTemplate(self.tokenizer, self._tool_schemas(), kwargs)
            mark_drift(out, names, chat, self.config.multi_turn.token_drift_samples)
        return out

    def _batched(self, prompts: DataProto) -> DataProto:
        """The inner engine's batched generation, with this wrapper's finish hook passed on."""
        hook = self.on_trajectories_finished
        if hook is None or not hasattr(self.engine, "on_trajectories_finished"):
            return self.engine.generate_sequences(prompts)
        previous, self.engine.on_trajectories_finished = self.engine.on_trajectories_finished, hook
        try:
            return self.engine.generate_sequences(prompts)
        finally:
            self.engine.on_trajectories_finished = previous

    def _report(self, prompts: DataProto, i: int, meta: dict[str, Any], task: asyncio.Future[AgentLoopOutput]) -> None:
        """Hand a trajectory that ended well to the finish hook, as a one-row batch."""
        if self.on_trajectories_finished is None or task.cancelled() or task.exception() is not None:
            return
        self.on_trajectories_finished([i], self._assemble(prompts[i : i + 1], [task.result()], meta))

    def _context(self, prompts: DataProto) -> tuple[AgentContext, dict[str, Any]]:
        from verl.workers.rollout.hf.hf_server import as_token_engine

        meta = prompts.meta_info
        params = resolve_sampling(self.config, meta)
        response_length = int(meta.get("response_length", self.config.response_length))
        eos = meta.get("eos_token_id")
        stop = tuple([eos] if isinstance(eos, int) else eos) if eos is not None else None
        inner = self.engine
        ctx = AgentContext(
            engine=as_token_engine(inner),
            tokenizer=self.tokenizer,
            config=self.config,
            sampling=params,
            response_length=response_length,
            stop_token_ids=stop,
            tools=self.tools,
            interactions=self.interactions,
            template_kwargs=dict(meta.get("apply_chat_template_kwargs") or self.template_kwargs),
        )
        pad = int(meta.get("pad_token_id", getattr(inner, "pad_token_id", 0) or 0))
        out_meta = {
            **meta,
            "temperature": params.logprob_temperature,
            "pad_token_id": pad,
            "eos_token_id": list(stop) if stop is not None else list(getattr(inner, "eos_token_id", []) or []),
        }
        return ctx, out_meta

    def _rows(self, prompts: DataProto) -> list[AgentRow]:
        b, ntb = prompts.batch, prompts.non_tensor_batch
        row_seeds = layout.row_seeds(b, prompts.meta_info)
        seeds = row_seeds.tolist() if row_seeds is not None else [None] * len(prompts)
        rows = []
        for i, seed in enumerate(seeds):
            ids = b["input_ids"][i][b["attention_mask"][i].bool()].tolist()
            raw = ntb.get("raw_prompt")
            extra = ntb.get("extra_info")
            rows.append(
                AgentRow(
                    prompt_ids=ids,
                    messages=list(raw[i]) if raw is not None else None,
                    extra_info=dict(extra[i] or {}) if extra is not None else {},
                    seed=seed,
                    index=i,
                )
            )
        return rows

    async def _run_all(self, prompts: DataProto, names: list[str]) -> tuple[list[AgentLoopOutput], dict[str, Any]]:
        ctx, meta = self._context(prompts)
        loops = {name: AGENT_LOOPS.get(name)(ctx) for name in set(names)}
        rows = self._rows(prompts)
        was_training = getattr(getattr(self.engine, "module", None), "training", None)
        tasks = [asyncio.ensure_future(loops[n].run(row)) for n, row in zip(names, rows, strict=True)]
        for i, task in enumerate(tasks):
            task.add_done_callback(functools.partial(self._report, prompts, i, meta))
        rate = float(getattr(self.config, "over_sample_rate", 0.0) or 0.0)
        if rate > 0 and not meta.get("validate", False):
            await _abort_slowest(tasks, rate)
        else:
            await asyncio.gather(*tasks, return_exceptions=True)  # one row's error never fails the batch
        if was_training is not None:
            self.engine.module.train(was_training)
        return _collect(tasks, rows, names), meta

    def _assemble(self, prompts: DataProto, results: list[AgentLoopOutput], meta: dict[str, Any]) -> DataProto:
        pad = int(meta["pad_token_id"])
        width = int(self.config.prompt_length or max(len(r.prompt_ids) for r in results))
        longest = max(len(r.prompt_ids) for r in results)
        if longest > width:
            raise ValueError(
                f"a prompt rendered for its agent loop (with tool schemas) has {longest} tokens > "
                f"rollout.prompt_length {width}; raise data.max_prompt_length"
            )
        resp_len = int(meta.get("response_length", self.config.response_length))
        n = len(results)
        prompt_ids = torch.full((n, width), pad, dtype=torch.long)
        prompt_mask = torch.zeros(n, width, dtype=torch.long)
        responses = torch.full((n, resp_len), pad, dtype=torch.long)
        response_mask = torch.zeros(n, resp_len, dtype=torch.long)
        lengths = torch.zeros(n, dtype=torch.long)
        log_probs = torch.zeros(n, resp_len, dtype=torch.float32)
        versions = torch.full((n, resp_len), NOT_SAMPLED, dtype=torch.long)
        version_now = int(getattr(self.engine, "policy_version", 0) or 0)
        for i, r in enumerate(results):
            p, k = len(r.prompt_ids), len(r.response_ids)
            prompt_ids[i, width - p :] = torch.tensor(r.prompt_ids, dtype=torch.long)
            prompt_mask[i, width - p :] = 1
            responses[i, :k] = torch.tensor(r.response_ids, dtype=torch.long)
            response_mask[i, :k] = torch.tensor(r.response_mask, dtype=torch.long)
            lengths[i] = k
            log_probs[i, :k] = torch.tensor(r.response_logprobs, dtype=torch.float32)
            tags = r.response_versions or [version_now if m else NOT_SAMPLED for m in r.response_mask]
            versions[i, :k] = torch.tensor(tags, dtype=torch.long)
        returns_log_probs = getattr(
            self.engine, "returns_log_probs", True
        )  # False: vLLM with calculate_log_probs=false
        non_tensors = {
            "num_turns": np.array([r.num_turns for r in results], dtype=np.int64),
            "tool_calls": object_array([r.tool_calls for r in results]),
            "messages": object_array([r.messages for r in results]),
            "tool_rewards": object_array([r.tool_rewards for r in results]),
            "turn_scores": object_array([r.turn_scores for r in results]),
            "tokenization_mismatch": np.array([int(r.metrics.get("tokenization_mismatch", 0)) for r in results]),
            "aborted": np.array([int(r.metrics.get("aborted", 0)) for r in results]),
            "failed": np.array([int(r.metrics.get("failed", 0)) for r in results]),
        }
        return layout.assemble(
            prompts,
            prompt_ids,
            prompt_mask,
            responses,
            lengths,
            log_probs if returns_log_probs else None,
            versions,
            response_mask=response_mask,
            version=version_now,
            meta_info=meta,
            non_tensors=non_tensors,
        )


async def _abort_slowest(tasks: list[asyncio.Future[AgentLoopOutput]], rate: float) -> int:
    """verl's ``rollout.over_sample_rate``: once ``ceil((1 - rate) * n)`` trajectories finished
    (or failed), cancel the rest (their tool sessions are released); returns how many were aborted."""
    target = max(1, math.ceil((1.0 - rate) * len(tasks)))
    pending = set(tasks)
    while len(tasks) - len(pending) < target:  # a failed trajectory counts as finished (see _collect)
        _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return len(pending)


def _aborted_output(row: AgentRow) -> AgentLoopOutput:
    """An aborted trajectory: its prompt and no response tokens (response_mask all 0, so it adds
    nothing to the loss; its score is that of an empty response)."""
    prompt = row.rendered_prompt_ids if row.rendered_prompt_ids is not None else row.prompt_ids
    return AgentLoopOutput(
        prompt_ids=list(prompt),
        response_ids=[],
        response_mask=[],
        response_logprobs=[],
        num_turns=0,
        metrics={"aborted": 1.0},
    )


def _failed_output(row: AgentRow) -> AgentLoopOutput:
    """A trajectory whose agent loop raised: like an aborted one, flagged ``failed``."""
    out = _aborted_output(row)
    out.metrics = {"failed": 1.0}
    out.messages = list(row.messages) if row.messages is not None else None
    return out


def _collect(
    tasks: list[asyncio.Future[AgentLoopOutput]], rows: list[AgentRow], names: list[str]
) -> list[AgentLoopOutput]:
    """Each row's output: its result, an aborted row for a cancelled task, a failed row (logged)
    for one that raised.

    Raises:
        Exception: row 0's own error when every row failed.
    """
    results, errors = [], []
    for task, row, name in zip(tasks, rows, names, strict=True):
        if task.cancelled():
            results.append(_aborted_output(row))
        elif task.exception() is not None:
            err = task.exception()
            errors.append(err)
            logger.warning(
                "agent loop %s failed for row %d (masked out of the loss): %s: %s",
                name,
                row.index,
                type(err).__name__,
                err,
            )
            results.append(_failed_output(row))
        else:
            results.append(task.result())
    if errors and len(errors) == len(tasks):  # nothing to train on: most likely a configuration error
        logger.error(
            "every trajectory of the batch (%d rows) failed in its agent loop; raising row 0's error", len(tasks)
        )
        raise errors[0]
    return results
