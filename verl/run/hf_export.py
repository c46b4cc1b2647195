"""A checkpoint's actor → a Hugging Face directory (`export_hf`, behind ``verl merge`` and ``verl.model_merger``).

``CKPT_DIR`` is a ``global_step_N`` directory written by the trainer, or its ``actor``
subdirectory (it holds ``config.yaml``, ``manifest.json`` and ``actor/{model.safetensors,
huggingface/}``; checkpoints written before the ``huggingface/`` layout keep
``actor/config.json`` and ``actor/tokenizer/``, and still merge). It is verified
against its manifest first, so a truncated or corrupted checkpoint is refused rather than
exported as a silently broken model; a checkpoint without a manifest (an interrupted save) is
refused unless ``--no-verify`` is given. ``OUT_DIR`` must be new or empty: files left over
from an earlier export (an ``adapter_config.json`` next to merged weights) would change what
``from_pretrained`` loads. The output loads offline with
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``. With LoRA the
adapters are merged into the base weights by default (``merge_and_unload``);
``--adapter-only`` writes the peft adapter directory instead.

Loading a checkpoint never runs code from it. The architecture is the transformers class of
the ``model_type`` in the saved HF ``actor/huggingface/config.json`` (its ``auto_map`` is ignored); the
checkpoint's ``config.yaml`` is read as data only (LoRA rank / alpha / target modules) — its
model ``path`` and ``trust_remote_code`` are never used; weights come from safetensors, the
tokenizer from ``actor/huggingface/`` (``tokenizer.json``, no code). A ``model_type`` that
transformers does not know needs ``--trust-remote-code`` on the merge command line, which
then imports the modelling code saved beside that ``config.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verl.run.checkpoint import HF_CONFIG, HF_SUBDIR, MANIFEST, TOKENIZER_DIR, CheckpointError, check_checkpoint
from verl.utils.errors import CheckpointLoadError


def resolve_checkpoint_dir(path: str | Path) -> Path:
    """The ``global_step_N`` directory of ``path``: itself, or the parent of its ``actor`` directory.

    Raises:
        ValueError: ``path`` is a ``critic`` directory (a value model has no causal-LM export).
    """
    path = Path(path)
    if path.name == "critic" and (path.parent / "config.yaml").is_file():
        raise ValueError(f"{path}: merging the critic (a value model) is not supported yet: pass the actor directory")
    if path.name == "actor" and (path.parent / "config.yaml").is_file() and not (path / "config.yaml").is_file():
        return path.parent
    return path


def _hf_files_dir(actor_dir: Path) -> Path:
    """Where the HF ``config.json`` lies: ``actor/huggingface/``, or ``actor/`` in older checkpoints."""
    return actor_dir / HF_SUBDIR if (actor_dir / HF_SUBDIR / HF_CONFIG).is_file() else actor_dir


def _tokenizer_dir(hf_dir: Path, actor_dir: Path) -> Path:
    """``hf_dir`` when it holds tokenizer files, else the older ``actor/tokenizer/``."""
    return hf_dir if (hf_dir / "tokenizer_config.json").is_file() else actor_dir / TOKENIZER_DIR


def _build_architecture(actor_dir: Path, trust_remote_code: bool) -> Any:
    """An untrained module of the architecture in ``actor_dir/config.json`` (no weights read).

    Raises:
        CheckpointLoadError: no ``config.json``, or a ``model_type`` transformers does not know
            (without ``trust_remote_code``).
    """
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    path = actor_dir / HF_CONFIG
    if not path.is_file():
        raise CheckpointLoadError(
            f"{path} not found: the checkpoint does not say its architecture (written by an "
            f"older verl?); re-save it with this version"
        )
    raw = json.loads(path.read_text())
    model_type = raw.get("model_type")
    if model_type in CONFIG_MAPPING and not trust_remote_code:
        raw.pop("auto_map", None)  # code named by the checkpoint is never imported
        config = CONFIG_MAPPING[model_type].from_dict(raw)
        return AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    if not trust_remote_code:
        raise CheckpointLoadError(
            f"{path}: model_type {model_type!r} is not a transformers architecture; loading "
            f"it would run code from the checkpoint: pass --trust-remote-code if you trust it"
        )
    config = AutoConfig.from_pretrained(str(actor_dir), trust_remote_code=True)
    return AutoModelForCausalLM.from_config(config, trust_remote_code=True)


def _load_actor(ckpt_dir: Path, trust_remote_code: bool = False, hf_dir: Path | None = None) -> tuple[object, object]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from verl.config import load_config
    from verl.modules.factory import _apply_lora

    model_cfg = load_config(ckpt_dir / "config.yaml").actor_rollout_ref.model
    hf_dir = hf_dir or _hf_files_dir(ckpt_dir / "actor")
    module = _build_architecture(hf_dir, trust_remote_code)
    if model_cfg.lora_rank and model_cfg.lora_rank > 0:
        module = _apply_lora(module, model_cfg, "CAUSAL_LM")
    weights = ckpt_dir / "actor" / "model.safetensors"
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as e:
        raise CheckpointLoadError(f"{weights} is not a loadable safetensors file ({e})") from None
    missing, unexpected = module.load_state_dict(state, strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embedding
    if real_missing or unexpected:
        raise CheckpointLoadError(
            f"{ckpt_dir}: checkpoint does not match the model (missing {real_missing[:3]}, unexpected {unexpected[:3]})"
        )
    tok_dir = _tokenizer_dir(hf_dir, ckpt_dir / "actor")
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir), trust_remote_code=trust_remote_code)
    return module, tokenizer


def export_hf(
    ckpt_dir: str | Path,
    out_dir: str | Path,
    adapter_only: bool = False,
    verify: bool = True,
    trust_remote_code: bool = False,
    hf_dir: str | Path | None = None,
) -> Path:
    """Write the checkpoint's actor as a Hugging Face model + tokenizer directory.

    Args:
        ckpt_dir: a ``global_step_N`` directory (or its temporary form during a save), or its
            ``actor`` subdirectory.
        out_dir: output directory (created).
        adapter_only: LoRA runs only: write the adapter instead of merged weights.
        verify: refuse a checkpoint without ``manifest.json`` (False: ``--no-verify``, and the
            trainer exporting the checkpoint it is writing).
        trust_remote_code: allow a ``model_type`` unknown to transformers (its code is imported).
        hf_dir: take ``config.json`` and the tokenizer from this HF directory instead of the
            checkpoint's ``actor/huggingface/`` (verl's ``--hf_model_path``).

    Returns:
        ``out_dir``.

    Raises:
        FileNotFoundError: ``ckpt_dir`` lacks ``config.yaml`` or the actor weights.
        FileExistsError: ``out_dir`` exists and is not empty.
        CheckpointError: ``ckpt_dir`` has a manifest that its files do not match (truncated,
            corrupted or missing files), or has none and ``verify`` is True.
        CheckpointLoadError: the architecture is unknown or the weights do not load.
        ValueError: ``adapter_only`` on a run without LoRA, or mismatched weights.
    """
    ckpt, out = resolve_checkpoint_dir(ckpt_dir), Path(out_dir)
    for need in (ckpt / "config.yaml", ckpt / "actor" / "model.safetensors"):
        if not need.is_file():
            raise FileNotFoundError(f"{need} not found: is {ckpt} a global_step_N checkpoint directory?")
    if verify and not (ckpt / MANIFEST).is_file():
        raise CheckpointError(
            f"{ckpt} has no {MANIFEST} (an interrupted save, or not written by verl); "
            f"refusing to export it unverified: pass --no-verify to export it anyway"
        )
    if (ckpt / MANIFEST).is_file() and (problem := check_checkpoint(ckpt)) is not None:
        raise CheckpointError(f"refusing to export a damaged checkpoint: {problem}")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; choose a new output directory")
    if hf_dir is not None and not (Path(hf_dir) / HF_CONFIG).is_file():
        raise FileNotFoundError(
            f"{Path(hf_dir) / HF_CONFIG} not found: --hf_model_path must be a local HF model directory"
        )
    module, tokenizer = _load_actor(ckpt, trust_remote_code, Path(hf_dir) if hf_dir is not None else None)
    is_peft = hasattr(module, "merge_and_unload")
    if adapter_only and not is_peft:
        raise ValueError("--adapter-only needs a LoRA run (actor_rollout_ref.model.lora_rank > 0)")
    if is_peft and not adapter_only:
        module = module.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    module.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out
