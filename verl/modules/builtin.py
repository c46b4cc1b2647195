"""The built-in tiny model of the quick start: a character tokenizer and a warm-started Llama.

``builtin://tiny-arithmetic`` (the default ``actor_rollout_ref.model.path``) resolves to
`get_builtin_model_dir`: a Hugging Face directory (``config.json``, ``model.safetensors``,
tokenizer files) that loads offline with ``AutoModelForCausalLM`` / ``AutoTokenizer``.

How the shipped weights were made (``verl/modules/assets/tiny-arithmetic/``, 0.14 M parameters,
about 0.6 MB): `build_builtin_model` with the default `BuiltinModelSpec`, i.e. a 2-layer,
hidden-64 ``LlamaForCausalLM`` with 2 attention heads of size 32, initialised with seed 0 and
warm-started with the product's own SFT trainer (`verl.trainer.sft_trainer.train_sft`: the same
engine, data set and loss as ``verl sft``) on the teacher's rows of the *train* split of the
built-in ``arithmetic`` task (``builtin://arithmetic_sft/train``), with the recipe of the spec
(steps, batch, AdamW lr / betas, warm-up then cosine, clip 1.0). The head size is 32 because
vLLM's CPU attention refuses head size 16 (the earlier 4-head shape), so both rollout engines
(``hf``, ``vllm``) run the quick start's model.

The SFT teacher is deliberately sloppy: on a problem whose ones column carries it forgets the
carry with probability ``teacher_forget_carry`` = 0.7 (47+38 -> "75" instead of "85"). The warm
start therefore answers most carrying problems wrongly when decoding greedily but still samples
the right answer often enough for RL with the exact-answer reward to amplify. Measured (recorded
in ``verl_builtin.json`` next to the weights): final SFT loss 0.129, held-out greedy accuracy
28.1 % (144 / 512); the quick start (lr 5e-5, 32 prompts x 8 samples per step, KL loss to
this warm start with beta 0.5) climbs to 83.4 % held out by GRPO step 10 and ends its 50 steps at
87.7 % (+59.6 points) on a CPU.

The build is deterministic (seeded, one intra-op thread, since the thread count changes float
reduction order): two builds with the same torch on the same CPU kind give the same bytes, which
is why the info file records ``torch`` and ``cpu_capability``. A directory that is missing, or
made from another spec, is rebuilt on first use into ``$VERL_CACHE_DIR`` (or ``~/.cache/verl``)
``/builtin/<name>-<hash>``, written to a temporary directory and renamed atomically.

Tokenizer: the built-in character tokenizer of `verl.data.builtin_tokenizer`, saved next to
the weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from verl.data.builtin_preference import sloppy_sum
from verl.data.builtin_tokenizer import CHAT_TEMPLATE, build_tokenizer, load_builtin_tokenizer

__all__ = [
    "BUILTIN_MODELS",
    "CHAT_TEMPLATE",
    "BuiltinModelSpec",
    "build_builtin_model",
    "build_tokenizer",
    "get_builtin_model_dir",
    "load_builtin_tokenizer",
    "sloppy_sum",
]

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
_BUILD_VERSION = 3
# Bumped whenever build_builtin_model changes what it produces (part of the cache hash).
_INFO_FILE = "verl_builtin.json"


@dataclass(frozen=True)
class BuiltinModelSpec:
    """Architecture and warm-start recipe of one built-in model (see the module docstring)."""

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


BUILTIN_MODELS: dict[str, BuiltinModelSpec] = {"tiny-arithmetic": BuiltinModelSpec()}
# Built-in model name -> its spec.


def _check_name(name: str) -> BuiltinModelSpec:
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown built-in model {name!r}; valid names: {sorted(BUILTIN_MODELS)}")
    return BUILTIN_MODELS[name]


def _teacher_rows(spec: BuiltinModelSpec) -> list[dict[str, str]]:
    """``{prompt, response}`` for every train row; the teacher forgets carries (see the module docstring)."""
    from verl.data.builtin_preference import teacher_sft_rows

    return teacher_sft_rows(spec.teacher_forget_carry, spec.sft_seed)


def _init_model(spec: BuiltinModelSpec, tok: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads, max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(spec.init_seed)
    return LlamaForCausalLM(config)


_PROMPT_RESPONSE_KEYS = ("data.prompt_key=prompt", "data.response_key=response")
# How ``verl sft`` reads the teacher's rows: {prompt, response} (multi-turn models pass their own).


def _sft_overrides(spec: Any, init_dir: Path, data: Path, work: Path, data_keys: Sequence[str] = _PROMPT_RESPONSE_KEYS) -> list[str]:
    """A built-in spec's SFT recipe in ``verl sft`` keys (`BuiltinModelSpec` field names)."""
    return [
        f"model.partial_pretrain={init_dir}", f"data.train_files=[{data}]", *data_keys,
        f"data.train_batch_size={spec.sft_batch_size}",
        f"data.micro_batch_size_per_gpu={spec.sft_batch_size}", f"data.max_length={spec.max_position_embeddings}",
        f"trainer.total_training_steps={spec.sft_steps}", f"optim.lr={spec.sft_lr}", "optim.betas=[0.9,0.99]",
        "optim.weight_decay=0.0", f"optim.lr_warmup_steps={spec.sft_warmup_steps}", "optim.lr_scheduler=cosine",
        "optim.clip_grad=1.0", f"trainer.seed={spec.sft_seed}", "trainer.logger=[]", "trainer.resume_mode=disable",
        f"trainer.default_local_dir={work / 'ckpt'}", f"trainer.output_dir={work / 'out'}",
    ]


