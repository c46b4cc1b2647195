"""Pre-flight checks: everything about a run that can be known before a model is loaded.

`run_preflight(cfg, tokenizer)` is called by `verl.trainer.ppo.builders.build_parts` after the
tokenizer is loaded and before the data loaders, reward managers and worker groups are built;
`verl doctor CONFIG` prints the same checks. Each check reads only small files (the model's
``config.json`` and weight-file headers, the data files' ``data_source`` column, the reward
file) and raises a one-line `verl.utils.errors.UserError` naming the key / file at fault:

==================  ===============================================================================
paths               ``trainer.output_dir`` and ``trainer.default_local_dir`` are (or can be created
                    as) writable directories; with ``save_freq > 0`` the checkpoint disk has room for
                    one checkpoint (`estimate_checkpoint_bytes`), counting the unfinished ``.tmp_*``
                    saves of that folder as free (`prepare_run` removes them)
checkpoint folder   ``default_local_dir`` holds no other run's checkpoints (`verl.run.run_identity`)
data                every data file is readable (UTF-8, valid rows: file and line named) and, with
                    the built-in scorers, every ``data_source`` in it has one
reward function     ``custom_reward_function.name`` exists in ``.path`` and its signature binds the
                    keywords the reward manager passes (``data_source, solution_str, ground_truth,
                    extra_info``; the plural forms for the ``batch`` manager)
multi-turn configs  the tool / interaction config files load, and every row's
                    ``extra_info.interaction_kwargs.name`` is configured (`verl.run.preflight_multiturn`)
model               ``config.json`` readable, weight files are weights (safetensors header / torch
                    zip archive), tokenizer vocabulary ≤ embedding rows, prompt + response ≤ the
                    model's context (``max_position_embeddings`` / ``n_positions``)
pad token           the tokenizer pads with its own pad token, or the eos token (logged once)
half precision      on a CPU run, each bf16 / fp16 setting's matmul speed vs float32 here; a warning
                    (never a failure) when it is emulated (`verl.utils.cpu_half`)
==================  ===============================================================================
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from verl.run.model_access import load_run_tokenizer, read_model_config, tokenizer_path
from verl.utils.cpu_half import check_half_precision
from verl.utils.errors import DataError, DiskError, ModelError, PreflightError, RewardFunctionError, UserError

logger = logging.getLogger(__name__)

SINGLE_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")
BATCH_KEYWORDS = ("data_sources", "solution_strs", "ground_truths", "extra_infos")
# Bytes per parameter in one checkpoint of a trained role: fp32 weights (4) + Adam's two fp32
# moments (8), as written by `verl.workers.sharding.save_worker_state`.
CKPT_BYTES_PER_PARAM = 12


@dataclass
class Check:
    """One pre-flight check's outcome: ``ok`` True (passed), False (failed) or None (skipped)."""

    name: str
    ok: bool | None
    detail: str


def run_preflight(cfg: Any, tokenizer: Any = None, raise_on_failure: bool = True) -> list[Check]:
    """Run every check (module docstring) on the root config ``cfg``.

    Args:
        cfg: the validated root config.
        tokenizer: the run's tokenizer (loaded here from the model path when None).
        raise_on_failure: raise the first failure (training); False collects them (doctor).

    Returns:
        One `Check` per check, in the table's order.

    Raises:
        UserError: the first failing check's error (a `DiskError`, `DataError`, ...).
    """
    checks: list[tuple[str, Callable[[], str | None]]] = [
        ("paths", lambda: check_paths(cfg)),
        ("checkpoint folder", lambda: _check_owner(cfg)),
        ("data", lambda: check_data(cfg)),
        ("reward function", lambda: check_reward_function(cfg)),
        ("multi-turn configs", lambda: _check_multi_turn(cfg)),
        ("model", lambda: check_model(cfg, tokenizer)),
        ("pad token", lambda: check_pad_token(cfg, tokenizer)),
        ("half precision", lambda: check_half_precision(cfg)),
    ]
    out = []
    for name, fn in checks:
        try:
            detail = fn()
        except UserError as e:
            if raise_on_failure:
                raise
            out.append(Check(name, False, str(e)))
            continue
        out.append(Check(name, None if detail is None else True, detail or "skipped"))
    return out


def _check_multi_turn(cfg: Any) -> str | None:
    from verl.run.preflight_multiturn import check_multi_turn

    return check_multi_turn(cfg)


