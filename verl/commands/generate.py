"""Offline generation: ``data.n_samples`` responses for every prompt of a file (verl's ``main_generation``).

    verl generate [CONFIG] data.path=test.parquet data.output_path=gen.parquet model.path=DIR \\
        data.n_samples=4 rollout.temperature=1.0 rollout.response_length=256
    python -m verl.trainer.main_generation ...        # verl's entry point, same keys
    verl eval data.path=gen.parquet                    # then score them (`verl.trainer.main_eval`)

Keys are verl's ``generation.yaml`` (`verl.config.offline.load_generation_config`): ``data.*``
(``path``, ``prompt_key``, ``n_samples``, ``output_path``, ``batch_size``, ``trust_remote_code``,
``apply_chat_template_kwargs``, and ``truncation``), and the RL schema's ``model.*``,
``rollout.*`` (sampling: ``temperature``, ``top_k``, ``top_p``, ``do_sample``,
``prompt_length``, ``response_length``, ``seed``, ``dtype``, ...), ``trainer.device``.

What it does: reads the rows (parquet, jsonl or ``builtin://``; only ``data.prompt_key`` is
required, a chat list), renders each prompt with the tokenizer's chat template exactly as RL
training does (`verl.data.rl_dataset.render_prompts`), and samples with the product's rollout
engine from ``model.path``: ``rollout.name=hf`` (default) or ``vllm`` (an installed vLLM; the
engine starts from the model's config and receives its weights once, as in training). Output:
every input row, unchanged, plus ``responses``: a list of ``n_samples`` decoded strings (special
tokens skipped), written to
``data.output_path`` (parquet or jsonl) through a temporary file and a rename, so an interrupted
run never leaves a half-written file under that name.

Seeds: sample s of row i is drawn with its own generator seeded from ``(rollout.seed — or
trainer.seed when unset —, i, s)`` (`numpy.random.SeedSequence`): a sample's random draws depend
only on the seed, its row and its sample index, never on ``data.batch_size``. Greedy responses are
the same for every batch size; a sampled one can still change with it where the float rounding of
another batch shape moves a draw across a token boundary (seen on 3 of 80 samples of a random
model with a 151k vocabulary, whose near-uniform distribution makes such boundaries dense).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = ["check_output_path", "generate", "main", "read_data_rows", "sample_seeds"]

USAGE = __doc__.split("\n\n")[1]


def sample_seeds(seed: int, rows: Sequence[int], n_samples: int) -> torch.Tensor:
    """`(len(rows) · n,)` int64 seeds, row-major (row i's samples 0..n−1 together): ``SeedSequence((seed, i, s))``."""
    from verl.workers.rollout.layout import derive_seeds

    return torch.cat([derive_seeds([seed, i, s], 1) for i in rows for s in range(n_samples)])


def read_data_rows(path: str, key: str = "data.path") -> tuple[list[dict[str, Any]], list[str]]:
    """`verl.data.rl_dataset.read_rows` with its errors as one `DataError` line naming ``key``; no rows is an error
    too."""
    from verl.data.rl_dataset import read_rows
    from verl.utils.errors import DataError

    try:
        rows, labels = read_rows(path)
    except (FileNotFoundError, ValueError) as e:  # DataError is a ValueError
        raise DataError(f"{key}: {e}") from None
    if not rows:
        raise DataError(f"{key}: {path} has no rows")
    return rows, labels


def _render(cfg: Any, tokenizer: Any, rows: list[dict[str, Any]], labels: list[str]) -> list[list[int]]:
    """Each row's prompt ids (chat template as in training); a row without a usable prompt is a DataError."""
    from verl.data.rl_dataset import prompt_error, render_prompts
    from verl.utils.errors import DataError

    d = cfg.data
    for row, label in zip(rows, labels, strict=True):
        err = (
            prompt_error(row, d.prompt_key)
            if isinstance(row, dict)
            else f"row is a {type(row).__name__}, expected an object"
        )
        if err is not None:
            raise DataError(f"{d.path}: {label}: {err}")
    return render_prompts(tokenizer, [row[d.prompt_key] for row in rows], dict(d.apply_chat_template_kwargs))


DEFAULT_RESPONSE_LENGTH = 512  # the RL default (data.max_response_length)


def _set_lengths(cfg: Any, ids: list[list[int]], model_config: Any) -> None:
    """Fill unset ``rollout.prompt_length`` / ``response_length``; refuse lengths the model cannot take.

    Decision: the budget is the model's ``max_position_embeddings`` (its ``text_config``'s for
    multimodal configs; and ``rollout.max_model_len`` when set), the smaller of the two. Unset,
    ``response_length`` is 512 (the RL default) or what the budget leaves after the prompts,
    whichever is smaller, and ``prompt_length`` is the file's longest prompt. With
    ``data.truncation`` other than ``error`` and ``prompt_length`` unset, the response keeps at
    least min(512, budget / 2) and longer prompts are cut to the rest (e.g. budget 2,048: any
    prompt over 1,536 tokens is cut to 1,536, the responses get 512). Set lengths are kept as they are.

    Raises:
        ConfigError: lengths that exceed the budget, or leave no room for a prompt or a response.
    """
    from verl.config.errors import ConfigError

    ro, cut = cfg.rl.actor_rollout_ref.rollout, cfg.data.truncation != "error"
    prompt_set, response_set = cfg.lengths_set
    text = getattr(model_config, "text_config", None)
    positions = getattr(model_config, "max_position_embeddings", None) or getattr(text, "max_position_embeddings", None)
    limits = {
        name: v
        for name, v in (("the model's max_position_embeddings", positions), ("rollout.max_model_len", ro.max_model_len))
        if v
    }
    budget_name, budget = min(limits.items(), key=lambda kv: kv[1]) if limits else ("", None)
    longest = max(len(x) for x in ids)
    if not response_set:
        if not budget:
            ro.response_length = DEFAULT_RESPONSE_LENGTH
        else:
            room = budget - (ro.prompt_length if prompt_set else longest)
            # with truncation, long prompts are cut rather than the responses squeezed: at least half the budget
            ro.response_length = min(
                DEFAULT_RESPONSE_LENGTH, max(room, budget // 2) if cut and not prompt_set else room
            )
    if not prompt_set:
        ro.prompt_length = min(longest, budget - ro.response_length) if budget and cut else longest
    total = ro.prompt_length + ro.response_length
    if ro.prompt_length < 1 or ro.response_length < 1 or (budget and total > budget):
        fix = "set data.truncation=left|right|middle to cut long prompts, or " if not (cut or prompt_set) else ""
        raise ConfigError(
            f"no room for the responses: the longest prompt has {longest} tokens and {budget_name} is {budget} "
            f"(rollout.prompt_length {ro.prompt_length} {'as set' if prompt_set else 'derived'}, "
            f"rollout.response_length {ro.response_length} {'as set' if response_set else 'derived'}); "
            f"{fix}set rollout.prompt_length + rollout.response_length <= {budget}"
        )


def _truncate(cfg: Any, ids: list[list[int]], labels: list[str]) -> list[list[int]]:
    """Prompts cut to ``rollout.prompt_length`` by ``data.truncation`` (error: a DataError naming the row)."""
    from verl.data.rl_dataset import truncate_prompt
    from verl.utils.errors import DataError

    d, limit = cfg.data, cfg.rl.actor_rollout_ref.rollout.prompt_length
    out = []
    for one, label in zip(ids, labels, strict=True):
        if len(one) > limit:
            try:
                one = truncate_prompt(one, limit, d.truncation)
            except ValueError as e:
                raise DataError(
                    f"{d.path}: {label}: {str(e).replace('data.max_prompt_length', 'rollout.prompt_length')} "
                    "(set data.truncation=left|right|middle or a larger rollout.prompt_length)"
                ) from None
        out.append(one)
    return out


def _temporary(path: str) -> Path:
    out = Path(path).expanduser()
    return out.with_name(f".{out.name}.tmp{os.getpid()}")


def _free_name(path: Path) -> Path:
    """``path``, or ``<stem>.1<suffix>``, ``.2``, ... : the first that does not exist."""
    k, candidate = 0, path
    while candidate.exists():
        k += 1
        candidate = path.with_name(f"{path.stem}.{k}{path.suffix}")
    return candidate


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file (hard or symbolic links included)."""
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def check_output_path(path: str, data_path: str | None = None) -> None:
    """Fail before any work when ``data.output_path`` cannot be written (its directory is created).

    Args:
        path: ``data.output_path``.
        data_path: ``data.path``; the output must not be that file (after resolving links),
            which the output's rename would replace.

    Raises:
        ConfigError: one line naming ``data.output_path`` and why (a directory, the input file,
            no permission, ...).
    """
    from verl.config.errors import ConfigError

    out, tmp = Path(path).expanduser(), _temporary(path)
    if data_path and "://" not in data_path and _same_file(out, Path(data_path).expanduser()):
        raise ConfigError(
            f"data.output_path: {path} is the prompts file data.path ({data_path}); writing the "
            "samples there would replace the prompts: name another file"
        )
    if out.is_dir():
        raise ConfigError(f"data.output_path: {path} is a directory; name a .parquet or .jsonl file")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(b"")
    except OSError as e:
        raise ConfigError(f"data.output_path: cannot write {path} ({type(e).__name__}: {e.strerror or e})") from None
    finally:
        tmp.unlink(missing_ok=True)


def _write(rows: list[dict[str, Any]], path: str) -> None:
    """Write ``rows`` to ``path`` (.parquet or .jsonl) via a temporary file and an atomic rename.

        jsonl: values JSON cannot hold (dates, bytes, decimals from a parquet input) are written as
        their ``str``. Raises DataError (one line) for rows parquet cannot hold as one table (a column
        whose type differs between rows): the rows are written to a new ``<stem>.rows.jsonl`` beside it
    (never over an existing file), so no sample is lost.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from verl.utils.errors import DataError

    out, tmp = Path(path).expanduser(), _temporary(path)
    try:
        if out.suffix == ".parquet":
            try:
                table = pa.Table.from_pylist(rows)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                rescue = _free_name(out.with_name(f"{out.stem}.rows.jsonl"))
                _write(rows, str(rescue))
                raise DataError(
                    f"data.output_path: the rows do not fit one parquet table ({type(e).__name__}: "
                    f"{str(e).splitlines()[0]}); wrote them to {rescue} instead"
                ) from None
            pq.write_table(table, tmp)
        else:
            with tmp.open("w", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def generate(cfg: Any, log: Any = print) -> dict[str, float]:
    """Run generation for a loaded `verl.config.offline.GenerationConfig`; returns its figures.

    Returns:
        ``rows``, ``samples``, ``response_tokens`` (generated, EOS included), ``mean_response_length``,
        ``clip_ratio`` (share of samples whose response used all of ``rollout.response_length``,
        an EOS in the last slot included), ``time_s``, ``tokens_per_s``, and the ``prompt_length`` /
        ``response_length`` used.

    Raises:
        DataError: a row without a usable prompt, or an overlong prompt under ``truncation=error``
            (file and row named); ModelError: a model or tokenizer that cannot be loaded;
        ConfigError: an output path that cannot be written, lengths the model cannot take,
            ``trainer.device=cuda`` without CUDA.
    """
    from verl.modules import create_model
    from verl.trainer.ppo.builders import check_device
    from verl.run.model_access import load_run_tokenizer, read_model_config
    from verl.utils.errors import ModelError
    from verl.workers.rollout import build_rollout_engine

    d, rl = cfg.data, cfg.rl
    model_cfg, ro = rl.actor_rollout_ref.model, rl.actor_rollout_ref.rollout
    model_cfg.trust_remote_code = model_cfg.trust_remote_code or d.trust_remote_code
    check_device(rl)
    check_output_path(d.output_path, d.path)
    if cfg.ignored:
        log(
            "note: ignored by verl generate (they configure training-side work it does not do): "
            f"{', '.join(cfg.ignored)}"
        )
    rows, labels = read_data_rows(d.path)
    try:  # a missing model is one line naming model.path (this tool's key), before anything is built
        model_config = read_model_config("model.path", model_cfg.path, model_cfg.trust_remote_code)
        tokenizer = load_run_tokenizer(rl)
    except ModelError as e:
        raise ModelError(str(e).replace("actor_rollout_ref.model.", "model.")) from None
    rendered = _render(cfg, tokenizer, rows, labels)
    _set_lengths(cfg, rendered, model_config)
    ids = _truncate(cfg, rendered, labels)
    device = rl.trainer.device
    torch.manual_seed(rl.trainer.seed)
    module = create_model("actor", model_cfg, device=device).requires_grad_(False).eval()
    engine = build_rollout_engine(module, ro, tokenizer)
    if ro.name != "hf":  # an engine with weights of its own starts from the config: give it the model's
        engine.update_weights(module)
    try:
        responses, tokens, clipped, elapsed = _sample(cfg, engine, tokenizer, ids, log)
    finally:
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    _write([{**row, "responses": r} for row, r in zip(rows, responses, strict=True)], d.output_path)
    samples = len(rows) * d.n_samples
    return {
        "rows": float(len(rows)),
        "samples": float(samples),
        "response_tokens": float(tokens),
        "mean_response_length": tokens / samples,
        "clip_ratio": clipped / samples,
        "time_s": elapsed,
        "tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
        "prompt_length": float(ro.prompt_length),
        "response_length": float(ro.response_length),
    }


def _sample(
    cfg: Any, engine: Any, tokenizer: Any, ids: list[list[int]], log: Any
) -> tuple[list[list[str]], int, int, float]:
    """(responses per row, generated tokens, samples that hit ``response_length``, seconds)."""
    from verl.data.rl_dataset import left_pad, pad_token_id
    from verl.protocol import DataProto

    d, rl = cfg.data, cfg.rl
    ro = rl.actor_rollout_ref.rollout
    seed = ro.seed if ro.seed is not None else rl.trainer.seed
    pad, n = pad_token_id(tokenizer), d.n_samples
    responses: list[list[str]] = []
    tokens = clipped = 0
    start = time.perf_counter()
    batches = range(0, len(ids), d.batch_size)
    for k, first in enumerate(batches):
        index = list(range(first, min(first + d.batch_size, len(ids))))
        width = max(len(ids[i]) for i in index)
        padded = [left_pad(ids[i], width, pad) for i in index for _ in range(n)]
        batch = DataProto.from_dict(
            tensors={
                "input_ids": torch.stack([p[0] for p in padded]),
                "attention_mask": torch.stack([p[1] for p in padded]),
                "position_ids": torch.stack([p[2] for p in padded]),
                "sample_seeds": sample_seeds(seed, index, n),
            },
            meta_info={"pad_token_id": pad, "validate": False},
        )
        out = engine.generate_sequences(batch)
        lengths = out.batch["response_mask"].sum(-1).tolist()
        resp = out.batch["responses"].tolist()
        texts = [
            tokenizer.decode(r[: int(length)], skip_special_tokens=True)
            for r, length in zip(resp, lengths, strict=True)
        ]
        responses += [texts[j * n : (j + 1) * n] for j in range(len(index))]
        tokens += int(sum(lengths))
        # a sample that used the whole budget stopped on length (an EOS in the last slot also counts)
        clipped += sum(int(length) >= ro.response_length for length in lengths)
        log(f"[{k + 1}/{len(batches)}] {len(index)} prompts x {n} samples, {time.perf_counter() - start:.1f} s")
    return responses, tokens, clipped, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    """``verl generate [CONFIG] [key=value ...]``; returns the exit status (user errors: see `verl.cli`;
    Ctrl-C: 130, nothing written)."""
    from verl.config.cli import config_command
    from verl.config.offline import load_generation_config

    def body(config_path: str | None, overrides: list[str]) -> int:
        cfg = load_generation_config(config_path, overrides)
        figures = generate(cfg)
        print(
            f"wrote {cfg.data.output_path}: {int(figures['rows'])} rows x {cfg.data.n_samples} samples, "
            f"{figures['mean_response_length']:.1f} tokens per response on average ({figures['clip_ratio']:.1%} hit "
            f"rollout.response_length={int(figures['response_length'])}; "
            f"prompt_length={int(figures['prompt_length'])}), "
            f"{figures['tokens_per_s']:.0f} tokens/s",
            flush=True,
        )
        return 0

    return config_command(argv, USAGE, "verl generate", body)


if __name__ == "__main__":
    from verl.cli import run_reporting_user_errors

    sys.exit(run_reporting_user_errors("python -m verl.trainer.main_generation", main, sys.argv[1:]))
