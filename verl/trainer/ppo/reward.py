"""Building the reward managers of a run (verl's ``verl.trainer.ppo.reward`` path).

Which manager: ``reward_manager.source=importlib`` with ``reward_manager.module.{path,name}``
loads a user class (built through `verl.reward.verl_managers.VerlManagerAdapter`); otherwise the
registered name ``reward_manager.name`` (verl's new key) or ``reward_model.reward_manager`` (the
older one; setting both differently is a config error). Every registered entry is built by the
same call (`verl.reward.managers.REWARD_MANAGERS`): classes registered with
``verl.workers.reward_manager.register`` sit behind the adapter, which turns this package's
arguments into verl's constructor arguments. Nothing here depends on the name.

What the scorer receives: the custom function (``custom_reward_function.{path,name}``, with
``custom_reward_function.reward_kwargs`` bound) or, when None, the built-in routing by
``data_source``; ``reward_model.reward_kwargs`` go to the manager as ``reward_kwargs`` (the
built-in managers bind them to every scorer call, a verl-style class gets them as constructor
keywords, as in verl).

The DAPO overlong penalty (`overlong_settings`): ``reward_model.overlong_buffer``, or verl's DAPO
manager arguments ``reward_model.reward_kwargs.overlong_buffer_cfg.{enable,len,penalty_factor}``
when given (they win), with ``reward_kwargs.max_resp_len`` (default ``data.max_response_length``)
as the response budget. Those two keys are manager arguments, never scorer keywords; the
penalty applies to the training manager only.
"""

from __future__ import annotations

import functools
from typing import Any

from verl.config.schema import RootConfig

__all__ = ["build_reward_fns", "load_reward_manager", "overlong_settings", "training_scorer"]


def _manager_name(cfg: RootConfig) -> str:
    new, old = cfg.reward_manager.name, cfg.reward_model.reward_manager
    return new if new != "naive" else old


# verl's DAPO manager takes these two constructor arguments through reward_kwargs
_DAPO_MANAGER_KWARGS = ("overlong_buffer_cfg", "max_resp_len")


def overlong_settings(cfg: RootConfig) -> tuple[Any, int]:
    """The DAPO overlong penalty of the run and its response budget (module docstring).

    Returns:
        ``(verl.reward.OverlongBufferConfig, max_response_length)``; the config may be disabled.
    """
    from verl.reward import OverlongBufferConfig

    kw = cfg.reward_model.reward_kwargs
    section = kw.get("overlong_buffer_cfg")
    overlong = OverlongBufferConfig.from_config(section if section is not None else cfg.reward_model.overlong_buffer)
    max_len = kw.get("max_resp_len")
    return overlong, int(max_len) if max_len is not None else cfg.data.max_response_length


def _reward_kwargs(cfg: RootConfig) -> dict[str, Any]:
    """``reward_model.reward_kwargs`` without verl's DAPO manager arguments (read by `overlong_settings`)."""
    return {k: v for k, v in cfg.reward_model.reward_kwargs.items() if k not in _DAPO_MANAGER_KWARGS}


def _compute_score(cfg: RootConfig) -> Any:
    """The custom function with ``custom_reward_function.reward_kwargs`` bound, or None (built-in routing)."""
    from verl.reward import default_compute_score, load_custom_reward_fn

    fn = load_custom_reward_fn(cfg.custom_reward_function.path, cfg.custom_reward_function.name)
    kwargs = dict(cfg.custom_reward_function.reward_kwargs)
    if kwargs:
        fn = functools.partial(fn or default_compute_score, **kwargs)
    return fn


def training_scorer(cfg: RootConfig) -> tuple[str, Any]:
    """The registered manager name and the ``compute_score`` its training instance calls.

    Returns:
        ``(name, fn)``: ``fn`` is the custom function with both ``reward_kwargs`` bound, or None
        for the built-in routing by data source without any (`verl.reward.default_compute_score`);
        with ``name == "batch"`` it takes the batched keywords (``data_sources=`` ...).
    """
    from verl.reward import default_compute_score

    fn, kwargs = _compute_score(cfg), _reward_kwargs(cfg)
    if kwargs:
        fn = functools.partial(fn or default_compute_score, **kwargs)
    return _manager_name(cfg), fn


def load_reward_manager(cfg: RootConfig, tokenizer: Any, num_examine: int = 0, **options: Any) -> Any:
    """The configured reward manager (see module docstring).

    Args:
        cfg: The root config.
        tokenizer: Tokenizer decoding responses.
        num_examine: verl's number of decoded samples a manager shows (0 training, 1 validation).
        **options: More manager arguments (``overlong_buffer``, ``max_response_length``).

    Returns:
        A callable ``manager(data, return_dict=True)``.

    Raises:
        RegistryError: Unknown manager name (lists the registered ones).
    """
    from verl.reward import REWARD_MANAGERS
    from verl.reward.verl_managers import VerlManagerAdapter
    from verl.utils.import_utils import load_extern_type

    rm = cfg.reward_manager
    if rm.source == "importlib" and rm.module.path:
        factory = VerlManagerAdapter(load_extern_type(rm.module.path, rm.module.name))
    else:
        factory = REWARD_MANAGERS.get(_manager_name(cfg))
    return factory(
        tokenizer,
        compute_score=_compute_score(cfg),
        reward_fn_key=cfg.data.reward_fn_key,
        timeout_s=cfg.reward_model.timeout_s,
        num_examine=num_examine,
        reward_kwargs=_reward_kwargs(cfg),
        **options,
    )


def build_reward_fns(cfg: RootConfig, tokenizer: Any) -> tuple[Any, Any]:
    """Training and validation reward managers (the DAPO overlong penalty only in training)."""
    overlong, max_len = overlong_settings(cfg)
    train = load_reward_manager(
        cfg, tokenizer, 0, overlong_buffer=overlong if overlong.enable else None, max_response_length=max_len
    )
    val = load_reward_manager(cfg, tokenizer, 1)
    return train, val
