"""``verl plan``: pre-flight memory plan of an RL config on one device, before any weight is loaded.

Usage::

    verl plan [CONFIG] [key=value ...] [--device cpu | gpu:80GiB] [--json]

For each role and stage it estimates the bytes one device holds (model shapes are read from the
model's config on the meta device; nothing is loaded):

- **static**: parameters (``model.dtype``), AdamW's two float32 moments (after the first step),
  the reference copy (``use_kl_loss`` / ``use_kl_in_reward`` without LoRA; at
  ``ref.fsdp_config.tensor_parallel_size`` > 1 split like the actor's parameters), the rollout's unsharded
  copy when FSDP shards the actor (world size > 1), the critic's parameters and moments; sharded
  parts divided by the world size;
- **rollout**: the KV cache ``2 · layers · kv_heads · head_dim · (P + R)`` per sequence, and the
  decode step's `(B, V)` float32 logits plus about six sampling temporaries of that size, for
  ``min(batch, rollout.max_num_seqs)`` sequences;
- **log-prob forward** (old / reference, no grad): the scored logits `(K, V)` plus the chunked
  log-softmax's ``2 · chunk · V`` float32 block (``chunk = min(logprob_chunk_size, K)`` rows, here
  and in the update); with the fused LM head (`fused_head_applies`:
  world size 1, no LoRA) only one ``chunk · V`` block (the chunk's logits);
- **training** (actor, critic): gradients (parameter-sized, alive from backward to the step),
  activations saved for backward per token and layer (Llama/Qwen2 decoder in float32:
  ``6·H + 2·kv_dim + 4·I`` values: norm inputs and outputs, q, k, v, attention output, the MLP's
  gate, up, activation and product), the scored logits and their gradient `(K, V)` each; with
  the fused LM head one `(K, V)` buffer (the gradient overwrites the logits), none with
  ``actor.logprob_head_recompute``, and no `(chunk, V)` block (one with the recompute);
- **runtime**: the interpreter with torch, transformers and verl imported, **measured** in this
  process on CPU (its RSS right before planning), or a fixed 0.5 GiB CUDA context on a GPU.

With ``actor_rollout_ref.hybrid_engine=false`` the rollout runs on devices of its own: the
actor's devices hold no rollout copy, and the **rollout** stage is planned for a rollout device
(runtime + one whole copy of the parameters + the KV cache and sampling buffers of its
``batch / rollout world size`` sequences); the peak is the larger of the two kinds of device.

Tokens per micro-batch are the real tokens under ``use_remove_padding`` (packed) and
``rows · (max_prompt_length + max_response_length)`` otherwise; scored positions K are the
response tokens (packed) or ``rows · (R + 1)`` (padded).

Ulysses sequence parallelism (``*.ulysses_sequence_parallel_size`` = sp): a role's rows are
split over ``dp = world / sp`` data-parallel ranks, and each micro-batch's tokens over the sp
ranks of its group, so the per-rank activations, scored logits and log-prob forwards are those
of ``rows · tokens / sp`` (a dynamic budget spans ``sp`` devices: ``ppo_max_token_len_per_gpu · sp``
tokens per micro-batch, as in verl). Parameters stay sharded over the whole world.

Tensor parallelism (``*.fsdp_config.tensor_parallel_size`` = tp): rows over ``dp = world / tp``;
each rank holds ``1 / world`` of the decoder projections (`ModelShape.block_params`) and
``tp / world`` of the rest (embeddings, norms, heads: FSDP2 over ``dp`` only), ``1 / tp`` of the
split activations (`ModelShape.activation_bytes_per_token`), whole logits. The hf rollout at
``rollout.tensor_model_parallel_size`` = t holds ``1 / t`` of the blocks in its copy and decodes
``t`` ranks' rows per group (whole sampling logits).

Both together (sp and tp, the mesh ``(dp, sp, tp)``): rows over ``dp = world / (sp · tp)``; each
rank holds ``1 / sp`` of a micro-batch's tokens and, of those, ``1 / tp`` of the split activations
(whole scored logits of its ``K / sp`` positions); parameters as under TP alone (FSDP2 over
``dp · sp = world / tp`` ranks: the projections over the world, the rest over ``world / tp``). The
critic's micro-batches are its own (rows over its ``world / (sp · tp)``, its micro-batch size or
token budget, its sp). The peak is runtime + static + the
largest stage. The recommendation is the largest actor token budget (``ppo_max_token_len_per_gpu``
and the matching ``ppo_micro_batch_size_per_gpu``) and ``rollout.max_num_seqs`` that keep the
peak under 90 % of the device memory, capped at what one step can use (all of a rank's
trajectories at full length; all of a rollout worker's sequences at once). Accuracy measured on
this machine is in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any

from verl.config.finalize import rollout_world_size

__all__ = ["ModelShape", "MemoryPlan", "main", "plan_memory"]

GIB = 2**30
SAMPLING_TEMPS = 6  # (B, V) float32 passes alive in one decode step: logits, scaled, log-softmax, probs, cdf, filter
HEADROOM = 0.9


@dataclass(frozen=True)
class ModelShape:
    """Sizes of a decoder-only transformer that set its memory."""

    n_params: int
    hidden: int
    layers: int
    kv_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def from_path(cls, path: str, key: str = "actor_rollout_ref.model.path") -> ModelShape:
        """Read a model directory's (or ``builtin://`` name's) config; the model is built on the meta device.

        Raises:
            ModelError: the config cannot be read (one line naming ``key``).
        """
        import torch
        from transformers import AutoModelForCausalLM

        from verl.run.model_access import read_model_config

        c = read_model_config(key, path)
        with torch.device("meta"):
            n = sum(p.numel() for p in AutoModelForCausalLM.from_config(c).parameters())
        hidden = int(getattr(c, "hidden_size", getattr(c, "n_embd", 0)))
        heads = int(getattr(c, "num_attention_heads", getattr(c, "n_head", 1)))
        kv_heads = int(getattr(c, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(c, "head_dim", None) or hidden // heads)
        inter = int(getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * hidden)
        layers = int(getattr(c, "num_hidden_layers", getattr(c, "n_layer", 0)))
        return cls(
            n_params=n,
            hidden=hidden,
            layers=layers,
            kv_dim=kv_heads * head_dim,
            intermediate=inter,
            vocab=int(c.vocab_size),
        )

    def activation_bytes_per_token(self, dtype_bytes: int, tp: int = 1) -> float:
        """Values saved for backward per token over all layers (see the module docstring); under
        tensor parallelism q, k, v, the attention output and the MLP's four are ``1 / tp`` per rank,
        the norms' inputs and outputs (``4·H``) whole."""
        split = 2 * self.hidden + 2 * self.kv_dim + 4 * self.intermediate
        return self.layers * (4 * self.hidden + split / tp) * dtype_bytes

    @property
    def block_params(self) -> int:
        """Parameters of the decoder blocks' projections (q, o: ``H·H``; k, v: ``H·kv_dim``; gate,
        up, down: ``H·I``): what tensor parallelism splits."""
        h = self.hidden
        return self.layers * (2 * h * h + 2 * h * self.kv_dim + 3 * h * self.intermediate)

    def params_per_rank(self, world: int, tp: int = 1) -> float:
        """Parameters one of ``world`` ranks holds: FSDP2 over all of them at ``tp == 1``; under TP the
        split projections over ``world`` (tp slices, each over ``world / tp``), the rest over ``world / tp``."""
        block = min(self.block_params, self.n_params) if tp > 1 else 0
        return block / world + (self.n_params - block) * tp / world


