"""Agent loops written against verl's ``verl.experimental.agent_loop.agent_loop`` API run on the product's rollout.

A verl agent loop::

    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

    @register("my_agent")
    class MyAgentLoop(AgentLoopBase):
        async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
            prompt_ids = self.tokenizer.apply_chat_template(list(kwargs["raw_prompt"]), add_generation_prompt=True)
            out = await self.server_manager.generate(request_id="r0", prompt_ids=prompt_ids,
                                                     sampling_params=sampling_params)
            return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=out.token_ids,
                                   response_mask=[1] * len(out.token_ids), response_logprobs=out.log_probs,
                                   num_turns=2, metrics={})

is selected by rows whose ``agent_name`` is ``my_agent``; its module is imported as in verl through
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (a YAML list of ``{name, _target_}``,
further keys passed to the constructor; `load_agent_loop_config`) or with
``actor_rollout_ref.model.external_lib``. `register` puts an adapter into
`verl.workers.rollout.agent_loop.base.AGENT_LOOPS` that builds the class once per trajectory (as
verl does) with ``trainer_config`` (``.actor_rollout_ref.rollout`` is the rollout section, also
``self.rollout_config``), a ``server_manager`` whose ``generate(request_id, prompt_ids=...,
sampling_params=...)`` sends a `TokenRequest` to the rollout engine (``max_tokens`` in the sampling
params, else the trajectory's remaining budget; the trajectory's seed for the first call, seeds
derived from it for later ones) and the tokenizer; ``run`` gets verl's sampling dict
(``temperature``, ``top_p``, ``top_k``, ``logprobs``) and the row's fields (``raw_prompt``,
``extra_info``, ``tools_kwargs``, ``index``). The returned output is cut to ``response_length``;
``response_logprobs`` None means 0.0 log-probs. ``reward_score`` set by the loop is not supported yet
(the reward function scores the trajectory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Optional

from verl.workers.rollout.agent_loop.base import AGENT_LOOPS, AgentContext, AgentRow
from verl.workers.rollout.agent_loop.base import AgentLoopOutput as _ProductOutput
from verl.workers.rollout.request import TokenOutput, TokenRequest
from verl.workers.rollout.sampling import SamplingParams

__all__ = ["AgentLoopBase", "AgentLoopOutput", "ServerManager", "ToolListWrap", "load_agent_loop_config", "register"]


class ToolListWrap:
    """A tool list kept whole through ``hydra.utils.instantiate`` (which would turn each tool into a DictConfig)."""

    def __init__(self, tools: list) -> None:
        self.tools = tools


@dataclass
class AgentLoopOutput:
    """verl's agent loop result (its field names); converted to the rollout's own output."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: Optional[list[float]] = None
    multi_modal_data: dict[str, Any] = field(default_factory=dict)
    reward_score: Optional[float] = None
    num_turns: int = 0
    metrics: Any = field(default_factory=dict)
    extra_fields: dict[str, Any] = field(default_factory=dict)


class ServerManager:
    """verl's ``server_manager`` for one trajectory:
    ``await generate(request_id, prompt_ids=..., sampling_params=...)``."""

    def __init__(self, context: AgentContext, seed: Optional[int]) -> None:
        self.ctx, self.seed, self.calls = context, seed, 0

    def _seed(self) -> Optional[int]:
        from verl.workers.rollout.layout import derive_seeds

        k, self.calls = self.calls, self.calls + 1
        if self.seed is None or k == 0:
            return self.seed
        return int(derive_seeds([int(self.seed), k], 1)[0])

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        **_: Any,
    ) -> TokenOutput:
        """One model turn of at most ``sampling_params["max_tokens"]`` tokens (default: ``response_length``).

        Raises:
            ValueError: image / video inputs (text only here).
        """
        if image_data:
            raise ValueError("image_data is not supported yet: the rollout engines here take text prompts")
        base = self.ctx.sampling
        temperature = float(sampling_params.get("temperature", base.temperature))
        sampling = SamplingParams(
            do_sample=base.do_sample and temperature > 0,
            temperature=temperature,
            top_k=int(sampling_params.get("top_k", base.top_k)),
            top_p=float(sampling_params.get("top_p", base.top_p)),
        )
        max_new = int(
            sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens") or self.ctx.response_length
        )
        return await self.ctx.engine.generate(
            TokenRequest(
                prompt_ids=list(prompt_ids),
                sampling=sampling,
                max_new_tokens=max_new,
                seed=self._seed(),
                stop_token_ids=self.ctx.stop_token_ids,
                request_id=str(request_id),
            )
        )


