"""The ``hf`` rollout engine: the actor's own transformers model + verl's sampling loop.

Generation for one micro-batch (at most ``rollout.max_num_seqs`` prompts):

1. Drop the leading columns that are padding in every row (they would only cost compute), and
   allocate the KV cache once for ``P' + R`` positions (transformers ``StaticCache``; the cache
   kind is ``engine_kwargs.cache_implementation``: ``static`` (default) or ``dynamic``).
2. Prefill the prompt with explicit ``position_ids`` (correct under left padding).
3. Decode token by token: position ``last prompt position + 1 + t``, sampling by
   `verl.workers.rollout.sampling` with a seeded `torch.Generator`. A row stops at the first
   token in ``eos_token_id`` (any of them); later slots hold ``pad_token_id`` and the row's
   length stops growing. With ``rollout.stop`` a row also stops once its decoded text holds a
   stop string, cut as vLLM would (`verl.workers.rollout.stop_strings`). The loop ends early once
   every row has stopped. The decode forward is
   eager by default; ``rollout.enforce_eager=false`` compiles it (`verl.workers.rollout.hf.hf_decode`,
   static cache only).

Measured on CPU (shared 2-core machine, 1 thread, tiny Qwen2 with its 151,680-token vocabulary,
B=8, P=16, R=64, fp32, 4 runs each): ``StaticCache`` 3.1-5.3 s, ``DynamicCache`` 3.2-3.9 s, i.e.
no difference beyond noise (the LM head dominates at this size). Static is the default because
its memory is allocated once per batch and bounded by P + R; ``dynamic`` stays available.

``response_mask`` comes from the generated *lengths*, never from token values, so pad == eos and
responses that stop without EOS are masked right. ``rollout_log_probs``
are ``log_softmax(logits / τ)`` at the sampled tokens, before top-k / top-p filtering, 0 on
padding; the training forward `verl.modules.forward.compute_log_probs` reproduces them.

Partial rollouts (`verl.workers.rollout.partial`): between two decode steps the loop may be
parked for a weight update (``pause`` / ``resume`` from another thread; the KV cache is then
rebuilt by one prefill of prompt + tokens so far under the new weights) or interrupted
(``interrupt``: the call returns, unfinished rows flagged in ``rollout_finished``; passing that
output back continues each row from its prefix). Every sampled token records ``policy_version``
in ``rollout_policy_versions`` `(B, R)`. ``on_trajectories_finished`` (`verl.workers.rollout.streaming`)
receives rows as soon as they finish, for streaming rewards.

Reproducibility: every row samples from its own seeded generator when the batch has seeds
(`verl.workers.rollout.layout.row_seeds`: the ``sample_seeds`` `(B,)` int64 tensor the trainer derives
from ``trainer.seed``, the step and the row, else seeds derived from ``meta_info["seed"]``), so
samples do not depend on batching, ranks or resumption, and the ``vllm`` engine and the agent loops
give each row the same seed; otherwise the engine's own generator (seeded once from ``rollout.seed``)
advances from call to call, and its state is saved and restored with `rng_state` / `set_rng_state`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache, StaticCache

from verl.protocol import DataProto
from verl.workers.rollout import layout
from verl.workers.rollout.hf.hf_decode import DecodeStep
from verl.workers.rollout.partial import (
    NOT_SAMPLED,
    Carried,
    PartialRollout,
    RolloutGate,
    group_rows,
    split_continuation,
)
from verl.workers.rollout.sampling import SamplingParams, resolve_sampling, row_uniforms, sample_tokens
from verl.workers.rollout.stop_strings import StopStrings, stop_strings_of
from verl.workers.rollout.streaming import row_notifier

__all__ = ["HFRollout", "cache_keyword", "default_eos_token_ids"]


def cache_keyword(module: nn.Module) -> str:
    """Name of the KV-cache argument of ``module.forward``: ``cache`` (transformers >= 5.20) or
    ``past_key_values`` (earlier releases).

    Passing the cache under a name the model does not take is silently swallowed by its
    ``**kwargs``: every decode step would then see one token without context (measured on
    transformers 5.17: responses of 2 tokens, 0% accuracy). A forward naming neither but taking
    ``**kwargs`` (a wrapper) gets ``cache``; one taking neither is refused.

    Raises:
        TypeError: the forward takes neither argument.
    """
    params = inspect.signature(module.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return "cache"
    raise TypeError(
        f"{type(module).__name__}.forward takes no KV cache argument (cache / past_key_values); "
        "the hf rollout engine needs a transformers causal LM"
    )


def default_eos_token_ids(module: nn.Module, tokenizer: Any = None) -> list[int]:
    """Every eos id of the model's generation config, then the tokenizer's eos id, deduplicated."""
    ids: list[int] = []
    gen_cfg = getattr(module, "generation_config", None)
    for source in (getattr(gen_cfg, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        ids += [i for i in layout.token_ids(source) if i not in ids]
    if not ids:
        ids = layout.token_ids(getattr(getattr(module, "config", None), "eos_token_id", None))
    return ids


class HFRollout(PartialRollout):
    """Rollout engine that generates with a transformers causal LM in place (no weight copy).

    Partial rollouts (`verl.workers.rollout.partial`): ``pause`` / ``resume`` / ``interrupt`` from
    another thread, ``policy_version`` recorded per sampled token in ``rollout_policy_versions``.

    Args:
        module: the actor model; generation runs in eval mode under ``torch.no_grad`` and the
            module's training mode is restored afterwards.
        config: the rollout section (`RolloutConfig`).
        tokenizer: optional tokenizer supplying eos / pad ids; needed for ``rollout.stop``.
        eos_token_id: stop ids; default `default_eos_token_ids`. ``meta_info`` may override.
        pad_token_id: id written after a row stops; default tokenizer pad, else the first eos id.
    """

    def __init__(
        self,
        module: nn.Module,
        config: Any,
        tokenizer: Any = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
    ) -> None:
        self.module = module
        self.config = config
        self.stop_strings = stop_strings_of(config, tokenizer)
        self.eos_token_id = layout.token_ids(eos_token_id) or default_eos_token_ids(module, tokenizer)
        if pad_token_id is None:
            pad_token_id = getattr(tokenizer, "pad_token_id", None)
        if pad_token_id is None:
            if not self.eos_token_id:
                raise ValueError("HFRollout needs a pad_token_id or at least one eos_token_id")
            pad_token_id = self.eos_token_id[0]
        self.pad_token_id = int(pad_token_id)
        self.cache_implementation = str(dict(config.engine_kwargs or {}).get("cache_implementation", "static"))
        if self.cache_implementation not in ("static", "dynamic"):
            raise ValueError(
                f"engine_kwargs.cache_implementation must be static|dynamic, got {self.cache_implementation!r}"
            )
        compiled = not config.enforce_eager
        if compiled and self.cache_implementation != "static":
            raise ValueError(
                "rollout.enforce_eager=false (compiled decode) needs engine_kwargs.cache_implementation=static"
            )
        self._decode = DecodeStep(compiled)
        self._generator = torch.Generator(device=self._device())
        seed = config.seed if config.seed is not None else torch.initial_seed()
        self._generator.manual_seed(int(seed) % (2**63))
        self._gate = RolloutGate()
        self.policy_version = 0
        self.weights_epoch = 0  # bumped by every weight load: a parked decode loop then rebuilds its cache
        self.on_trajectories_finished: Callable[[list[int], DataProto], None] | None = None  # streaming hook

    def _device(self) -> torch.device:
        return next(self.module.parameters()).device

    def rng_state(self) -> torch.Tensor:
        """State of the engine's sampling generator (for checkpoints)."""
        return self._generator.get_state()

    def set_rng_state(self, state: torch.Tensor) -> None:
        """Restore a state returned by `rng_state`."""
        self._generator.set_state(state)

    def update_weights(
        self, state_dict_or_model: Mapping[str, torch.Tensor] | nn.Module, version: int | None = None
    ) -> None:
        """Generate with new weights; ``version`` (when given) becomes ``policy_version``.

        A module replaces the engine's module (no copy; passing the actor it already holds is a
        no-op). A state dict is loaded in place with ``strict=True``.

        Raises:
            RuntimeError: generation is running and not paused (`pause` first).
            ValueError: a new module object while a paused generation holds the old one (load
                a state dict in place instead).
        """
        self._check_can_load()
        if isinstance(state_dict_or_model, nn.Module):
            if state_dict_or_model is not self.module and self._gate.running():
                raise ValueError(
                    "replacing the module of a paused generation is not supported yet: load its state dict"
                )
            self.module = state_dict_or_model
        else:
            self.module.load_state_dict(dict(state_dict_or_model), strict=True)
        if version is not None:
            self.policy_version = int(version)
        self.weights_epoch += 1

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per prompt; see `RolloutEngine.generate_sequences`.

        ``meta_info`` keys read: ``eos_token_id`` (int or list), ``pad_token_id``, ``do_sample``,
        ``temperature``, ``top_k``, ``top_p``, ``validate`` (defaults from ``val_kwargs``),
        ``response_length`` (default ``config.response_length``), ``seed`` (per-row seeds:
        `verl.workers.rollout.layout.row_seeds`). The output's
        ``meta_info`` also records ``temperature`` (of the reported log-probs), the eos and pad ids.
        A partial output passed back in (it holds ``rollout_finished``) continues each unfinished
        row from its prefix (`verl.workers.rollout.partial.split_continuation`).

        Raises:
            ValueError: no response length, prompts that are not left-padded, longer than
                ``config.prompt_length``, or prompt + response longer than ``config.max_model_len``;
                a partial output of another response length.
        """
        meta = prompts.meta_info
        params = resolve_sampling(self.config, meta)
        response_length = meta.get("response_length", self.config.response_length)
        if response_length is None or int(response_length) < 1:
            raise ValueError(f"rollout response_length must be set and >= 1, got {response_length}")
        eos_ids = layout.token_ids(meta.get("eos_token_id")) or self.eos_token_id
        pad_id = int(meta.get("pad_token_id", self.pad_token_id))
        row_seeds = layout.row_seeds(prompts.batch, meta)  # None: the engine's generator samples
        response_length = int(response_length)
        input_ids, attention_mask, position_ids, carried = split_continuation(prompts, response_length, pad_id)
        position_ids = layout.prompt_position_ids(attention_mask, position_ids)
        layout.check_prompts(attention_mask, self.config.prompt_length, self.config.max_model_len, response_length)
        out_meta = {**meta, "temperature": params.logprob_temperature, "eos_token_id": eos_ids, "pad_token_id": pad_id}
        hook = self.on_trajectories_finished
        was_training = self.module.training
        self.module.eval()
        try:
            with torch.no_grad(), self._autocast():
                # rows grouped by prefix length (a fresh batch: one group, chunks of max_num_seqs in order)
                for rows in group_rows(carried.lengths, carried.finished, self.config.max_num_seqs):
                    done = int(carried.lengths[rows[0]])
                    prefix = (
                        carried.responses[rows, :done],
                        carried.log_probs[rows, :done],
                        carried.versions[rows, :done],
                    )
                    seeds = row_seeds[rows] if row_seeds is not None else None
                    notify = (
                        None
                        if hook is None
                        else row_notifier(self, prompts, input_ids, attention_mask, position_ids, out_meta, hook, rows)
                    )
                    result = self._generate_batch(
                        input_ids[rows],
                        attention_mask[rows],
                        position_ids[rows],
                        response_length,
                        params,
                        eos_ids,
                        pad_id,
                        self._generator,
                        seeds,
                        self.stop_strings,
                        prefix,
                        notify,
                    )
                    for field, value in zip(
                        ("responses", "lengths", "log_probs", "versions", "finished"), result, strict=True
                    ):
                        getattr(carried, field)[rows] = value
        finally:
            self.module.train(was_training)
        return self._assemble(prompts, input_ids, attention_mask, position_ids, carried, out_meta)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``rollout.dtype`` bfloat16 / float16 runs generation under autocast; None / float32 as is."""
        dtype = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
        if self.config.dtype in dtype:
            return torch.autocast(device_type=self._device().type, dtype=dtype[self.config.dtype])
        if self.config.dtype not in (None, "float32", "fp32"):
            raise ValueError(f"rollout.dtype must be float32|bfloat16|float16 or null, got {self.config.dtype!r}")
        return contextlib.nullcontext()

    def _make_cache(self, max_len: int) -> StaticCache | DynamicCache:
        config = self.module.config
        if self.cache_implementation == "static":
            return StaticCache(config=config, max_cache_len=max_len)
        return DynamicCache(config=config)

    def _generate_batch(self, *args: Any) -> tuple[torch.Tensor, ...]:
        """`_decode_batch` inside the decode step's session (`DecodeStep.session`) and the gate
        (`RolloutGate.decoding`); also the entry point of the agent-loop server
        (`verl.workers.rollout.hf.hf_server`)."""
        with self._gate.decoding(), self._decode.session(self.module):
            return self._decode_batch(*args)

    def _prefill(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache_len: int
    ) -> tuple[dict[str, Any], torch.Tensor]:
        """A fresh KV cache of ``cache_len`` positions filled with ``ids``; returns it and the
        next-token logits `(B, V)`."""
        cache_arg = {cache_keyword(self.module): self._make_cache(cache_len)}
        logits = self.module(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1, **cache_arg
        ).logits[:, -1]
        return cache_arg, logits

    def _decode_batch(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        response_length: int,
        params: SamplingParams,
        eos_ids: list[int],
        pad_id: int,
        generator: torch.Generator,
        seeds: torch.Tensor | None = None,
        stop: StopStrings | None = None,
        prefix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        notify: Callable[..., None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode loop for one micro-batch, continuing after ``prefix`` (responses, log-probs,
        versions `(B, L)`, the same L for every row; None = L = 0).

        The context is prompt + prefix; response slot t >= L is sampled with the row's t-th
        uniform. Between steps the gate may park the loop (`RolloutGate.boundary`); when
        the weights changed meanwhile (``weights_epoch``), the cache is rebuilt by one prefill of the context
        and the tokens sampled so far under the new weights. An interrupt ends the loop there.
        ``notify(rows, responses, lengths, log_probs, versions)`` is called as soon as rows finish
        (`verl.workers.rollout.streaming`), with their local indices `(k,)`.

        Returns:
            responses `(B, R)`, lengths `(B,)`, log-probs `(B, R)`, policy versions `(B, R)`
            (`NOT_SAMPLED` on padding) and finished `(B,)` (EOS, stop string or R tokens).
        """
        device = self._device()
        done = 0 if prefix is None else int(prefix[0].shape[1])
        first_real = int(attention_mask.long().argmax(dim=1).min())  # leading all-padding columns
        ids = input_ids[:, first_real:].to(device)
        batch = ids.shape[0]
        mask = attention_mask[:, first_real:].to(device).long()
        pos = position_ids[:, first_real:].to(device)
        responses = torch.full((batch, response_length), pad_id, dtype=torch.long, device=device)
        log_probs = torch.zeros(batch, response_length, dtype=torch.float32, device=device)
        versions = torch.full((batch, response_length), NOT_SAMPLED, dtype=torch.long, device=device)
        if done:  # the context is prompt + prefix, with the positions the final layout gives them
            responses[:, :done], log_probs[:, :done], versions[:, :done] = (x.to(device) for x in prefix)
            ids = torch.cat([ids, responses[:, :done]], dim=1)
            mask = torch.cat([mask, torch.ones_like(responses[:, :done])], dim=1)
            pos = torch.cat([pos, pos[:, -1:] + torch.arange(1, done + 1, device=device)], dim=1)
        lengths = torch.full((batch,), done, dtype=torch.long, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        if not self._gate.boundary():  # interrupted before starting: the prefix comes back as it is
            return responses.cpu(), lengths.cpu(), log_probs.cpu(), versions.cpu(), finished.cpu()
        ctx_len, steps = ids.shape[1], response_length - done
        full_mask = torch.ones(batch, ctx_len + steps, dtype=torch.long, device=device)
        full_mask[:, :ctx_len] = mask
        eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
        next_pos = pos[:, -1:] + 1
        version, epoch = self.policy_version, self.weights_epoch
        reported = torch.zeros_like(finished)
        cache_arg, logits = self._prefill(ids, mask, pos, ctx_len + steps)
        # every row's uniforms for all R steps, drawn once (the same draws as per step: row_uniforms)
        uniforms = row_uniforms(seeds, response_length) if seeds is not None and not params.greedy else None
        for t in range(done, response_length):
            u = uniforms[:, t] if uniforms is not None else None
            tokens, token_logp = sample_tokens(logits, params, generator, u)
            responses[:, t] = torch.where(finished, pad_id, tokens)
            log_probs[:, t] = torch.where(finished, 0.0, token_logp)
            versions[:, t] = torch.where(finished, NOT_SAMPLED, version)
            lengths += (~finished).long()
            if not self.config.ignore_eos and eos.numel():
                finished |= torch.isin(tokens, eos)
            if stop is not None:
                self._apply_stop_strings(stop, responses, log_probs, lengths, finished, t, pad_id)
            if notify is not None:
                reported = _notify_new(notify, finished, reported, responses, lengths, log_probs, versions)
            if t == response_length - 1 or bool(finished.all()) or not self._gate.boundary():
                break
            new = t + 1 - done  # response tokens in the context after this step
            version = self.policy_version
            if self.weights_epoch != epoch:  # new weights: the cache holds the old ones' keys / values
                epoch = self.weights_epoch
                cache_arg, logits = self._prefill(
                    torch.cat([ids, responses[:, done : t + 1]], dim=1),
                    full_mask[:, : ctx_len + new],
                    torch.cat([pos, next_pos + torch.arange(new, device=device)], dim=1),
                    ctx_len + steps,
                )
                continue
            logits = self._decode(
                self.module, responses[:, t : t + 1], full_mask, ctx_len + new, next_pos + new - 1, cache_arg
            )
        versions[:, :] = torch.where(
            torch.arange(response_length, device=device) < lengths[:, None], versions, NOT_SAMPLED
        )
        finished |= lengths >= response_length
        if notify is not None:
            _notify_new(notify, finished, reported, responses, lengths, log_probs, versions)
        return responses.cpu(), lengths.cpu(), log_probs.cpu(), versions.cpu(), finished.cpu()

    @staticmethod
    def _apply_stop_strings(
        stop: StopStrings,
        responses: torch.Tensor,
        log_probs: torch.Tensor,
        lengths: torch.Tensor,
        finished: torch.Tensor,
        t: int,
        pad_id: int,
    ) -> None:
        """Stop (in place) every running row whose text now holds a stop string, cut to `StopStrings.cut`."""
        running = (~finished).nonzero().flatten().tolist()
        if not running:
            return
        tails = responses[:, max(0, t + 1 - stop.window) : t + 1].tolist()
        for i in running:
            if not stop.may_stop(tails[i]):
                continue
            n = stop.cut(responses[i, : t + 1].tolist())
            if n is None:
                continue
            finished[i], lengths[i] = True, n
            responses[i, n : t + 1] = pad_id
            log_probs[i, n : t + 1] = 0.0

    def _assemble(
        self,
        prompts: DataProto,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        carried: Carried,
        meta_info: dict[str, Any],
    ) -> DataProto:
        """`verl.workers.rollout.layout.assemble` of ``carried`` with this engine's ``policy_version``
        (also builds the rows the finish hook receives: `verl.workers.rollout.streaming.row_notifier`)."""
        return layout.assemble(
            prompts,
            input_ids,
            attention_mask,
            carried.responses,
            carried.lengths,
            carried.log_probs,
            carried.versions,
            position_ids=position_ids,
            finished=carried.finished,
            version=self.policy_version,
            meta_info=meta_info,
        )


def _notify_new(
    notify: Callable[..., None],
    finished: torch.Tensor,
    reported: torch.Tensor,
    responses: torch.Tensor,
    lengths: torch.Tensor,
    log_probs: torch.Tensor,
    versions: torch.Tensor,
) -> torch.Tensor:
    """Call ``notify`` with the rows finished since the last call; returns the rows reported so far."""
    new = finished & ~reported
    if bool(new.any()):
        rows = new.nonzero().flatten()
        width = torch.arange(responses.shape[1], device=responses.device)
        tags = torch.where(width < lengths[rows, None], versions[rows], NOT_SAMPLED)
        notify(rows.cpu(), responses[rows].cpu(), lengths[rows].cpu(), log_probs[rows].cpu(), tags.cpu())
    return reported | finished
