"""Builders of the supervised trainer (`verl.trainer.sft_trainer`): model, engine, streams, validation, export.

Constructors store, builders build: `build_supervised_trainer` assembles the actor's
`TrainingEngine` (the same `verl.engine.build_engine` the PPO actor uses), the tokenizer, one
task stream per source and the validation / export callables.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import torch

from verl.config.schema import FSDPConfig, ModelConfig, OptimConfig
from verl.config.sft_schema import SFTRootConfig
from verl.engine.base import MicroBatchSpec
from verl.engine.dist import data_parallel_rank, data_parallel_size, dp_rank, dp_world_size, sum_floats
from verl.protocol import DataProto
from verl.trainer.supervised.streams import DPOStream, SFTStream

__all__ = ["build_supervised_trainer", "model_config_of", "normalised_weights"]


def model_config_of(cfg: SFTRootConfig) -> ModelConfig:
    """The ``model`` section in the RL schema's terms (what `verl.modules.create_model` reads)."""
    m = cfg.model
    dtype = {"fp32": "float32", "bf16": "bfloat16"}.get(m.fsdp_config.model_dtype, m.fsdp_config.model_dtype)
    return ModelConfig(
        path=m.partial_pretrain,
        tokenizer_path=m.tokenizer_path,
        trust_remote_code=m.trust_remote_code,
        dtype=dtype,
        enable_gradient_checkpointing=m.enable_gradient_checkpointing,
        lora_rank=m.lora_rank,
        lora_alpha=m.lora_alpha,
        target_modules=m.target_modules,
        override_config=dict(m.override_config),
        external_lib=m.external_lib,
        exclude_modules=m.exclude_modules,
    )


def _optim_config(cfg: SFTRootConfig) -> OptimConfig:
    o = cfg.optim
    optim = OptimConfig(
        lr=o.lr,
        lr_warmup_steps=o.lr_warmup_steps if o.lr_warmup_steps is not None else -1,
        lr_warmup_steps_ratio=o.warmup_steps_ratio,
        min_lr_ratio=o.min_lr_ratio,
        # the scheduler reads lr_scheduler_type; warmup_style is its alias and must agree
        lr_scheduler_type=o.lr_scheduler,
        warmup_style=o.lr_scheduler,
        weight_decay=o.weight_decay,
        betas=list(o.betas),
        eps=o.eps,
        num_cycles=o.num_cycles,
    )
    optim.zero_indexed_step = o.zero_indexed_step  # type: ignore[attr-defined]  # read by build_lr_scheduler
    return optim


def _fsdp_config(cfg: SFTRootConfig) -> FSDPConfig:
    f = cfg.model.fsdp_config
    offload = f.cpu_offload or f.offload_params
    mixed = {"bf16": "bfloat16", "fp32": "float32"}.get(f.mixed_precision or "", f.mixed_precision)
    return FSDPConfig(param_offload=offload, optimizer_offload=offload or f.optimizer_offload, mixed_precision=mixed)


def normalised_weights(task_weights: list[float], n: int) -> list[float]:
    """``w_i / Σ w`` (equal weights when ``task_weights`` is empty)."""
    raw = list(task_weights) if task_weights else [1.0] * n
    total = float(sum(raw))
    return [float(w) / total for w in raw]


def _micro_spec(cfg: SFTRootConfig, size: int | None = None) -> MicroBatchSpec:
    """Micro-batches of ``size`` rows (default: data.micro_batch_size_per_gpu), or packed by
    ``data.max_token_len_per_gpu`` tokens with ``data.use_dynamic_bsz``."""
    d = cfg.data
    return MicroBatchSpec(
        size=size or _micro_size(cfg), dynamic=d.use_dynamic_bsz, max_token_len=d.max_token_len_per_gpu
    )