@dataclass
class MemoryPlan:
    """Estimated bytes per stage on one device, the peak, and the recommendation."""

    device_bytes: float
    runtime: float
    static: dict[str, float]
    stages: dict[str, float]
    peak: float
    peak_stage: str
    fits: bool
    recommend: dict[str, int]


def _dtype_bytes(name: str | None) -> int:
    return 2 if name in ("bfloat16", "bf16", "float16", "fp16") else 4


def _tokens(cfg: Any, rows: int, packed: bool) -> tuple[float, float]:
    """(tokens, scored positions) of a forward over ``rows`` trajectories (see module docstring)."""
    p, r = cfg.data.max_prompt_length, cfg.data.max_response_length
    if packed:
        return rows * (p + r), rows * r  # upper bound: every prompt and response at its maximum length
    return rows * (p + r), rows * (r + 1)


def sp_sizes(cfg: Any) -> tuple[int, int]:
    """(actor, critic) ``ulysses_sequence_parallel_size``."""
    return cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size, cfg.critic.ulysses_sequence_parallel_size


def tp_sizes(cfg: Any) -> tuple[int, int, int]:
    """(actor, critic, hf rollout) tensor-parallel degrees (``*.fsdp_config.tensor_parallel_size``,
    ``rollout.tensor_model_parallel_size`` of the hf engine in the actor's workers; 1 otherwise)."""
    arr = cfg.actor_rollout_ref
    rollout = arr.rollout.tensor_model_parallel_size if arr.rollout.name == "hf" and arr.hybrid_engine else 1
    return arr.actor.fsdp_config.tensor_parallel_size, cfg.critic.model.fsdp_config.tensor_parallel_size, rollout


