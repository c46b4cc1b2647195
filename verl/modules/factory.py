"""`create_model`: one factory for the actor, reference, critic and reward-model networks.

Each role gets its own config section (never the root config):

    role           config section                                  network
    actor          actor_rollout_ref.model   (ModelConfig)         AutoModelForCausalLM (+ LoRA)
    ref            actor_rollout_ref.model   (ModelConfig)         AutoModelForCausalLM, frozen, eval
    critic         critic.model              (CriticModelConfig)   `ValueModel` (AutoModel + value head)
    reward_model   reward_model.model        (RewardModelModelConfig)  AutoModelForSequenceClassification(1)

Paths are local directories, hub ids (only with network access) or ``builtin://NAME`` (the
models shipped with verl, see `verl.modules.builtin`). Custom modelling code from a model
directory runs only with ``trust_remote_code=True`` (off by default).

LoRA (``lora_rank > 0``, peft): the actor is wrapped with ``LoraConfig(r, lora_alpha,
target_modules, exclude_modules, task_type=CAUSAL_LM)``. The reference policy is then *not* a second model: it is
the actor with its adapters disabled (``with ref_policy_context(actor): ...``), which saves a full
copy of the weights; ``create_model("ref", ...)`` never adds adapters.

Dropout is switched off in every role (as TRL's ``disable_dropout``): with dropout active, the
training forward's log-probs of the very same weights differ from the rollout's (eval mode)
ones, which turns the PPO ratio into noise (GPT-2 configs default to p = 0.1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
)

from verl.data.tokenizer import BUILTIN_SCHEME
from verl.modules.value_model import ValueModel
from verl.utils.dtypes import torch_dtype

__all__ = [
    "ROLES",
    "BUILTIN_SCHEME",
    "create_model",
    "disable_dropout",
    "enable_activation_checkpointing",
    "ref_policy_context",
    "resolve_model_path",
]

ROLES: tuple[str, ...] = ("actor", "ref", "critic", "reward_model")


def resolve_model_path(path: str | Path) -> str:
    """Local path (or hub id) for ``path``; ``builtin://NAME`` maps to the built-in model's directory.

    Raises:
        ModelError: a built-in model that is missing or stale (one line naming ``verl builtin build``).
    """
    path = str(path)
    if path.startswith(BUILTIN_SCHEME):
        from verl.modules.builtin import get_builtin_model_dir

        return str(get_builtin_model_dir(path[len(BUILTIN_SCHEME) :]))
    return path


def _target_modules(value: Any) -> str | list[str]:
    """peft ``target_modules`` from ``"all-linear"``, a list, or a comma-separated string."""
    if isinstance(value, str):
        return value if value == "all-linear" else [m.strip() for m in value.split(",") if m.strip()]
    return [str(m) for m in value]


def _apply_lora(model: nn.Module, cfg: Any, task_type: str) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=int(cfg.lora_rank),
        lora_alpha=int(cfg.lora_alpha),
        target_modules=_target_modules(cfg.target_modules),
        task_type=task_type,
        exclude_modules=getattr(cfg, "exclude_modules", None),  # regex, full match on the module name
    )
    return get_peft_model(model, lora)


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute activations in backward (non-reentrant ``torch.utils.checkpoint``).

    Non-reentrant checkpointing works with frozen inputs (LoRA) and with FSDP2 without the
    ``enable_input_require_grads`` workaround that the reentrant variant needs.
    """
    if isinstance(model, ValueModel):
        model = model.backbone
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def disable_dropout(model: nn.Module) -> None:
    """Set ``p = 0`` in every ``nn.Dropout`` and every float ``attention_dropout`` (in place).

    Attention layers of Llama-style models read the float ``attention_dropout`` attribute
    instead of owning an ``nn.Dropout``, so both forms are cleared.
    """
    for sub in model.modules():
        if isinstance(sub, nn.Dropout):
            sub.p = 0.0
        if isinstance(getattr(sub, "attention_dropout", None), float):
            sub.attention_dropout = 0.0


