"""``verl init-model``: write a randomly initialised causal LM next to a real tokenizer.

Used for tests, benchmarks and the CPU quick-start, where downloading a pretrained model is not
possible (no network) or not wanted. The written directory loads offline with
``AutoModelForCausalLM.from_pretrained(out)`` and ``AutoTokenizer.from_pretrained(out)``.

Sizes (``tiny`` is the default for CPU tests, ``small`` for CPU runs that should learn a little):

    size   hidden  layers  heads  kv heads  intermediate
    tiny       64       2      4         2           128
    small     256       4      8         4           768

Architectures: ``qwen2`` and ``llama`` (rotary positions), and ``gpt2`` (learned absolute
position embeddings: useful to catch position-id bugs that rotary models hide;
dropout set to 0 like the other two).

Choices written into the config: ``vocab_size`` = ``len(tokenizer)`` rounded up to a multiple of
64 (as real checkpoints pad their embedding tables), tied input/output embeddings,
``max_position_embeddings`` 4096, bos/eos/pad ids taken from the tokenizer (pad falls back to
eos when the tokenizer has none), and a ``generation_config.json`` whose ``eos_token_id`` lists
every end-of-text / end-of-turn token the tokenizer knows (e.g. ``<|im_end|>`` and
``<|endoftext|>`` for Qwen2.5), so generation stops on any of them.

Example:
    verl init-model --arch qwen2 --size tiny --tokenizer path/to/qwen2.5-tokenizer --out models/tiny
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase

__all__ = ["ARCHS", "SIZES", "END_TOKENS", "build_config", "init_random_model", "main"]

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 128},
    "small": {"hidden": 256, "layers": 4, "heads": 8, "kv_heads": 4, "intermediate": 768},
}
ARCHS: tuple[str, ...] = ("qwen2", "llama", "gpt2")
# Special tokens that end a generation in common chat tokenizers (generation_config eos ids).
END_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|end|>")
MAX_POSITIONS = 4096
VOCAB_MULTIPLE = 64


def _eos_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokenizer's eos id first, then every other known end token among its added tokens.

    Only added (special) tokens count: ordinary BPE pieces such as the text ``</s>`` in a byte-level
    vocabulary are not end tokens.
    """
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    vocab = tokenizer.added_tokens_encoder
    for token in END_TOKENS:
        tid = vocab.get(token)
        if tid is not None and tid not in ids:
            ids.append(int(tid))
    if not ids:
        raise ValueError("the tokenizer has no eos token and none of the known end tokens " + str(END_TOKENS))
    return ids


def build_config(arch: str, size: str, tokenizer: PreTrainedTokenizerBase) -> Any:
    """Hugging Face config of a randomly initialised model of ``arch`` / ``size`` for ``tokenizer``.

    Raises:
        ValueError: for an unknown architecture or size.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; valid: {', '.join(ARCHS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; valid: {', '.join(SIZES)}")
    s = SIZES[size]
    vocab = math.ceil(len(tokenizer) / VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    eos = _eos_ids(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": eos[0], "pad_token_id": pad}
    if arch == "gpt2":
        return AutoConfig.for_model(
            "gpt2",
            vocab_size=vocab,
            n_embd=s["hidden"],
            n_layer=s["layers"],
            n_head=s["heads"],
            n_inner=s["intermediate"],
            n_positions=MAX_POSITIONS,
            tie_word_embeddings=True,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **special,
        )
    return AutoConfig.for_model(
        arch,
        vocab_size=vocab,
        hidden_size=s["hidden"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        intermediate_size=s["intermediate"],
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        **special,
    )


def init_random_model(arch: str, size: str, tokenizer_dir: str | Path, out_dir: str | Path, seed: int = 0) -> Path:
    """Write a randomly initialised ``arch`` model of ``size`` plus the tokenizer to ``out_dir``.

    The weights depend only on (arch, size, tokenizer, seed): initialisation runs under a forked
    RNG seeded with ``seed``, so the caller's global RNG state is left untouched.

    Args:
        arch: one of `ARCHS`.
        size: one of `SIZES`.
        tokenizer_dir: directory loadable by ``AutoTokenizer.from_pretrained`` (offline).
        out_dir: output directory (created; existing files are overwritten).
        seed: initialisation seed.

    Returns:
        ``out_dir`` as a `Path`.
    """
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = build_config(arch, size, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    eos = _eos_ids(tokenizer)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos if len(eos) > 1 else eos[0],
        pad_token_id=config.pad_token_id,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``verl init-model``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="verl init-model", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=ARCHS, default="qwen2")
    parser.add_argument("--size", choices=tuple(SIZES), default="tiny")
    parser.add_argument("--tokenizer", required=True, help="tokenizer directory (AutoTokenizer, offline)")
    parser.add_argument("--out", required=True, help="output model directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out directory")
    args = parser.parse_args(argv)
    target = Path(args.out)
    if target.is_dir() and any(target.iterdir()) and not args.force:
        print(f"verl init-model: {target} is not empty (use --force to overwrite)", file=sys.stderr)
        return 2
    out = init_random_model(args.arch, args.size, args.tokenizer, args.out, seed=args.seed)
    n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(out).parameters())
    print(f"wrote {args.arch}/{args.size} model ({n_params / 1e6:.2f}M parameters) to {out}")
    return 0
