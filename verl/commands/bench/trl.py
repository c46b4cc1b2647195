"""``verl bench --compare trl``: TRL's ``GRPOTrainer`` on the same model, data, batch and lengths.

TRL is an optional extra (never in the CI set): install it into a separate environment that
reuses the locked CPU torch (``pip install -c requirements/cpu-lock.txt trl``) and run the bench
from there. The peer gets, from the verl config:

- the same model directory (or built-in model) and tokenizer, float32, on CPU;
- the same prompts (``data.train_files[0]``, chat template applied by TRL as by verl's dataset);
- ``train_batch_size`` prompts x ``rollout.n`` generations per step, one optimizer step per batch
  (``per_device_train_batch_size = generation_batch_size = prompts x n``, no gradient accumulation,
  ``num_iterations = 1``), the same learning rate, clip ratio and sampling temperature, and the
  same activation checkpointing setting;
- the same KL loss: with ``actor.use_kl_loss`` TRL's ``beta = kl_loss_coef`` (TRL's per-token KL is
  the k3 estimator, verl's ``low_var_kl`` / ``k3``; other ``kl_loss_type`` values are refused) and
  a reference model, else ``beta = 0`` (no reference model). The built-in quick start has a KL loss
  (beta 0.5); the GSM8K shape has none;
- responses of exactly ``max_response_length`` tokens when the verl rollout ignores EOS
  (``min_new_tokens = max_new_tokens``), else up to that length;
- the same rule reward (`verl.reward.scorers.default_compute_score` on the row's data source).

Steps alternate with verl's: after each TRL step a callback runs one verl step (outside the TRL
step's timer), so load changes on a shared machine hit both sides alike. A TRL step's time runs
from the end of the previous verl step to TRL's ``on_step_end`` (data loading, generation, loss,
backward, optimizer). Its token counts are TRL's own (prompt tokens + completion tokens).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any, Callable

import torch

from verl.commands.bench.measure import RssSampler, StepRecord, flop_model_of, step_flop_parts

__all__ = ["kl_beta", "run_trl"]


def _dataset(path: str) -> Any:
    from datasets import Dataset

    from verl.data.rl_dataset import read_rows

    rows, _ = read_rows(path)
    return Dataset.from_list(
        [
            {
                "prompt": r["prompt"],
                "data_source": r["data_source"],
                "ground_truth": str(r["reward_model"]["ground_truth"]),
            }
            for r in rows
        ]
    )


def _reward(completions: list[Any], data_source: list[str], ground_truth: list[str], **_: Any) -> list[float]:
    """verl's rule scorer on each completion (conversational completions: the assistant text)."""
    from verl.reward.scorers import default_compute_score

    out = []
    for completion, source, truth in zip(completions, data_source, ground_truth, strict=True):
        text = completion[0]["content"] if isinstance(completion, list) else str(completion)
        score = default_compute_score(source, text, truth)
        out.append(float(score["score"] if isinstance(score, dict) else score))
    return out


def kl_beta(actor: Any) -> float:
    """TRL's ``beta`` for verl's actor config: ``kl_loss_coef`` with a k3 KL loss, 0 without one.

    Raises:
        ValueError: ``use_kl_loss`` with a ``kl_loss_type`` other than k3 (TRL has only k3).
    """
    if not actor.use_kl_loss:
        return 0.0
    if actor.kl_loss_type not in ("low_var_kl", "k3"):
        raise ValueError(
            f"verl bench --compare trl: TRL's GRPO KL is the k3 estimator; actor.kl_loss_type="
            f"{actor.kl_loss_type!r} has no TRL equivalent (use low_var_kl, or use_kl_loss=false)"
        )
    return float(actor.kl_loss_coef)


def _grpo_config(cfg: Any, out_dir: str, steps: int) -> Any:
    from trl import GRPOConfig

    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    batch = cfg.data.train_batch_size * rollout.n
    length = cfg.data.max_response_length
    return GRPOConfig(
        output_dir=out_dir,
        max_steps=steps,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        generation_batch_size=batch,
        num_generations=rollout.n,
        num_iterations=1,
        beta=kl_beta(actor),
        max_completion_length=length,
        learning_rate=actor.optim.lr,
        weight_decay=actor.optim.weight_decay,
        lr_scheduler_type="constant",
        warmup_steps=0,
        epsilon=actor.clip_ratio,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k if rollout.top_k > 0 else 0,
        generation_kwargs={"min_new_tokens": length} if rollout.ignore_eos else None,
        max_grad_norm=actor.grad_clip,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=10**6,
        seed=cfg.trainer.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
        log_completions=False,
        # TRL turns activation checkpointing on by default; verl's runs recompute only when asked
        gradient_checkpointing=cfg.actor_rollout_ref.model.enable_gradient_checkpointing,
    )


def run_trl(cfg: Any, steps: int, after_each_step: Callable[[], None] | None = None) -> tuple[list[StepRecord], int]:
    """Run ``steps`` TRL GRPO steps on verl's config shape; call ``after_each_step`` after each.

    Args:
        cfg: the verl `RootConfig` the bench runs.
        steps: TRL optimizer steps (the first counts as warm-up in the summary).
        after_each_step: run between TRL steps (the verl step of an alternating comparison).

    Returns:
        (one `StepRecord` per TRL step, peak RSS in bytes during TRL steps).

    Raises:
        ImportError: TRL is not installed (it is an optional extra).
    """
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOTrainer

    from verl.modules import load_tokenizer
    from verl.modules.factory import resolve_model_path

    model_path = cfg.actor_rollout_ref.model.path
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(model_path), dtype=torch.float32)
    tokenizer = load_tokenizer(cfg.actor_rollout_ref.model.tokenizer_path or model_path)
    flops = flop_model_of(model_path)
    rss = RssSampler()
    records: list[StepRecord] = []
    rows = cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n
    padded = rows * (cfg.data.max_response_length + 1)
    stages = {"gen", "update_actor"} | ({"ref"} if kl_beta(cfg.actor_rollout_ref.actor) else set())  # FLOPs TRL spends

    class Alternate(TrainerCallback):
        """Times each TRL step and runs the verl step after it."""

        def __init__(self) -> None:
            self.start = 0.0
            self.tokens_seen = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            rss.start()
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            seconds = time.perf_counter() - self.start
            rss.stop()
            metrics = trainer._metrics["train"]
            tokens = float(state.num_input_tokens_seen) - self.tokens_seen
            self.tokens_seen = float(state.num_input_tokens_seen)
            generated = float(metrics["completions/mean_length"][-1]) * rows
            parts = step_flop_parts(flops, tokens, generated, padded, stages)
            records.append(
                StepRecord(
                    seconds=seconds,
                    generated_tokens=generated,
                    trained_tokens=tokens,
                    flops=float(sum(parts.values())),
                    stages={"step": seconds},
                    flop_parts=parts,
                )
            )
            print(f"  trl  step {len(records)}: {seconds:.3f} s, {records[-1].throughput:.1f} tokens/s", flush=True)
            if after_each_step is not None:
                after_each_step()
            rss.start()
            self.start = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="verl-bench-trl-") as out_dir:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=_reward,
            args=_grpo_config(cfg, out_dir, steps),
            train_dataset=_dataset(cfg.data.train_files[0]),
            processing_class=tokenizer,
            callbacks=[Alternate()],
        )
        trainer.train()
    rss.stop()
    return records, rss.peak_bytes