def _micro_size(cfg: SFTRootConfig) -> int:
    d = cfg.data
    if d.micro_batch_size is not None:
        return max(1, d.micro_batch_size // data_parallel_size())
    return d.micro_batch_size_per_gpu


def _check_divisible(batch_size: int, what: str) -> None:
    if batch_size % data_parallel_size():
        raise ValueError(f"{what}={batch_size} is not divisible by the data-parallel size ({data_parallel_size()})")


def _tokenizer(cfg: SFTRootConfig) -> Any:
    from verl.data.tokenizer import load_tokenizer

    from verl.run.model_access import load_error

    key = "model.tokenizer_path" if cfg.model.tokenizer_path else "model.partial_pretrain"
    path = cfg.model.tokenizer_path or cfg.model.partial_pretrain
    try:
        tok = load_tokenizer(path, trust_remote_code=cfg.model.trust_remote_code)
    except Exception as e:  # noqa: BLE001 - transformers raises many types for a tokenizer it cannot load
        raise load_error(key, "load the tokenizer", path, e, "model.trust_remote_code") from None
    if cfg.data.chat_template:
        tok.chat_template = cfg.data.chat_template
    return tok


def _reference_fn(
    cfg: SFTRootConfig, engine: Any, forward: Callable, micro: MicroBatchSpec, device: str
) -> Callable[[DataProto], tuple[torch.Tensor, torch.Tensor]]:
    """Reference log-probs: the actor with LoRA adapters off (LoRA, ``dpo.reference=auto``) or a frozen copy."""
    from verl.engine import build_engine
    from verl.modules import create_model, ref_policy_context

    if cfg.model.lora_rank > 0 and cfg.dpo.reference == "auto":

        def with_adapters_off(batch: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
            with ref_policy_context(engine.module):
                out = engine.infer_batch(batch, forward, micro)
            return out["chosen_logps"], out["rejected_logps"]

        return with_adapters_off
    ref_cfg = copy.copy(model_config_of(cfg))
    ref_cfg.lora_rank = 0
    ref_engine = build_engine(
        create_model("ref", ref_cfg, device=device), _fsdp_config(cfg), dp_world_size(), device=device
    )

    def frozen(batch: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
        out = ref_engine.infer_batch(batch, forward, micro)
        return out["chosen_logps"], out["rejected_logps"]

    return frozen


def _streams(cfg: SFTRootConfig, tok: Any, engine_box: dict[str, Any], device: str) -> list[Any]:
    """One stream for sft / dpo, the configured ones for hybrid (built before the engine: sizes fix the schedule)."""
    from verl.data.dpo_dataset import PreferenceDataset
    from verl.data.sft_dataset import SFTDataset

    t, d = cfg.trainer, cfg.data
    micro = _micro_spec(cfg)
    specs = (
        [(t.algorithm, t.algorithm, d.train_files, d.train_batch_size, micro)]
        if t.algorithm != "hybrid"
        else [
            (x.name, x.loss, x.train_files, x.batch_size, _micro_spec(cfg, x.micro_batch_size_per_gpu))
            for x in cfg.hybrid.tasks
        ]
    )
    streams: list[Any] = []
    for name, loss, files, batch_size, mb in specs:
        _check_divisible(batch_size, f"batch size of stream {name!r}")
        if loss == "sft":
            streams.append(
                SFTStream(
                    name,
                    SFTDataset(files, tok, d, d.train_max_samples),
                    batch_size,
                    mb,
                    tok.pad_token_id,
                    t.seed,
                    d.shuffle,
                    remove_padding=cfg.use_remove_padding,
                )
            )
        elif loss == "dpo":
            stream = DPOStream(
                name,
                PreferenceDataset(files, tok, d),
                batch_size,
                mb,
                tok.pad_token_id,
                t.seed,
                reference=None,
                dpo=cfg.dpo,
                shuffle=d.shuffle,  # type: ignore[arg-type]
                remove_padding=cfg.use_remove_padding,
            )
            engine_box.setdefault("dpo_streams", []).append(stream)
            streams.append(stream)
        else:
            from verl.trainer.supervised.rl_stream import RLStream

            task = next(x for x in cfg.hybrid.tasks if x.name == name)
            stream = RLStream(name, files, task, tok, mb, t.seed, d.max_length, device, cfg.use_remove_padding)
            engine_box.setdefault("rl_streams", []).append(stream)
            streams.append(stream)
    return streams


def _shard_rows(n: int) -> tuple[list[int], list[bool]]:
    """This rank's validation rows: equal counts per rank (the last rows repeated, flagged to be ignored)."""
    world, rank = data_parallel_size(), data_parallel_rank()  # SP ranks share their shard
    per = -(-n // world)
    idx = [rank * per + i for i in range(per)]
    return [i if i < n else n - 1 for i in idx], [i < n for i in idx]


def _val_dataset(cfg: SFTRootConfig, tok: Any) -> Any:
    """The ``data.val_files`` dataset (built with the training data, before the model: its rows are checked then)."""
    from verl.data.dpo_dataset import PreferenceDataset
    from verl.data.sft_dataset import SFTDataset

    if not cfg.data.val_files or cfg.trainer.algorithm == "hybrid":
        return None
    if cfg.trainer.algorithm == "dpo":
        return PreferenceDataset(cfg.data.val_files, tok, cfg.data)
    return SFTDataset(cfg.data.val_files, tok, cfg.data, cfg.data.val_max_samples)


def _validator(
    cfg: SFTRootConfig, tok: Any, engine: Any, streams: list[Any], ds: Any
) -> Callable[[], dict[str, float]] | None:
    """Validation on ``ds`` (`_val_dataset`): token-mean NLL (sft) or DPO loss and reward metrics (dpo)."""
    from verl.data.dpo_dataset import collate_pairs
    from verl.data.sft_dataset import collate_right_padded

    if ds is None:
        return None
    micro = _micro_spec(cfg)
    stream = streams[0]
    is_dpo = cfg.trainer.algorithm == "dpo"
    rows, real = _shard_rows(len(ds))
    items = [ds[i] for i in rows]
    batch = DataProto.from_dict(
        tensors=collate_pairs(items, tok.pad_token_id) if is_dpo else collate_right_padded(items, tok.pad_token_id)
    )
    keep = torch.tensor(real, dtype=torch.float64)

    def validate() -> dict[str, float]:
        from verl.algorithms.dpo import dpo_loss, dpo_metric_sums

        if not is_dpo:
            out = engine.infer_batch(batch, stream.eval_forward, micro)
            s = sum_floats(
                {
                    "nll": float((out["nll"].double() * keep).sum()),
                    "tokens": float((out["tokens"].double() * keep).sum()),
                }
            )
            return {"val/loss": s["nll"] / s["tokens"]}
        ref_c, ref_r = stream.reference(batch)
        out = engine.infer_batch(batch, stream.policy_forward, micro)
        sel = keep.bool()
        args = (out["chosen_logps"][sel], out["rejected_logps"][sel], ref_c[sel], ref_r[sel])
        sums = dpo_metric_sums(*args, beta=cfg.dpo.beta)
        sums["loss"] = float(
            dpo_loss(
                *args, beta=cfg.dpo.beta, loss_type=cfg.dpo.loss_type, label_smoothing=cfg.dpo.label_smoothing
            ).sum()
        )
        sums["pairs"] = float(sel.sum())
        total = sum_floats(sums)
        return {f"val/{k}": v / total["pairs"] for k, v in total.items() if k != "pairs"}

    return validate


def _hf_exporter(cfg: SFTRootConfig, tok: Any, engine: Any) -> Callable[[Path], None]:
    """Writes the model (LoRA merged) + tokenizer as a Hugging Face directory (collective; rank 0 writes)."""
    from verl.modules import create_model

    def export(out_dir: Path) -> None:
        if dp_world_size() == 1:
            model = copy.deepcopy(engine.module)
        else:
            state = engine.state_for_rollout()
            if dp_rank() != 0:
                return
            model = create_model("actor", model_config_of(cfg), device="cpu")
            model.load_state_dict(state, strict=False)
        if hasattr(model, "merge_and_unload"):
            model = model.merge_and_unload()
        model.to("cpu").save_pretrained(str(out_dir), safe_serialization=True)
        tok.save_pretrained(str(out_dir))

    return export


def build_supervised_trainer(cfg: SFTRootConfig) -> Any:
    """Assemble a `SupervisedTrainer` from a validated config (call after `init_distributed`).

    Raises:
        ValueError: batch sizes not divisible by the number of ranks, datasets smaller than a batch.
    """
    from verl.engine import build_engine
    from verl.modules import create_model
    from verl.trainer.supervised.trainer import SupervisedTrainer

    from verl.workers.sharding.ulysses import UlyssesLayout

    t = cfg.trainer
    device = t.device if t.device == "cpu" else f"cuda:{torch.cuda.current_device()}"
    torch.manual_seed(t.seed)
    layout = UlyssesLayout.build(cfg.ulysses_sequence_parallel_size, dp_world_size(), t.device)
    from verl.run.model_access import read_model_config

    tok = _tokenizer(cfg)
    read_model_config("model.partial_pretrain", cfg.model.partial_pretrain, cfg.model.trust_remote_code)
    box: dict[str, Any] = {}
    streams = _streams(cfg, tok, box, device)
    val_ds = _val_dataset(cfg, tok)
    total = t.total_training_steps or t.total_epochs * streams[0].sampler.steps_per_epoch
    for key in ("save_freq", "test_freq"):  # verl's after_each_epoch: every steps_per_epoch steps
        if getattr(t, key) == "after_each_epoch":
            setattr(t, key, streams[0].sampler.steps_per_epoch)
    module = create_model("actor", model_config_of(cfg), device=device)
    layout.prepare(module)
    engine = build_engine(
        module,
        _fsdp_config(cfg),
        dp_world_size(),
        optim=_optim_config(cfg),
        total_steps=total,
        grad_clip=cfg.optim.clip_grad,
        device=device,
    )
    for s in box.get("dpo_streams", []):
        s.reference = _reference_fn(cfg, engine, s.policy_forward, s.micro, device)
    for s in box.get("rl_streams", []):
        s.attach(engine, lambda: create_model("actor", model_config_of(cfg), device=device))
    weights = normalised_weights(t.task_weights, len(streams))
    return SupervisedTrainer(
        cfg,
        engine,
        streams,
        weights,
        tok,
        total,
        _validator(cfg, tok, engine, streams, val_ds),
        _hf_exporter(cfg, tok, engine),
        sp_layout=layout if layout.sp > 1 else None,
    )