def _stage_bytes(
    cfg: Any,
    actor: ModelShape,
    critic: ModelShape | None,
    world: int,
    gen_rows: int,
    train_tokens: float,
    train_scored: float,
) -> dict[str, float]:
    """Transient bytes of each stage (rollout, log-prob forwards, actor and critic updates); the
    train tokens are one rank's (already divided by the actor's sp)."""
    arr = cfg.actor_rollout_ref
    pb = _dtype_bytes(arr.model.dtype)
    p, r = cfg.data.max_prompt_length, cfg.data.max_response_length
    kv = 2 * actor.layers * actor.kv_dim * (p + r) * gen_rows * pb
    tp, critic_tp, rollout_tp = tp_sizes(cfg)
    # a TP group decodes its ranks' rows together: rollout_tp x the rows, 1 / rollout_tp of the KV heads, whole logits
    stages = {"rollout": kv + (SAMPLING_TEMPS + 1) * gen_rows * rollout_tp * actor.vocab * 4}
    sp = sp_sizes(cfg)[0]
    rows = cfg.data.train_batch_size * arr.rollout.n // (world // (sp * tp))  # one data-parallel rank's rows
    lp_rows = arr.rollout.log_prob_micro_batch_size_per_gpu or rows
    _, lp_scored = _tokens(cfg, lp_rows, arr.model.use_remove_padding)
    lp_scored /= sp
    # a block holds at most the K scored rows of the micro-batch (K below the chunk size: K rows)
    chunk = 2 * min(arr.actor.logprob_chunk_size, lp_scored) * actor.vocab * 4
    fused = fused_head_applies(cfg, world)
    # fused: only the chunk's own logits (its statistics run 16 rows at a time)
    stages["log_prob"] = chunk / 2 if fused else lp_scored * actor.vocab * pb + chunk
    per_scored, chunk_bytes = _train_logit_bytes(cfg, actor, fused, train_scored)
    stages["update_actor"] = (
        actor.params_per_rank(world, tp) * pb
        + train_tokens * actor.activation_bytes_per_token(pb, tp)
        + train_scored * per_scored
        + chunk_bytes
    )
    if critic is not None:
        critic_tokens = _critic_tokens(cfg, world)
        stages["update_critic"] = critic.params_per_rank(
            world, critic_tp
        ) * 4 + critic_tokens * critic.activation_bytes_per_token(4, critic_tp)
    return stages


def _critic_tokens(cfg: Any, world: int) -> float:
    """Tokens one critic rank holds per micro-batch: its data-parallel rank's rows (``world / (sp · tp)``
    ranks of the critic's own degrees), its ``ppo_micro_batch_size_per_gpu`` (or a token budget of
    ``ppo_max_token_len_per_gpu · sp``), ``1 / sp`` of them per rank."""
    c = cfg.critic
    sp, tp = c.ulysses_sequence_parallel_size, c.model.fsdp_config.tensor_parallel_size
    rows = cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n // (world // (sp * tp))
    tokens, _ = _tokens(cfg, c.ppo_micro_batch_size_per_gpu or rows, c.model.use_remove_padding)
    if c.use_dynamic_bsz:
        tokens = min(tokens, c.ppo_max_token_len_per_gpu * sp)
    return tokens / sp


def _train_logit_bytes(cfg: Any, actor: ModelShape, fused: bool, scored: float | None = None) -> tuple[float, float]:
    """The update's float32 logit memory: (bytes per scored position, bytes of `(chunk, V)` temporaries).

    Unfused: the `(K, V)` logits and their gradient (2 per position) and two `(chunk, V)` blocks.
    Fused head: one `(K, V)` buffer that the gradient overwrites and no block (its statistics run
    16 rows at a time); with ``logprob_head_recompute`` no `(K, V)` buffer and one block (the
    chunk's recomputed logits). A block has ``min(chunk, scored)`` rows (``scored``: the micro-batch's
    K on this rank; None = a full chunk).
    """
    a = cfg.actor_rollout_ref.actor
    copies, blocks = ((0, 1) if a.logprob_head_recompute else (1, 0)) if fused else (2, 2)
    rows = a.logprob_chunk_size if scored is None else min(a.logprob_chunk_size, scored)
    return copies * actor.vocab * 4, blocks * rows * actor.vocab * 4