def create_model(
    role: str,
    cfg: Any,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    path: str | None = None,
) -> nn.Module:
    """Build the network of one role from its config section.

    Args:
        role: one of `ROLES`.
        cfg: the role's model section (`ModelConfig`, `CriticModelConfig` or
            `RewardModelModelConfig`); fields used: ``path``, ``trust_remote_code``, ``dtype``,
            and where present ``override_config``, ``external_lib``,
            ``enable_gradient_checkpointing``, ``lora_rank``, ``lora_alpha``, ``target_modules``.
        dtype: parameter dtype overriding ``cfg.dtype``.
        device: device to place the model on.
        path: model path overriding ``cfg.path`` (the critic's ``path: null`` means "the actor's
            path", which only the caller knows).

    Returns:
        actor/ref: a causal LM (a peft model for the actor when ``lora_rank > 0``); the ref is in
        eval mode with ``requires_grad=False``. critic: a `ValueModel`. reward_model: a sequence
        classifier with one label, in eval mode, frozen.

    Raises:
        ValueError: unknown role, missing path or unknown dtype.
        ModelError: weights that are a pickle referencing code (refused by the weights-only
            loader, never run), naming the file.
    """
    if role not in ROLES:
        raise ValueError(f"unknown model role {role!r}; valid roles: {', '.join(ROLES)}")
    model_path = path if path is not None else getattr(cfg, "path", None)
    if not model_path:
        raise ValueError(f"create_model({role!r}): the config section has no model path")
    if getattr(cfg, "external_lib", None):
        from verl.utils.import_utils import load_extern_module

        load_extern_module(cfg.external_lib)  # a module name or a .py path
    kwargs: dict[str, Any] = {
        "dtype": torch_dtype(dtype if dtype is not None else getattr(cfg, "dtype", "float32")),
        "trust_remote_code": bool(getattr(cfg, "trust_remote_code", False)),
        **dict(getattr(cfg, "override_config", None) or {}),
    }
    resolved = resolve_model_path(model_path)
    model: nn.Module
    try:
        if role in ("actor", "ref"):
            model = AutoModelForCausalLM.from_pretrained(resolved, **kwargs)
        elif role == "critic":
            model = ValueModel.from_pretrained(resolved, **kwargs)
        else:
            model = AutoModelForSequenceClassification.from_pretrained(resolved, num_labels=1, **kwargs)
    except Exception as e:
        from verl.utils.safe_load import is_refused_pickle

        if is_refused_pickle(e):
            raise refused_weights_error(resolved, e) from None
        raise
    if role in ("actor", "critic") and getattr(cfg, "enable_gradient_checkpointing", False):
        enable_activation_checkpointing(model)
    if role == "actor" and int(getattr(cfg, "lora_rank", 0)) > 0:
        model = _apply_lora(model, cfg, "CAUSAL_LM")
    elif role == "critic" and int(getattr(cfg, "lora_rank", 0)) > 0:
        assert isinstance(model, ValueModel)
        model.backbone = _apply_lora(model.backbone, cfg, "FEATURE_EXTRACTION")
    disable_dropout(model)
    if role in ("ref", "reward_model"):
        model.eval().requires_grad_(False)
    return model.to(device)


def refused_weights_error(model_dir: str, exc: BaseException) -> Exception:
    """A one-line `ModelError` for weights that torch's weights-only loader refused (never run).

    Names the first pickle weights file of ``model_dir`` that the weights-only loader refuses
    (each is re-read weights-only, memory-mapped) and the safe formats.
    """
    from verl.utils.errors import ModelError
    from verl.utils.safe_load import SAFE_FORMATS, refusal_reason

    culprit, reason = Path(model_dir), refusal_reason(exc)
    for f in sorted(Path(model_dir).glob("*.bin")) + sorted(Path(model_dir).glob("*.pt")):
        try:
            torch.load(f, weights_only=True, mmap=True, map_location="cpu")
        except Exception as e:  # noqa: BLE001 - the first file that fails is the one to name
            culprit, reason = f, refusal_reason(e)
            break
    return ModelError(
        f"{culprit}: not loaded as weights: {reason}; it was not run. Weights must be {SAFE_FORMATS}: "
        f"convert them from a trusted copy (e.g. save_pretrained writes model.safetensors)"
    )


@contextlib.contextmanager
def ref_policy_context(model: nn.Module) -> Iterator[nn.Module]:
    """Inside the block, ``model`` computes the reference policy: the actor with LoRA adapters off.

    With LoRA the reference model is the frozen base model, i.e. exactly the actor with its
    adapters disabled, so no second copy of the weights is kept.

    Args:
        model: the actor, a peft ``PeftModel``.

    Yields:
        The same model, adapters disabled until the block exits.

    Raises:
        TypeError: if ``model`` has no LoRA adapters. Computing "reference" log-probs with a full
            fine-tuned actor would silently give KL = 0; the caller must use a separate reference
            model (``create_model("ref", ...)``) instead.
    """
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        raise TypeError(
            "ref_policy_context needs a LoRA (peft) actor; without LoRA build a separate reference "
            f"model with create_model('ref', ...), got {type(model).__name__}"
        )
    with model.disable_adapter():
        yield model
