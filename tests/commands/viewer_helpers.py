"""Synthetic rollout dumps (the files `verl.trainer.ppo.dumps.dump_rollout_data` writes) and the
headless Chromium the viewer tests drive, for ``tests/trainer/test_viewer*.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

WORDS = ["the", " answer", " is", " 42", ".", " Let", " me", " think", "\n", " calc", "ulate", " step", " by", " one"]


def write_step(
    root: Path,
    step: int,
    rows: list[dict[str, Any]],
    responses: list[list[int]],
    masks: list[list[int]],
    pieces: dict[int, str],
    max_len: int,
    seed: int = 0,
    prompt: list[int] | None = None,
) -> None:
    """Write ``<step>.jsonl`` + ``<step>.tokens.npz`` for ``rows`` with the given response token ids and masks."""
    rng = np.random.default_rng(seed + step)
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{step}.jsonl").open("w", encoding="utf-8") as f:
        for row, resp in zip(rows, responses, strict=True):
            base = {
                "input": "Q: what is 6*7?",
                "gts": "42",
                "step": step,
                "num_turns": 1,
                "prompt_length": len(prompt or [0, 1]),
                "response_length": len(resp),
                "truncated": len(resp) >= max_len,
                "policy_version": step - 1,
            }
            f.write(json.dumps({**base, **row}, ensure_ascii=False) + "\n")
    p = prompt or [0, 1]
    lens = np.array([len(r) for r in responses])
    total = int(lens.sum())
    old = -rng.exponential(0.5, total).astype(np.float32)
    vocab_ids = np.array(sorted(pieces), dtype=np.int32)
    blobs = [pieces[int(i)].encode("utf-8") for i in vocab_ids]
    adv = np.concatenate(
        [np.full(n, float(r.get("adv", r.get("score", 0.0) - 0.5)), np.float32) for n, r in zip(lens, rows)]
    )
    np.savez_compressed(
        root / f"{step}.tokens.npz",
        prompt_ids=np.tile(np.array(p, np.int32), len(rows)),
        prompt_offsets=np.arange(len(rows) + 1, dtype=np.int64) * len(p),
        response_ids=np.concatenate([np.array(r, np.int32) for r in responses]),
        response_offsets=np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
        response_mask=np.concatenate([np.array(m, np.uint8) for m in masks]),
        response_pad=(max_len - lens).astype(np.int32),
        old_log_probs=old,
        rollout_log_probs=(old + rng.normal(0, 0.01, total)).astype(np.float32),
        entropys=rng.exponential(1.0, total).astype(np.float32),
        advantages=adv,
        vocab_ids=vocab_ids,
        vocab_offsets=np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64),
        vocab_bytes=np.frombuffer(b"".join(blobs), dtype=np.uint8),
    )


def write_large_dump(root: Path, n_rows: int, n_tokens: int, steps: int = 1, group: int = 8, seed: int = 0) -> None:
    """``steps`` steps of ``n_rows`` rows of ``n_tokens`` response tokens each.

    Token ids are uniform over 5,000 pieces of 1-7 characters (4 on average, as BPE pieces of
    English text), log-probs, entropies and gaps random: harder to compress than real rollouts.
    """
    rng = np.random.default_rng(seed)
    vocab = 5000
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz      .,0123456789"))
    pieces = {
        i: WORDS[i] if i < len(WORDS) else "".join(rng.choice(letters, int(rng.integers(1, 8)))) for i in range(vocab)
    }
    for step in range(1, steps + 1):
        ids = rng.integers(0, vocab, (n_rows, n_tokens), dtype=np.int32)
        text = np.asarray([pieces[i] for i in range(vocab)], dtype=object)
        rows = []
        for i in range(n_rows):
            score = float(rng.random() < 0.4)
            rows.append(
                {
                    "output": "".join(text[ids[i]]),
                    "score": score,
                    "uid": f"{step}-{i // group}",
                    "data_source": "openai/gsm8k" if i % 3 else "math",
                    "tool_calls": [],
                }
            )
        masks = np.ones((n_rows, n_tokens), np.uint8)
        write_step(root, step, rows, list(ids), list(masks), pieces, n_tokens + 8, seed)


def chromium_or_skip() -> str:
    """Path of the system Chromium (Debian ``chromium``) and Playwright, or skip with the reason."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no system Chromium (apt-get install -y chromium; .ci/run installs it)")
    pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install -e '.[dev]')")
    return path
