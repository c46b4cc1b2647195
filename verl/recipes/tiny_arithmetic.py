"""Recipe of ``tiny-arithmetic``, the quick start's built-in model (`verl.modules.builtin.BuiltinModelSpec`).

`build_builtin_model` initialises the spec's 2-layer, hidden-64 ``LlamaForCausalLM`` (2 heads
of size 32, seed 0) and warm-starts it with the product's own SFT trainer
(`verl.commands.sft.train_sft`: the same engine, data set and loss as ``verl sft``) on
the teacher's rows of the *train* split of the built-in ``arithmetic`` task
(``builtin://arithmetic_sft/train``), with the recipe of the spec (steps, batch, AdamW lr /
betas, warm-up then cosine, clip 1.0).

The SFT teacher is deliberately sloppy: on a problem whose ones column carries it forgets the
carry with probability ``teacher_forget_carry`` = 0.7 (47+38 -> "75" instead of "85"). The warm
start therefore answers most carrying problems wrongly when decoding greedily but still samples
the right answer often enough for RL with the exact-answer reward to amplify. The shipped
asset's ``verl_builtin.json`` records the final SFT loss (0.129) and the held-out greedy
accuracy (28.1 %, 144 / 512).

The build is deterministic (seeded, one intra-op thread, since the thread count changes float
reduction order): two builds with the same torch on the same CPU kind give the same bytes, which
is why the info file records ``torch`` and ``cpu_capability``.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from verl.data.builtin_tokenizer import build_tokenizer
from verl.modules.builtin import BUILTIN_MODELS, INFO_FILE, BuiltinModelSpec
from verl.recipes.warm_start import warm_start

__all__ = ["build_builtin_model", "greedy_accuracy", "teacher_rows"]


def teacher_rows(spec: BuiltinModelSpec) -> list[dict[str, str]]:
    """``{prompt, response}`` for every train row; the teacher forgets carries (see the module docstring)."""
    from verl.data.builtin_preference import teacher_sft_rows

    return teacher_sft_rows(spec.teacher_forget_carry, spec.sft_seed)


def greedy_accuracy(model: Any, tok: Any, split: str = "test") -> float:
    """Held-out greedy exact-answer accuracy on the built-in task (recorded in the info file)."""
    import torch

    from verl.data.builtin_task import arithmetic_problems
    from verl.reward.scorers.arithmetic import compute_score

    problems = arithmetic_problems(split)
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": f"{a}+{b}"}], add_generation_prompt=True, tokenize=False)
        for a, b in problems
    ]
    tok.padding_side = "left"
    batch = tok(prompts, add_special_tokens=False, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **batch, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
        )
    texts = tok.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(compute_score(t, str(a + b)) for t, (a, b) in zip(texts, problems)) / len(problems)


def build_builtin_model(out_dir: str | Path, spec: BuiltinModelSpec | None = None) -> Path:
    """Build a ``tiny-arithmetic`` directory: init, warm start, save (model, tokenizer, info).

    The warm start is a ``verl sft`` run (`verl.commands.sft.train_sft`) of the spec's
    recipe on the teacher's rows. Deterministic: seeded, and run with one intra-op thread (the
    thread count changes float reduction order).

    Args:
        out_dir: Directory to write (created; existing files are overwritten).
        spec: Recipe; defaults to ``BUILTIN_MODELS["tiny-arithmetic"]``.

    Returns:
        ``out_dir`` as a Path. It holds ``config.json``, ``model.safetensors``, the tokenizer
        files and ``verl_builtin.json`` (spec, build version, final SFT loss, held-out greedy
        accuracy, and the torch version and CPU capability that made it).
    """
    import torch

    spec = spec or BUILTIN_MODELS["tiny-arithmetic"]
    out = Path(out_dir)
    tok = build_tokenizer()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(prefix="verl-builtin-sft-") as work:
            model, last_loss = warm_start(spec, tok, Path(work), teacher_rows(spec))
        accuracy = greedy_accuracy(model, tok)
    finally:
        torch.set_num_threads(threads)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    info = {
        "spec": asdict(spec),
        "build_version": spec.build_version,
        "final_sft_loss": round(last_loss, 4),
        "sft_path": "verl.trainer.sft_trainer",
        "test_greedy_accuracy": accuracy,
        # Same torch and CPU kind -> same bytes (the slow rebuild test relies on it).
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return out