def fused_head_applies(cfg: Any, world: int) -> bool:
    """Whether the actor's forwards run the fused LM head + log-prob (`verl.modules.forward.fused_lm_head`):
    a plain transformers model, i.e. no FSDP sharding (world size 1) and no LoRA (peft wrapper)."""
    return world == 1 and cfg.actor_rollout_ref.model.lora_rank == 0


def plan_memory(
    cfg: Any, device_bytes: float, runtime_bytes: float, actor: ModelShape, critic: ModelShape | None = None
) -> MemoryPlan:
    """Estimate the per-device memory of ``cfg``'s RL step and recommend micro-batch sizes.

    Args:
        cfg: a loaded `RootConfig`.
        device_bytes: memory of one device (bytes).
        runtime_bytes: memory the process holds before any model is built.
        actor: the policy's `ModelShape`; critic: the value model's, or None without a critic.

    Returns:
        The `MemoryPlan` (bytes).
    """
    arr = cfg.actor_rollout_ref
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    pb = _dtype_bytes(arr.model.dtype)
    tp, critic_tp, rollout_tp = tp_sizes(cfg)
    share = actor.params_per_rank(world, tp)
    static = {"actor_params": share * pb, "actor_adam": 2 * share * 4}
    if (arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward) and arr.model.lora_rank == 0:
        # ref.fsdp_config.tensor_parallel_size 1 (FSDP2 over the world) or the actor's (the actor's layout)
        static["ref_params"] = actor.params_per_rank(world, arr.ref.fsdp_config.tensor_parallel_size) * pb
    split = not arr.hybrid_engine  # the rollout on its own devices (module docstring)
    if world > 1 and not split:
        static["rollout_copy"] = actor.params_per_rank(rollout_tp, rollout_tp) * pb  # TP: 1 / tp of the blocks
    if critic is not None:
        static["critic_params_adam"] = 3 * critic.params_per_rank(world, critic_tp) * 4
    sp = sp_sizes(cfg)[0]
    rows = cfg.data.train_batch_size * arr.rollout.n // (world // (sp * tp))  # one data-parallel rank's rows
    micro_rows = arr.actor.ppo_micro_batch_size_per_gpu or rows
    tokens, scored = _tokens(cfg, micro_rows, arr.model.use_remove_padding)
    if arr.actor.use_dynamic_bsz:
        tokens = min(tokens, arr.actor.ppo_max_token_len_per_gpu * sp)
        scored = tokens * cfg.data.max_response_length / (cfg.data.max_prompt_length + cfg.data.max_response_length)
    tokens, scored = tokens / sp, scored / sp  # each rank of the SP group holds 1 / sp of the columns
    gen_per_worker = cfg.data.train_batch_size * arr.rollout.n // (rollout_world_size(cfg) if split else world)
    gen_rows = min(gen_per_worker, arr.rollout.max_num_seqs)
    stages = _stage_bytes(cfg, actor, critic, world, gen_rows, tokens, scored)
    base = runtime_bytes + sum(static.values())
    totals = {k: base + v for k, v in stages.items()}
    recommend = _recommend(cfg, actor, critic, world, device_bytes * HEADROOM - base, rows, gen_per_worker)
    if split:  # a rollout device holds the runtime, one whole copy of the weights and its stage only
        rollout_base = runtime_bytes + actor.n_params * pb
        totals["rollout"] = rollout_base + stages["rollout"]
        recommend["rollout.max_num_seqs"] = _recommend(
            cfg, actor, critic, world, device_bytes * HEADROOM - rollout_base, rows, gen_per_worker
        )["rollout.max_num_seqs"]
    peak_stage = max(totals, key=totals.get)
    peak = totals[peak_stage]
    return MemoryPlan(
        device_bytes, runtime_bytes, static, stages, peak, peak_stage, peak <= device_bytes * HEADROOM, recommend
    )