def _check_owner(cfg: Any) -> str:
    from verl.run.run_identity import check_owner

    return check_owner(cfg)


# ------------------------------------------------------------------------------------ paths
def _writable_dir(path: Path, key: str) -> Path:
    """The existing directory ``path`` will live in; raises if it cannot be a writable directory."""
    if path.exists() and not path.is_dir():
        raise DiskError(f"{key}: {path} exists and is not a directory")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise DiskError(f"{key}: cannot create {path}: {probe} is a file")
    try:  # a real write: os.access says yes to root even on read-only mounts
        fd, name = tempfile.mkstemp(prefix=".verl_write_probe", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise DiskError(f"{key}: {probe} is not writable (needed for {path}): {e.strerror}") from None
    return probe


def check_paths(cfg: Any) -> str:
    """Output and checkpoint paths are writable directories with room for one checkpoint."""
    tc = cfg.trainer
    _writable_dir(Path(tc.output_dir), "trainer.output_dir")
    ckpt_base = _writable_dir(Path(tc.default_local_dir), "trainer.default_local_dir")
    if tc.save_freq <= 0:
        return f"{tc.output_dir} and {tc.default_local_dir} writable; checkpoints off (trainer.save_freq <= 0)"
    need = estimate_checkpoint_bytes(cfg)
    if need is None:
        return f"{tc.output_dir} and {tc.default_local_dir} writable (checkpoint size unknown)"
    from verl.run.checkpoint import CheckpointManager, tree_bytes

    free = shutil.disk_usage(ckpt_base).free
    # unfinished .tmp_* saves of this folder are removed at start (`prepare_run`): their space counts as free
    stale = CheckpointManager(tc.default_local_dir).temporaries()
    reclaim = sum(tree_bytes(p) for p in stale)
    also = f" (+ {_size(reclaim)} in {len(stale)} unfinished .tmp_* save(s), removed at start)" if stale else ""
    if free + reclaim < need:
        # sizes with their own unit: a small model's checkpoint is well under 0.01 GiB
        raise DiskError(
            f"trainer.default_local_dir: {ckpt_base} has {_size(free)} free{also}, one checkpoint "
            f"needs about {_size(need)}"
        )
    return f"writable; one checkpoint ≈ {_size(need)}, {_size(free)} free{also}"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def count_parameters(model_path: str, trust_remote_code: bool = False) -> int | None:
    """Exact parameter count of the model at ``model_path`` from its ``config.json``, without
    reading weights (the model is built on the ``meta`` device); None when that fails."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - an estimate only; the model check reports real problems
        return None
    return sum(p.numel() for p in model.parameters())


def estimate_checkpoint_bytes(cfg: Any) -> int | None:
    """Bytes of one ``global_step_N``: `CKPT_BYTES_PER_PARAM` per parameter of each trained role
    (actor, + critic when enabled), + 4 per actor parameter with ``trainer.save_hf``."""
    from verl.modules.factory import resolve_model_path

    mc = cfg.actor_rollout_ref.model
    actor = count_parameters(resolve_model_path(mc.path), mc.trust_remote_code)
    if actor is None:
        return None
    total = actor * CKPT_BYTES_PER_PARAM + (actor * 4 if cfg.trainer.save_hf else 0)
    if cfg.critic.enable:
        cm = cfg.critic.model
        critic = count_parameters(
            resolve_model_path(cm.path or mc.path), getattr(cm, "trust_remote_code", mc.trust_remote_code)
        )
        total += (critic or actor) * CKPT_BYTES_PER_PARAM
    return total


# ------------------------------------------------------------------------------------- data
def _files(value: Any) -> list[str]:
    if not value:
        return []
    return [str(value)] if isinstance(value, str) else [str(v) for v in value]


def data_sources_of(path: str, key: str) -> set[str]:
    """The distinct ``key`` values (``data.reward_fn_key``) of one data file.

    Raises:
        DataError: unreadable file (naming file and line), or rows without ``key``.
    """
    from verl.data.rl_dataset import read_rows

    if path.endswith(".parquet") and Path(path).is_file():
        import pyarrow.parquet as pq

        try:
            column = pq.read_table(path, columns=[key]).column(key).to_pylist()
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise DataError(f"{path}: cannot read column {key!r} ({type(e).__name__}: {e})") from None
        return {str(v) for v in column}
    try:
        rows, labels = read_rows(path)
    except FileNotFoundError as e:
        raise DataError(str(e)) from None
    for row, label in zip(rows, labels):
        if not isinstance(row, dict) or key not in row:
            raise DataError(f"{path}: {label}: no {key!r} field (data.reward_fn_key)")
    return {str(row[key]) for row in rows}


def check_data(cfg: Any) -> str:
    """Data files are readable and, with built-in scorers, every data_source has one."""
    from verl.reward.scorers import SCORERS

    key = cfg.data.reward_fn_key
    sources: dict[str, str] = {}
    for files_key in ("train_files", "val_files"):
        for path in _files(getattr(cfg.data, files_key)):
            try:
                found = data_sources_of(path, key)
            except DataError as e:  # which key holds the bad file (a missing one, a bad row)
                raise DataError(f"data.{files_key}: {e}") from None
            for source in sorted(found):
                sources.setdefault(source, path)
    if cfg.custom_reward_function.path or cfg.reward_model.enable:
        return (
            f"{len(sources)} data source(s); "
            f"scored by {'the reward model' if cfg.reward_model.enable else 'the custom function'}"
        )
    valid = sorted(SCORERS.names())
    unknown = {s: p for s, p in sources.items() if s not in valid}
    if unknown:
        from verl.config.errors import did_you_mean

        first = next(iter(unknown))
        raise PreflightError(
            f"data_source {first!r} (in {unknown[first]}) has no scorer{did_you_mean(first, valid)}"
            f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}; built-in scorers: {valid}; "
            f"set custom_reward_function.path to score other sources"
        )
    return f"{len(sources)} data source(s), all with a scorer: {sorted(sources)}"


# ---------------------------------------------------------------------------- reward function
def check_reward_function(cfg: Any) -> str | None:
    """The custom reward function exists and binds the keywords its manager passes.

    Raises:
        RewardFunctionError: missing file / name, or a signature that cannot take the keywords.
    """
    from verl.reward import load_custom_reward_fn

    rc = cfg.custom_reward_function
    if not rc.path:
        return None
    fn = load_custom_reward_fn(rc.path, rc.name, rc.reward_kwargs or None)
    batched = cfg.reward_model.reward_manager == "batch"
    names = BATCH_KEYWORDS if batched else SINGLE_KEYWORDS
    try:
        inspect.signature(fn).bind(**{k: None for k in names})
    except TypeError as e:
        raise RewardFunctionError(
            f"custom_reward_function: {rc.name}{_signature(fn)} in {rc.path} cannot be called as "
            f"{rc.name}({', '.join(f'{k}=...' for k in names)}) by the {cfg.reward_model.reward_manager!r} "
            f"reward manager ({e})"
        ) from None
    except ValueError:  # builtins without a signature: cannot be checked
        return f"{rc.name} in {rc.path} (signature not inspectable)"
    return f"{rc.name}{_signature(fn)} in {rc.path}"


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


# ------------------------------------------------------------------------------------ model
def check_weight_files(model_dir: Path) -> int:
    """Every weight file of ``model_dir`` is weights; returns how many there are.

    A ``.safetensors`` file must have a valid header (8-byte length + JSON); a ``.bin`` / ``.pt``
    file must be a torch zip archive whose pickle the weights-only loader accepts (plain tensors:
    one that references code is refused, never run). Neither reads the tensors.

    Raises:
        ModelError: naming the file that is not weights.
    """
    files = sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("*.bin"))
    for f in files:
        problem = _weights_problem(f)
        if problem:
            raise ModelError(f"{f} is not a loadable weights file ({problem})")
    return len(files)


def _weights_problem(path: Path) -> str | None:
    if path.suffix == ".safetensors":
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return "shorter than a safetensors header"
            n = int.from_bytes(head, "little")
            if n <= 0 or n + 8 > size:
                return f"safetensors header length {n} does not fit in {size} bytes"
            try:
                json.loads(f.read(n))
            except ValueError:
                return "safetensors header is not JSON"
        return None
    if not zipfile.is_zipfile(path):
        return "not a torch zip archive (legacy pickles are refused: loading them runs code)"
    import torch

    from verl.utils.safe_load import SAFE_FORMATS, refusal_reason

    try:  # weights-only and memory-mapped: the pickle is checked, the tensors are not read
        torch.load(path, weights_only=True, mmap=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any failure means the file is not loadable weights
        return f"{refusal_reason(e)}; it was not run; weights must be {SAFE_FORMATS}"
    return None


def model_context(config: Any) -> int | None:
    """The model's context length in tokens (``max_position_embeddings`` / ``n_positions`` / ...)."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_model(cfg: Any, tokenizer: Any = None) -> str:
    """config.json readable, weights are weights, vocabulary fits the embedding, context fits, heads
    divisible by the actor's ``ulysses_sequence_parallel_size`` (after ``/ tensor_parallel_size`` under TP).

    Raises:
        ModelError: naming the two numbers that disagree and the keys to change.
        ConfigError: attention or KV heads (``/ tp``) not divisible by the SP size (the numbers).
    """
    from verl.modules.factory import resolve_model_path

    mc = cfg.actor_rollout_ref.model
    path = resolve_model_path(mc.path)
    config = read_model_config("actor_rollout_ref.model.path", mc.path, mc.trust_remote_code)
    sp = cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size
    if sp > 1:  # before any worker starts: attention and KV heads (/ tp under TP) are split over the SP group
        from verl.modules.ulysses import check_heads

        check_heads(
            config,
            sp,
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
            cfg.actor_rollout_ref.actor.fsdp_config.tensor_parallel_size,
        )
    n_weights = check_weight_files(Path(path)) if Path(path).is_dir() else 0
    tokenizer = tokenizer or load_run_tokenizer(cfg)
    rows = getattr(config, "vocab_size", None)
    vocab = len(tokenizer)
    if isinstance(rows, int) and vocab > rows:
        raise ModelError(
            f"tokenizer vocabulary ({vocab} tokens, {tokenizer_path(cfg)}) is larger than the model's "
            f"embedding ({rows} rows, vocab_size in {path}/config.json): token ids >= {rows} would "
            f"index past the embedding; use the model's own tokenizer"
        )
    rollout = cfg.actor_rollout_ref.rollout
    prompt = rollout.prompt_length or cfg.data.max_prompt_length
    response = rollout.response_length or cfg.data.max_response_length
    need = rollout.max_model_len or prompt + response
    context = model_context(config)
    if context is not None and need > context:
        raise ModelError(
            f"prompt + response = {prompt} + {response} = {need} tokens exceeds the model's context of "
            f"{context} (config.json of {mc.path}); lower data.max_prompt_length / "
            f"data.max_response_length"
        )
    return (
        f"{config.model_type}: {n_weights} weight file(s) ok, vocabulary {vocab} ≤ {rows} embedding rows, "
        f"prompt + response {need} ≤ context {context}"
    )


_PAD_LOGGED: set[str] = set()


def check_pad_token(cfg: Any, tokenizer: Any = None) -> str:
    """Say which token pads prompts (`verl.data.tokenizer` warns when it substitutes eos);
    logged at INFO once per tokenizer path and process, and shown by ``verl doctor``."""
    tokenizer = tokenizer or load_run_tokenizer(cfg)
    pad, eos = tokenizer.pad_token, tokenizer.eos_token
    if pad is not None and pad == eos:
        line = (
            f"tokenizer {tokenizer_path(cfg)} pads with its eos token {eos!r} (id {tokenizer.pad_token_id}); "
            f"safe: masks come from positions, never from token values"
        )
    else:
        line = f"pad token {pad!r} (id {tokenizer.pad_token_id})"
    if tokenizer_path(cfg) not in _PAD_LOGGED:
        _PAD_LOGGED.add(tokenizer_path(cfg))
        logger.info("%s", line)  # the tokenizer loader already warns when it had to choose
    return line


def prepare_run(cfg: Any, tokenizer: Any = None) -> list[Check]:
    """`run_preflight` (raising), then claim ``trainer.default_local_dir`` for this run and remove
    its unfinished ``.tmp_*`` saves (left by a crash or a full disk).

    Called by `verl.trainer.ppo.builders.build_parts` before any data loader or model is built.
    """
    from verl.run.run_identity import claim_owner

    from verl.run.checkpoint import CheckpointManager

    checks = run_preflight(cfg, tokenizer, raise_on_failure=True)
    claim_owner(cfg)
    CheckpointManager(cfg.trainer.default_local_dir).remove_temporaries()  # the folder is this run's now
    return checks
