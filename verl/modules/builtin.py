"""The built-in tiny models and their resolver: ``builtin://NAME`` -> a Hugging Face directory.

Two models ship with verl under ``verl/modules/assets/<name>/`` (``config.json``,
``model.safetensors``, tokenizer files, ``verl_builtin.json``); each loads offline with
``AutoModelForCausalLM`` / ``AutoTokenizer``:

* ``tiny-arithmetic`` (`BuiltinModelSpec`, the default ``actor_rollout_ref.model.path`` and the
  quick start's model): a 2-layer, hidden-64 Llama with 2 heads of size 32 (0.14 M parameters),
  warm-started on the built-in addition task by a teacher that forgets the ones-column carry
  with probability 0.7, so that greedy decoding is right on 28.1 % of the held-out problems and
  RL has a signal to amplify;
* ``tiny-calculator`` (`ToolModelSpec`, the ``calculator`` preset's): the same shape, warm-started
  on multi-turn conversations that call the calculator tool on about half of the problems.

The head size is 32 because vLLM's CPU attention refuses 16, so both rollout engines run them.
How they are made is a recipe in `verl.recipes` (a ``verl sft`` run of the spec's fields), run
only by the explicit command ``verl builtin build [NAME]``: this module never trains.

`get_builtin_model_dir` returns the shipped directory when its ``verl_builtin.json`` records the
current spec and build version, else a directory that ``verl builtin build`` wrote into the cache
``$VERL_CACHE_DIR/builtin/<name>-<hash>`` (default ``~/.cache/verl``), else raises a one-line
`ModelError` that names the command.

Tokenizers: the built-in character tokenizers of `verl.data.builtin_tokenizer`, saved next to
the weights.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Union

from verl.data.builtin_preference import sloppy_sum
from verl.data.builtin_tokenizer import CHAT_TEMPLATE, build_tokenizer, load_builtin_tokenizer
from verl.utils.errors import ModelError

__all__ = [
    "ASSETS_DIR",
    "BUILD_COMMAND",
    "BUILTIN_MODELS",
    "CHAT_TEMPLATE",
    "INFO_FILE",
    "BuiltinModelSpec",
    "ToolModelSpec",
    "build_tokenizer",
    "builtin_spec",
    "cache_dir",
    "get_builtin_model_dir",
    "is_complete",
    "load_builtin_tokenizer",
    "sloppy_sum",
]

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
INFO_FILE = "verl_builtin.json"
BUILD_COMMAND = "verl builtin build"


@dataclass(frozen=True)
class BuiltinModelSpec:
    """Architecture and warm-start recipe of ``tiny-arithmetic`` (built by `verl.recipes.tiny_arithmetic`)."""

    build_version: ClassVar[int] = 3
    # Bumped whenever the recipe changes what it produces (part of the cache hash; not a field).
    task: str = "arithmetic"
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    # Head size hidden_size / num_heads = 32: vLLM's CPU attention refuses 16 (supported: 32, 64, ...).
    intermediate_size: int = 256
    max_position_embeddings: int = 128
    init_seed: int = 0
    teacher_forget_carry: float = 0.7
    # Probability that the SFT teacher drops the ones-column carry on a carrying problem.
    sft_steps: int = 2000
    sft_batch_size: int = 128
    # Sequences per SFT step, sampled with replacement from the train split.
    sft_lr: float = 3e-3
    # Peak AdamW lr: linear warm-up over sft_warmup_steps, then cosine decay to 0.
    sft_warmup_steps: int = 20
    sft_seed: int = 0


@dataclass(frozen=True)
class ToolModelSpec:
    """Architecture and warm-start recipe of ``tiny-calculator`` (built by `verl.recipes.tiny_calculator`)."""

    build_version: ClassVar[int] = 2
    # Bumped whenever the recipe changes what it produces (part of the cache hash; not a field).
    task: str = "calculator"
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    # Head size hidden_size / num_heads = 32: vLLM's CPU attention refuses 16 (supported: 32, 64, ...).
    intermediate_size: int = 256
    max_position_embeddings: int = 160
    init_seed: int = 0
    teacher_tool_prob_even: float = 0.85
    teacher_tool_prob_odd: float = 0.15
    # Probability that the SFT teacher calls the calculator (else answers from memory) on a
    # problem whose first operand is even / odd: the student learns a habit that fails on half
    # of the problems yet still samples the tool there, which RL can amplify.
    sft_steps: int = 1500
    sft_batch_size: int = 64
    sft_lr: float = 3e-3
    sft_warmup_steps: int = 20
    sft_seed: int = 0


Spec = Union[BuiltinModelSpec, ToolModelSpec]

BUILTIN_MODELS: dict[str, Spec] = {"tiny-arithmetic": BuiltinModelSpec(), "tiny-calculator": ToolModelSpec()}
# Built-in model name -> its spec (the source of truth: an asset made from another spec is stale).


def builtin_spec(name: str) -> Spec:
    """The spec of built-in model ``name``.

    Raises:
        ValueError: for an unknown name (the message lists the valid names).
    """
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown built-in model {name!r}; valid names: {sorted(BUILTIN_MODELS)}")
    return BUILTIN_MODELS[name]


def spec_hash(spec: Spec) -> str:
    """12 hex digits of sha256 over the spec's fields and its build version (names the cache directory)."""
    payload = json.dumps({"spec": asdict(spec), "version": spec.build_version}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def cache_dir(name: str, spec: Spec | None = None) -> Path:
    """``$VERL_CACHE_DIR/builtin/<name>-<hash>`` (default ``~/.cache/verl``): where ``verl builtin build`` writes."""
    spec = spec or builtin_spec(name)
    root = Path(os.environ.get("VERL_CACHE_DIR") or Path.home() / ".cache" / "verl") / "builtin"
    return root / f"{name}-{spec_hash(spec)}"


def is_complete(path: Path, spec: Spec) -> bool:
    """Whether ``path`` holds a whole model directory made from ``spec`` at its build version."""
    info = path / INFO_FILE
    if not ((path / "config.json").is_file() and (path / "model.safetensors").is_file() and info.is_file()):
        return False
    record = json.loads(info.read_text())
    return record.get("spec") == asdict(spec) and record.get("build_version") == spec.build_version


def get_builtin_model_dir(name: str = "tiny-arithmetic") -> Path:
    """Directory of built-in model ``name``, loadable offline by ``from_pretrained``; never trains.

    Returns:
        ``verl/modules/assets/<name>`` when it was made from the current spec, else the cache
        directory `cache_dir` when ``verl builtin build`` completed it.

    Raises:
        ValueError: for an unknown name (the message lists the valid names).
        ModelError: one line naming ``verl builtin build <name>`` when neither directory is there
            and current (a changed spec or build version makes the shipped one stale).
    """
    spec = builtin_spec(name)
    shipped = ASSETS_DIR / name
    if is_complete(shipped, spec):
        return shipped
    cached = cache_dir(name, spec)
    if is_complete(cached, spec):
        return cached
    state = "stale (made from another spec)" if (shipped / INFO_FILE).is_file() else "missing"
    raise ModelError(
        f"built-in model {name!r}: the shipped {shipped} is {state} and {cached} is not built; "
        f"build it with `{BUILD_COMMAND} {name}`"
    )
