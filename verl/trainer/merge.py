"""``verl merge CKPT_DIR OUT_DIR``: a checkpoint's actor → a Hugging Face directory.

``CKPT_DIR`` is a ``global_step_N`` directory written by the trainer (it holds ``config.yaml``
and ``actor/model.safetensors``). A published checkpoint (one with ``manifest.json``) is
verified against its manifest first, so a truncated or corrupted checkpoint is refused rather
than exported as a silently broken model. ``OUT_DIR`` must be new or empty: files left over
from an earlier export (an ``adapter_config.json`` next to merged weights) would change what
``from_pretrained`` loads. The output loads offline with
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``. With LoRA the
adapters are merged into the base weights by default (``merge_and_unload``);
``--adapter-only`` writes the peft adapter directory instead. Loading a checkpoint never runs
code from it: weights come from safetensors and the config from YAML.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from verl.trainer.checkpoint import MANIFEST, CheckpointError, check_checkpoint


def _load_actor(ckpt_dir: Path) -> tuple[object, object]:
    from safetensors.torch import load_file

    from verl.config import load_config
    from verl.modules import create_model, load_tokenizer

    cfg = load_config(ckpt_dir / "config.yaml")
    model_cfg = cfg.actor_rollout_ref.model
    module = create_model("actor", model_cfg)
    state = load_file(str(ckpt_dir / "actor" / "model.safetensors"))
    missing, unexpected = module.load_state_dict(state, strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embedding
    if real_missing or unexpected:
        raise ValueError(f"{ckpt_dir}: checkpoint does not match the model (missing {real_missing[:3]}, unexpected {unexpected[:3]})")
    tokenizer = load_tokenizer(cfg.data.tokenizer or model_cfg.tokenizer_path or model_cfg.path)
    return module, tokenizer


def export_hf(ckpt_dir: str | Path, out_dir: str | Path, adapter_only: bool = False) -> Path:
    """Write the checkpoint's actor as a Hugging Face model + tokenizer directory.

    Args:
        ckpt_dir: a ``global_step_N`` directory (or its temporary form during a save).
        out_dir: output directory (created).
        adapter_only: LoRA runs only: write the adapter instead of merged weights.

    Returns:
        ``out_dir``.

    Raises:
        FileNotFoundError: ``ckpt_dir`` lacks ``config.yaml`` or the actor weights.
        FileExistsError: ``out_dir`` exists and is not empty.
        CheckpointError: ``ckpt_dir`` has a manifest that its files do not match (truncated,
            corrupted or missing files).
        ValueError: ``adapter_only`` on a run without LoRA, or mismatched weights.
    """
    ckpt, out = Path(ckpt_dir), Path(out_dir)
    for need in (ckpt / "config.yaml", ckpt / "actor" / "model.safetensors"):
        if not need.is_file():
            raise FileNotFoundError(f"{need} not found: is {ckpt} a global_step_N checkpoint directory?")
    if (ckpt / MANIFEST).is_file() and (problem := check_checkpoint(ckpt)) is not None:
        raise CheckpointError(f"refusing to export a damaged checkpoint: {problem}")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; choose a new output directory")
    module, tokenizer = _load_actor(ckpt)
    is_peft = hasattr(module, "merge_and_unload")
    if adapter_only and not is_peft:
        raise ValueError("--adapter-only needs a LoRA run (actor_rollout_ref.model.lora_rank > 0)")
    if is_peft and not adapter_only:
        module = module.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    module.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``verl merge CKPT_DIR OUT_DIR [--adapter-only]``."""
    parser = argparse.ArgumentParser(prog="verl merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("ckpt_dir", help="a global_step_N checkpoint directory")
    parser.add_argument("out_dir", help="output Hugging Face directory")
    parser.add_argument("--adapter-only", action="store_true", help="LoRA: write the adapter, not merged weights")
    args = parser.parse_args(argv)
    try:
        out = export_hf(args.ckpt_dir, args.out_dir, adapter_only=args.adapter_only)
    except (OSError, ValueError, CheckpointError) as e:
        print(f"verl merge: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
