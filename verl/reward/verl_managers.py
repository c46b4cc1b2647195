"""Reward managers written for verl: registration by name, built with verl's constructor arguments.

verl's managers are classes ``cls(tokenizer, num_examine, compute_score=None,
reward_fn_key="data_source", **reward_kwargs)`` called as ``manager(data, return_dict=False)``
and returning the `(B, R)` reward tensor, or ``{"reward_tensor", "reward_extra_info"}``. They
typically loop ``for i in range(len(data)): item = data[i]`` over `DataProtoItem` rows.

:func:`register` puts such a class into `REWARD_MANAGERS` behind a `VerlManagerAdapter`, which
has this package's manager constructor (`verl.reward.managers.NaiveRewardManager`'s arguments),
so every registered name is built by the same call. The adapter translates them into verl's:
``num_examine`` and ``compute_score`` (`default_compute_score` when None) as they are,
``reward_kwargs`` as constructor keywords, and an enabled ``overlong_buffer`` with
``max_response_length`` as verl's DAPO manager keywords ``overlong_buffer_cfg`` / ``max_resp_len``
(as verl's DAPO recipe passes them). Keywords the constructor does not declare are left out
unless it takes ``**kwargs``. ``timeout_s`` does not apply: such a class calls its scorer itself.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable
from typing import Any

from verl.reward.managers import REWARD_MANAGERS
from verl.reward.overlong import OverlongBufferConfig
from verl.reward.scorers import default_compute_score

__all__ = ["AbstractRewardManager", "VerlManagerAdapter", "build_verl_manager", "get_reward_manager_cls", "register"]


class AbstractRewardManager(abc.ABC):
    """verl's reward-manager base class (subclassing it is optional)."""

    @abc.abstractmethod
    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        **kwargs: Any,
    ) -> None: ...

    @abc.abstractmethod
    def __call__(self, data: Any, return_dict: bool = False) -> Any: ...


def build_verl_manager(
    cls: type,
    tokenizer: Any,
    *,
    num_examine: int = 0,
    compute_score: Callable[..., Any] | None = None,
    reward_fn_key: str = "data_source",
    reward_kwargs: dict[str, Any] | None = None,
) -> Any:
    """Builds a verl-style manager class with verl's constructor arguments.

    ``reward_kwargs`` are passed as keywords when the constructor declares them (or takes
    ``**kwargs``), as verl's ``load_reward_manager`` does.
    """
    kwargs = dict(reward_kwargs or {})
    params = inspect.signature(cls).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return cls(
        tokenizer=tokenizer,
        num_examine=num_examine,
        compute_score=compute_score or default_compute_score,
        reward_fn_key=reward_fn_key,
        **kwargs,
    )


class VerlManagerAdapter:
    """What `REWARD_MANAGERS` holds for a verl-style class: builds it from this package's manager
    arguments (module docstring). Picklable: Ray workers may build it.

    Args:
        cls: The verl-style manager class.
    """

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __call__(
        self,
        tokenizer: Any,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        timeout_s: float | None = None,
        overlong_buffer: OverlongBufferConfig | None = None,
        max_response_length: int | None = None,
        num_examine: int = 0,
        reward_kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """``cls(tokenizer=, num_examine=, compute_score=, reward_fn_key=, **reward_kwargs)``.

        Raises:
            ValueError: An enabled ``overlong_buffer`` that `OverlongBufferConfig.validate` refuses.
        """
        kwargs = dict(reward_kwargs or {})
        if overlong_buffer is not None and overlong_buffer.enable:
            overlong_buffer.validate(max_response_length)
            kwargs.update(overlong_buffer_cfg=overlong_buffer, max_resp_len=max_response_length)
        return build_verl_manager(
            self.cls,
            tokenizer,
            num_examine=num_examine,
            compute_score=compute_score,
            reward_fn_key=reward_fn_key,
            reward_kwargs=kwargs,
        )

    def __repr__(self) -> str:
        return f"VerlManagerAdapter({self.cls.__module__}.{self.cls.__qualname__})"


def register(name: str) -> Callable[[type], type]:
    """verl's ``@register("name")`` for reward-manager classes.

    Registering the same class twice is allowed (a module imported again).

    Raises:
        ValueError: ``name`` is taken by another manager.
    """

    def decorator(cls: type) -> type:
        if name in REWARD_MANAGERS:
            existing = REWARD_MANAGERS.get(name)
            if getattr(existing, "cls", None) is cls:
                return cls
            raise ValueError(f"reward manager {name!r} is already registered ({existing!r})")
        REWARD_MANAGERS.add(name, VerlManagerAdapter(cls))
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    """The class registered under ``name`` (verl's ``get_reward_manager_cls``).

    Raises:
        RegistryError: Unknown name (lists the registered ones).
    """
    entry = REWARD_MANAGERS.get(name)
    return getattr(entry, "cls", entry)