class AgentLoopBase:
    """Base of verl-API agent loops (see the module docstring); subclasses implement ``async run``.

    Attributes:
        config: ``trainer_config`` (``config.actor_rollout_ref.rollout`` = ``rollout_config``).
        rollout_config: the rollout section (``prompt_length``, ``response_length``, ``multi_turn``, ...).
        server_manager: `ServerManager` of this trajectory.
        tokenizer, processor: the actor's tokenizer; no processor (text only).
    """

    def __init__(
        self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any = None, **kwargs: Any
    ) -> None:
        self.config = trainer_config
        self.rollout_config = trainer_config.actor_rollout_ref.rollout
        self.server_manager, self.tokenizer, self.processor = server_manager, tokenizer, processor

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One trajectory; ``kwargs`` are the row's fields (``raw_prompt``, ``extra_info``, ...)."""
        raise NotImplementedError


def _metrics(value: Any) -> dict[str, float]:
    items = value.items() if isinstance(value, dict) else vars(value).items() if value is not None else []
    return {str(k): float(v) for k, v in items if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _adapter(cls: type, init_kwargs: dict[str, Any] | None = None) -> type:
    """The `AGENT_LOOPS` entry running verl-API class ``cls`` (``cls(context)``, ``await run(row)``)."""
    extra_init = dict(init_kwargs or {})

    class VerlAgentLoop:
        verl_cls = cls

        def __init__(self, context: AgentContext) -> None:
            self.ctx = context
            self.trainer_config = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=context.config))

        async def run(self, row: AgentRow) -> _ProductOutput:
            loop = cls(
                trainer_config=self.trainer_config,
                server_manager=ServerManager(self.ctx, row.seed),
                tokenizer=self.ctx.tokenizer,
                processor=None,
                **extra_init,
            )
            s = self.ctx.sampling
            sampling = {
                "temperature": s.temperature if s.do_sample else 0.0,
                "top_p": s.top_p,
                "top_k": s.top_k,
                "logprobs": True,
            }
            extra = dict(row.extra_info)
            out = await loop.run(
                sampling,
                raw_prompt=row.messages,
                extra_info=extra,
                index=row.index,
                tools_kwargs=extra.get("tools_kwargs", {}),
            )
            if getattr(out, "reward_score", None) is not None:
                raise ValueError(
                    f"agent loop {cls.__name__}: reward_score is not supported yet; let the reward "
                    "function score the trajectory"
                )
            n = min(len(out.response_ids), self.ctx.response_length)
            logprobs = list(out.response_logprobs) if out.response_logprobs else [0.0] * len(out.response_ids)
            row.rendered_prompt_ids = list(out.prompt_ids)
            return _ProductOutput(
                prompt_ids=list(out.prompt_ids),
                response_ids=list(out.response_ids)[:n],
                response_mask=[int(m) for m in out.response_mask][:n],
                response_logprobs=[float(x) for x in logprobs][:n],
                num_turns=int(out.num_turns or 1),
                metrics=_metrics(out.metrics),
            )

    VerlAgentLoop.__name__ = VerlAgentLoop.__qualname__ = f"VerlAgentLoop[{cls.__name__}]"
    return VerlAgentLoop


def register(agent_name: str) -> Callable[[type], type]:
    """verl's ``@register("name")`` for `AgentLoopBase` subclasses; returns the class unchanged.

    Raises:
        RegistryError: the name is taken by another loop.
    """

    def decorator(cls: type) -> type:
        if agent_name in AGENT_LOOPS and getattr(AGENT_LOOPS.get(agent_name), "verl_cls", None) is cls:
            return cls
        AGENT_LOOPS.add(agent_name, _adapter(cls))
        return cls

    return decorator


def load_agent_loop_config(path: str) -> list[str]:
    """Register the agent loops of verl's ``agent_loop_config_path`` YAML; returns their names.

    Each entry is ``{name: ..., _target_: package.module.Class, <constructor keyword>: ...}``; a class
    derived from `AgentLoopBase` runs through the adapter, any other class is taken as a loop of this
    package's shape (``cls(context)``, ``await run(row)``).

    Raises:
        ValueError: an entry without ``name`` / ``_target_``, or a name taken by another loop.
        ImportError / AttributeError: the ``_target_`` cannot be imported.
    """
    import importlib

    from omegaconf import OmegaConf

    entries = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    names = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict) or "name" not in entry or "_target_" not in entry:
            raise ValueError(f"{path}: entry {i} needs 'name' and '_target_' (got {entry!r})")
        name, target = str(entry.pop("name")), str(entry.pop("_target_"))
        module, _, attr = target.rpartition(".")
        cls = getattr(importlib.import_module(module), attr)
        existing = AGENT_LOOPS.get(name) if name in AGENT_LOOPS else None
        if existing is not None and cls in (existing, getattr(existing, "verl_cls", None)):
            names.append(name)
            continue
        if existing is not None:
            raise ValueError(f"{path}: agent loop {name!r} is already registered ({existing!r})")
        AGENT_LOOPS.add(name, _adapter(cls, entry) if issubclass(cls, AgentLoopBase) else cls)
        names.append(name)
    if not names:
        raise ValueError(f"{path}: expected a YAML list of {{name, _target_}} agent loops")
    return names