def _recommend(
    cfg: Any, actor: ModelShape, critic: ModelShape | None, world: int, free: float, rows: int, gen_rows: int
) -> dict[str, int]:
    """Largest actor token budget and rollout batch whose stage fits in ``free`` bytes, capped at
    what one step can use: ``rows`` trajectories of full length per data-parallel rank (``1 / sp``
    of their tokens on each device under sequence parallelism), ``gen_rows`` sequences per rollout
    worker (a larger value changes nothing)."""
    seq = cfg.data.max_prompt_length + cfg.data.max_response_length
    frac = cfg.data.max_response_length / seq
    pb = _dtype_bytes(cfg.actor_rollout_ref.model.dtype)
    per_scored, chunk = _train_logit_bytes(cfg, actor, fused_head_applies(cfg, world))
    tp = tp_sizes(cfg)[0]
    per_token = actor.activation_bytes_per_token(pb, tp) + frac * per_scored
    sp = sp_sizes(cfg)[0]
    budget = min(max(int((free - actor.params_per_rank(world, tp) * pb - chunk) / per_token), 0), rows * seq // sp)
    per_seq_gen = 2 * actor.layers * actor.kv_dim * seq * pb + (SAMPLING_TEMPS + 1) * actor.vocab * 4
    return {
        "ppo_max_token_len_per_gpu": budget,
        "ppo_micro_batch_size_per_gpu": min(budget * sp // seq, rows),
        "rollout.max_num_seqs": min(max(int(free // per_seq_gen), 0), gen_rows),
    }


def measure_runtime(cfg: Any) -> float:
    """RSS (bytes) of this process holding what a training process holds before its weights:
    torch, transformers and verl imported, the tokenizer and the training data loader built."""
    import psutil

    import verl.trainer.ppo.trainer  # noqa: F401
    from verl.data import RLDataLoader
    from verl.trainer.ppo.builders import data_tool_schemas
    from verl.run.model_access import load_run_tokenizer

    tokenizer = load_run_tokenizer(cfg)
    loader = RLDataLoader(cfg.data, tokenizer=tokenizer, split="train", tool_schemas=data_tool_schemas(cfg.data))
    next(iter(loader))
    return float(psutil.Process().memory_info().rss)


def parse_device(spec: str) -> tuple[str, float]:
    """``cpu`` (this machine's total RAM) or ``gpu:<N>GiB|GB`` -> (kind, bytes).

    Raises:
        ValueError: any other spelling.
    """
    if spec == "cpu":
        import psutil

        return "cpu", float(psutil.virtual_memory().total)
    m = re.fullmatch(r"gpu:(\d+(?:\.\d+)?)(GiB|GB)", spec)
    if not m:
        raise ValueError(f"--device must be cpu or gpu:<N>GiB (e.g. gpu:80GiB), got {spec!r}")
    return "gpu", float(m.group(1)) * (GIB if m.group(2) == "GiB" else 1e9)


def format_plan(plan: MemoryPlan) -> str:
    """Human-readable table of a `MemoryPlan` (GiB)."""
    g = lambda b: f"{b / GIB:8.3f} GiB"  # noqa: E731
    lines = [f"device memory            {g(plan.device_bytes)}", f"runtime (measured/fixed) {g(plan.runtime)}"]
    lines += [f"static  {k:<17}{g(v)}" for k, v in plan.static.items()]
    lines += [f"stage   {k:<17}{g(v)}" for k, v in plan.stages.items()]
    lines.append(
        f"predicted peak           {g(plan.peak)}  (during {plan.peak_stage}) -> "
        f"{'fits' if plan.fits else 'DOES NOT FIT'} in {HEADROOM:.0%} of the device"
    )
    lines += [
        f"recommend actor_rollout_ref.{'' if k.startswith('rollout.') else 'actor.'}{k} = {v}"
        for k, v in plan.recommend.items()
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``verl plan``; returns 0 when the config fits, 1 when it does not."""
    parser = argparse.ArgumentParser(prog="verl plan", description=__doc__.split("\n")[0])
    parser.add_argument("args", nargs="*", help="[CONFIG] [key=value ...]")
    parser.add_argument("--device", default="cpu", help="cpu or gpu:<N>GiB")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))

    from verl.config import load_config

    kind, device_bytes = parse_device(ns.device)
    positional = [a for a in ns.args if "=" not in a]
    cfg = load_config(positional[0] if positional else "quickstart", [a for a in ns.args if "=" in a])
    actor = ModelShape.from_path(cfg.actor_rollout_ref.model.path, "actor_rollout_ref.model.path")
    use_critic = cfg.critic.enable if cfg.critic.enable is not None else cfg.algorithm.adv_estimator == "gae"
    critic_key = "critic.model.path" if cfg.critic.model.path else "actor_rollout_ref.model.path"
    critic = (
        ModelShape.from_path(cfg.critic.model.path or cfg.actor_rollout_ref.model.path, critic_key)
        if use_critic
        else None
    )
    runtime = measure_runtime(cfg) if kind == "cpu" else 0.5 * GIB
    plan = plan_memory(cfg, device_bytes, runtime, actor, critic)
    print(json.dumps(asdict(plan), indent=1) if ns.json else format_plan(plan))
    return 0 if plan.fits else 1


if __name__ == "__main__":
    sys.exit(main())
