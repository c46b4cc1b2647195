"""Building the reward managers of a run (verl's ``verl.trainer.ppo.reward`` path).

Which manager: ``reward_manager.source=importlib`` with ``reward_manager.module.{path,name}``
loads a user class; otherwise the registered name ``reward_manager.name`` (verl's new key) or
``reward_model.reward_manager`` (the older one; setting both differently is a config error).
Classes registered with ``verl.workers.reward_manager.register`` or loaded by path are built
with verl's constructor arguments (`verl.reward.verl_managers`); the built-in ones with this
package's (per-sample deadline, DAPO overlong buffer).

What the scorer receives: the custom function (``custom_reward_function.{path,name}``) or the
built-in routing by ``data_source``, with ``custom_reward_function.reward_kwargs`` and
``reward_model.reward_kwargs`` bound as keyword arguments (a user manager gets the latter as
constructor keywords instead, as in verl). For ``reward_manager=dapo``, verl's constructor
arguments ``reward_kwargs.overlong_buffer_cfg.{enable,len,penalty_factor}`` and
``reward_kwargs.max_resp_len`` set the DAPO overlong penalty of the training manager.
"""

from __future__ import annotations

import functools
from typing import Any

from verl.config.schema import RootConfig

__all__ = ["build_reward_fns", "load_reward_manager", "training_scorer"]


def _manager_name(cfg: RootConfig) -> str:
    new, old = cfg.reward_manager.name, cfg.reward_model.reward_manager
    return new if new != "naive" else old


# verl's DAPO manager takes these two constructor arguments through reward_kwargs
_DAPO_MANAGER_KWARGS = ("overlong_buffer_cfg", "max_resp_len")


def _dapo_options(cfg: RootConfig) -> dict[str, Any]:
    """``+reward_model.reward_kwargs.{overlong_buffer_cfg,max_resp_len}`` as this package's options."""
    from verl.reward import OverlongBufferConfig

    kw = cfg.reward_model.reward_kwargs
    out: dict[str, Any] = {}
    ob = kw.get("overlong_buffer_cfg")
    if ob is not None and ob.get("enable", False):
        out["overlong_buffer"] = OverlongBufferConfig(enable=True, len=int(ob.get("len", 0)),
                                                      penalty_factor=float(ob.get("penalty_factor", 1.0)))
    if kw.get("max_resp_len") is not None:
        out["max_response_length"] = int(kw["max_resp_len"])
    return out


def _compute_score(cfg: RootConfig, bind_rm_kwargs: bool) -> Any:
    from verl.reward import default_compute_score, load_custom_reward_fn

    fn = load_custom_reward_fn(cfg.custom_reward_function.path, cfg.custom_reward_function.name)
    kwargs = dict(cfg.custom_reward_function.reward_kwargs)
    if bind_rm_kwargs:
        kwargs.update({k: v for k, v in cfg.reward_model.reward_kwargs.items() if k not in _DAPO_MANAGER_KWARGS})
    if kwargs:
        fn = functools.partial(fn or default_compute_score, **kwargs)
    return fn


def training_scorer(cfg: RootConfig) -> tuple[str, Any]:
    """The registered manager name and the ``compute_score`` its training instance receives.

    Returns:
        ``(name, fn)``: ``fn`` is the custom function with the configured keyword arguments bound,
        or None for the built-in routing by data source (`verl.reward.default_compute_score`);
        with ``name == "batch"`` it takes the batched keywords (``data_sources=`` ...).
    """
    return _manager_name(cfg), _compute_score(cfg, True)


def load_reward_manager(cfg: RootConfig, tokenizer: Any, num_examine: int = 0, **options: Any) -> Any:
    """The configured reward manager (see module docstring).

    Args:
        cfg: The root config.
        tokenizer: Tokenizer decoding responses.
        num_examine: verl's number of decoded samples a manager prints (0 training, 1 validation).
        **options: This package's manager options (``overlong_buffer``, ``max_response_length``).

    Returns:
        A callable ``manager(data, return_dict=True)``.

    Raises:
        RegistryError: Unknown manager name (lists the registered ones).
    """
    from verl.reward import create_reward_manager
    from verl.reward.verl_managers import build_verl_manager, is_verl_manager
    from verl.utils.import_utils import load_extern_type

    rm = cfg.reward_manager
    key = cfg.data.reward_fn_key
    if rm.source == "importlib" and rm.module.path:
        cls = load_extern_type(rm.module.path, rm.module.name)
        return build_verl_manager(cls, tokenizer, num_examine=num_examine, compute_score=_compute_score(cfg, False),
                                  reward_fn_key=key, reward_kwargs=dict(cfg.reward_model.reward_kwargs))
    name = _manager_name(cfg)
    if is_verl_manager(name):
        return create_reward_manager(name, tokenizer, compute_score=_compute_score(cfg, False), reward_fn_key=key,
                                     num_examine=num_examine, reward_kwargs=dict(cfg.reward_model.reward_kwargs))
    if name == "dapo":  # verl's DAPO manager arguments, given as reward_kwargs, win for training
        options = {**options, **(_dapo_options(cfg) if options else {})}
    return create_reward_manager(name, tokenizer, compute_score=_compute_score(cfg, True), reward_fn_key=key,
                                 timeout_s=cfg.reward_model.timeout_s, **options)


def build_reward_fns(cfg: RootConfig, tokenizer: Any) -> tuple[Any, Any]:
    """Training and validation reward managers (the DAPO overlong penalty only in training)."""
    from verl.reward import OverlongBufferConfig

    ob = cfg.reward_model.overlong_buffer
    overlong = OverlongBufferConfig(enable=ob.enable, len=ob.len, penalty_factor=ob.penalty_factor) if ob.enable else None
    train = load_reward_manager(cfg, tokenizer, 0, overlong_buffer=overlong, max_response_length=cfg.data.max_response_length)
    val = load_reward_manager(cfg, tokenizer, 1)
    return train, val
