"""SFT step time and peak memory: ``verl sft`` vs TRL's ``SFTTrainer`` on the same rows, alternated.

Both sides train the same random Qwen2 model (``--size``, default ``small``: 42M parameters, the
Qwen2.5 151,936-token vocabulary) on the same GSM8K rows in the same order: verl's SFT dataset
tokenizes question -> worked solution (chat template, loss on the answer) and TRL gets those very
``input_ids`` and ``completion_mask`` as a pre-tokenized dataset (``completion_only_loss``,
sequential sampler), so every step sees identical sequences on both sides and the step-1 losses
must agree. ``--batch`` sequences per step in one micro-batch, float32, AdamW at a constant
learning rate, TRL's defaults otherwise (its fused LM head, entropy and token-accuracy metrics).
Each arm runs in its own process (peak RSS is per process); arms alternate round by round; the
step time is the median of the steps after the first.

Needs TRL (not in the project's pins): run it in a venv with ``trl`` and this repository installed.

    python benchmarks/bench_sft_trl.py --shared ../shared [--steps 6] [--rounds 2] [--size small] [--batch 8]
"""

from __future__ import annotations

import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

ARMS = ("verl", "verl-packed", "trl")


def _verl_config(model: str, data: str, steps: int, batch: int, work: str, packed: bool):
    from verl.config.sft_loader import load_sft_config

    return load_sft_config(
        None,
        [
            f"model.partial_pretrain={model}",
            f"data.train_files={data}",
            "data.max_length=512",
            "data.truncation=right",
            f"data.train_batch_size={batch}",
            f"data.micro_batch_size_per_gpu={batch}",
            f"trainer.total_training_steps={steps}",
            "optim.lr=1e-4",
            "optim.lr_scheduler=constant",
            "optim.warmup_steps_ratio=0",
            "optim.weight_decay=0",
            f"use_remove_padding={str(packed).lower()}",
            "trainer.logger=[]",
            f"trainer.default_local_dir={work}/ckpt",
            f"trainer.output_dir={work}/out",
        ],
    )


def _rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_verl(model: str, data: str, steps: int, batch: int, work: str, packed: bool) -> dict:
    from verl.trainer.supervised.builders import build_supervised_trainer

    trainer = build_supervised_trainer(_verl_config(model, data, steps, batch, work, packed))
    before = _rss()
    times, losses = [], []
    for step in range(1, steps + 1):
        m = trainer.train_step(step)
        times.append(m["timing_s/step"])
        losses.append(m["train/loss"])
    return {"times": times, "losses": losses, "rss_before_MiB": before, "peak_rss_MiB": _rss()}


def run_trl(model: str, data: str, steps: int, batch: int, work: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from verl.trainer.supervised.builders import build_supervised_trainer

    # the rows verl's trainer reads at steps 1..N, in order, tokenized by verl's SFT dataset
    stream = build_supervised_trainer(_verl_config(model, data, steps, batch, work, False)).streams[0]
    rows = []
    for step in range(1, steps + 1):
        for i in stream.sampler.indices(step, 0, 1):
            item = stream.dataset[i]
            n = int(item["attention_mask"].sum())
            rows.append(
                {"input_ids": item["input_ids"][:n].tolist(), "completion_mask": item["loss_mask"][:n].tolist()}
            )
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model)
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    args = SFTConfig(
        output_dir=f"{work}/trl",
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        max_steps=steps,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_length=512,
        completion_only_loss=True,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        fp16=False,
        dataloader_num_workers=0,
        train_sampling_strategy="sequential",
        max_grad_norm=1.0,
        seed=0,
    )
    times, losses = [], []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t)

        def on_log(self, _args, _state, _control, logs=None, **k):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    trainer = SFTTrainer(
        model=net, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok, callbacks=[Timer()]
    )
    before = _rss()
    trainer.train()
    return {"times": times, "losses": losses, "rss_before_MiB": before, "peak_rss_MiB": _rss()}


def main() -> None:
    from bench_sft_packing import parse_args, run_rounds, summarize  # this folder is on sys.path

    args = parse_args(__doc__, ARMS)
    if args.arm:  # one arm in this process
        data = str(Path(args.shared) / "data" / "gsm8k" / "train.jsonl")
        with tempfile.TemporaryDirectory() as work:
            res = (
                run_trl(args.model, data, args.steps, args.batch, work)
                if args.arm == "trl"
                else run_verl(args.model, data, args.steps, args.batch, work, args.arm == "verl-packed")
            )
        print(json.dumps({"arm": args.arm, "step_s": statistics.median(res["times"][1:]), **res}))
        return
    summary = summarize(run_rounds(__file__, ARMS, args), args)
    trl = summary["trl"]["step_s"]
    print(
        f"speed vs TRL: verl {trl / summary['verl']['step_s']:.2f}x, "
        f"verl packed {trl / summary['verl-packed']['step_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