def _sft(spec: Any, tok: Any, work: Path, rows: Sequence[dict[str, Any]] | None = None,
         data_keys: Sequence[str] = _PROMPT_RESPONSE_KEYS) -> tuple[Any, float]:
    """Init, then warm-start with the product's SFT trainer; returns (model, last step's SFT loss).

    Args:
        spec: `BuiltinModelSpec` (or a spec with the same architecture and ``sft_*`` fields).
        tok: the model's tokenizer (saved next to the initial weights).
        work: scratch directory (initial model, teacher rows, SFT checkpoints).
        rows: the teacher's SFT rows; default `_teacher_rows` of ``spec`` ({prompt, response}).
        data_keys: ``data.*`` overrides saying how ``verl sft`` reads ``rows``.
    """
    from transformers import AutoModelForCausalLM

    # The trainer sits above modules; importing it here (only when a model is rebuilt) keeps
    # `import verl.modules` free of it while the built-in model is made by the real SFT path.
    from verl.trainer.sft_trainer import train_sft

    init_dir, data = work / "init", work / "teacher.jsonl"
    _init_model(spec, tok).save_pretrained(init_dir)
    tok.save_pretrained(init_dir)
    data.write_text("".join(json.dumps(r) + "\n" for r in (_teacher_rows(spec) if rows is None else rows)))
    trainer, history = train_sft(_sft_overrides(spec, init_dir, data, work, data_keys))
    model = AutoModelForCausalLM.from_pretrained(work / "ckpt" / f"global_step_{trainer.global_step}")
    return model.eval(), float(history[-1]["train/loss"])


def _greedy_accuracy(model: Any, tok: Any, split: str = "test") -> float:
    """Held-out greedy exact-answer accuracy on the built-in task (recorded in the info file)."""
    import torch

    from verl.data.builtin_task import arithmetic_problems
    from verl.reward.scorers.arithmetic import compute_score

    problems = arithmetic_problems(split)
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"{a}+{b}"}], add_generation_prompt=True, tokenize=False) for a, b in problems]
    tok.padding_side = "left"
    batch = tok(prompts, add_special_tokens=False, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    texts = tok.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(compute_score(t, str(a + b)) for t, (a, b) in zip(texts, problems)) / len(problems)


def build_builtin_model(out_dir: str | Path, spec: BuiltinModelSpec | None = None) -> Path:
    """Build a built-in model directory: init, warm start, save (model, tokenizer, info).

    The warm start is a ``verl sft`` run (`verl.trainer.sft_trainer.train_sft`) of the spec's
    recipe on the teacher's rows. Deterministic: seeded, and run with one intra-op thread (the
    thread count changes float reduction order).

    Args:
        out_dir: Directory to write (created; existing files are overwritten).
        spec: Recipe; defaults to ``BUILTIN_MODELS["tiny-arithmetic"]``.

    Returns:
        ``out_dir`` as a Path. It holds ``config.json``, ``model.safetensors``, the tokenizer
        files and ``verl_builtin.json`` (spec, final SFT loss, held-out greedy accuracy, and the
        torch version and CPU capability that made it).
    """
    import torch

    spec = spec or BUILTIN_MODELS["tiny-arithmetic"]
    out = Path(out_dir)
    tok = build_tokenizer()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(prefix="verl-builtin-sft-") as work:
            model, last_loss = _sft(spec, tok, Path(work))
        accuracy = _greedy_accuracy(model, tok)
    finally:
        torch.set_num_threads(threads)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    info = {"spec": asdict(spec), "build_version": _BUILD_VERSION, "final_sft_loss": round(last_loss, 4),
            "sft_path": "verl.trainer.sft_trainer", "test_greedy_accuracy": accuracy,
            # Same torch and CPU kind -> same bytes (the slow rebuild test relies on it).
            "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    (out / _INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return out


def _spec_hash(spec: BuiltinModelSpec) -> str:
    payload = json.dumps({"spec": asdict(spec), "version": _BUILD_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _is_complete(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "model.safetensors").is_file() and (path / _INFO_FILE).is_file()


def get_builtin_model_dir(name: str = "tiny-arithmetic") -> Path:
    """Directory of built-in model ``name``, loadable offline by ``from_pretrained``.

    The shipped ``verl/modules/assets/<name>/`` when it is complete; otherwise the cache
    ``$VERL_CACHE_DIR/builtin/<name>-<hash>`` (default ``~/.cache/verl``), built on first use by
    `build_builtin_model` into a temporary directory that is then renamed, so concurrent or
    interrupted builds never leave a half-written model behind.

    Raises:
        ValueError: For an unknown name (the message lists the valid names).
    """
    spec = _check_name(name)
    shipped = ASSETS_DIR / name
    # A shipped directory made from another spec is stale: the spec is the source of truth.
    if _is_complete(shipped) and json.loads((shipped / _INFO_FILE).read_text())["spec"] == asdict(spec):
        return shipped
    cache_root = Path(os.environ.get("VERL_CACHE_DIR") or Path.home() / ".cache" / "verl") / "builtin"
    target = cache_root / f"{name}-{_spec_hash(spec)}"
    if _is_complete(target):
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_root))
    try:
        build_builtin_model(tmp, spec)
        try:
            tmp.rename(target)
        except OSError:
            # Another process finished first: its complete directory wins.
            if not _is_complete(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
