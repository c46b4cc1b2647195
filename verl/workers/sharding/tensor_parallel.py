"""The ranks of a worker group laid out as data parallel × tensor parallel (FSDP2 × TP).

``world = dp · tp`` ranks form a `DeviceMesh` with dims ``("dp", "tp")``; rank ``r`` is
data-parallel rank ``r // tp`` and TP rank ``r % tp`` (consecutive ranks share a model shard and
its rows, as Megatron's and torchtitan's layouts). Each decoder block is split over the ``tp`` dim
with ``parallelize_module`` (Megatron-LM's column/row split, Shoeybi et al. 2019; the plan of
torchtitan's ``parallelize_llama``): ``q/k/v/gate/up`` column-wise (each TP rank holds
``heads / tp`` attention heads and ``intermediate / tp`` MLP columns), ``o/down`` row-wise (a sum
over the group restores the replicated residual stream). Then FSDP2 shards every parameter over the
``dp`` dim (`verl.engine.fsdp.shard_module` with ``mesh``; no FSDP when ``dp == 1``).

Embeddings, norms, the LM head and the value head stay replicated over the TP group (sharded over
``dp`` only): the built-in and most small checkpoints tie the input and output embeddings, and a
replicated head gives every TP rank the whole ``(B, R, V)`` logits the log-prob code reads.

Rows: the controller hands every rank its own chunk of a batch; `TensorParallelLayout.run` /
`scope` all-gather the chunks of the TP group so its ranks compute on the same rows, reduce counts
and metrics over ``dp`` only and hand back each rank's own rows — the same protocol as
`verl.workers.sharding.ulysses.UlyssesLayout`, whose interface (``sp``, ``dp``, ``prepare``,
``scope``, ``gather``, ``local``, ``run``) this class offers, so the workers use either.

Gradient: the TP ranks of a group compute the same loss; the sharded parameters' gradients are
DTensors of their shards, the replicated ones are equal copies; FSDP2 averages over ``dp`` and the
engine scales the loss by ``dp`` (`shard_kwargs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from verl.config.errors import ConfigError
from verl.protocol import DataProto

__all__ = ["TP_ARCHITECTURES", "TensorParallelLayout", "build_layout", "build_rollout_layout", "check_tp_heads", "shard_kwargs", "tp_plan"]

TP_ARCHITECTURES: tuple[str, ...] = ("llama", "qwen2", "qwen3", "mistral")
"""Hugging Face ``model_type`` values whose decoder blocks have a TP plan (same projection names)."""


def tp_plan() -> dict[str, Any]:
    """The ``parallelize_module`` plan of one Llama / Qwen2 decoder block (names relative to it)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    col = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
    plan: dict[str, Any] = {name: ColwiseParallel() for name in col}
    plan.update({"self_attn.o_proj": RowwiseParallel(), "mlp.down_proj": RowwiseParallel()})
    return plan


def check_tp_heads(config: Any, tp: int, what: str = "tensor_parallel_size") -> None:
    """Refuse an architecture without a plan or heads not divisible by ``tp``.

    Raises:
        ConfigError: ``config.model_type`` not in `TP_ARCHITECTURES`, or ``num_attention_heads`` /
            ``num_key_value_heads`` / ``intermediate_size`` not divisible by ``tp`` (one line,
            both numbers).
    """
    arch = getattr(config, "model_type", None)
    if arch not in TP_ARCHITECTURES:
        raise ConfigError(f"{what}={tp}: no tensor-parallel plan for architecture {arch!r} "
                          f"(plans exist for {', '.join(TP_ARCHITECTURES)})")
    heads = config.num_attention_heads
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        value = getattr(config, key, None) or heads
        if value % tp:
            raise ConfigError(f"{what}={tp} does not divide the model's {key}={value}")


def _decoder_blocks(module: torch.nn.Module) -> list[torch.nn.Module]:
    from verl.engine.fsdp import _blocks

    return _blocks(module)


def apply_tensor_parallel(module: torch.nn.Module, tp_mesh: Any, tp: int, what: str = "tensor_parallel_size") -> torch.nn.Module:
    """Split every decoder block of ``module`` over ``tp_mesh`` in place (`tp_plan`).

    Raises:
        ConfigError: see `check_tp_heads`; a LoRA (peft) model (not supported yet).
    """
    from torch.distributed.tensor.parallel import parallelize_module

    if hasattr(module, "peft_config"):
        raise ConfigError(f"{what}={tp} with LoRA (model.lora_rank > 0) is not supported yet")
    check_tp_heads(module.config, tp, what)
    blocks = _decoder_blocks(module)
    if not blocks:
        raise ConfigError(f"{what}={tp}: the model has no decoder blocks to split")
    for block in blocks:
        parallelize_module(block, tp_mesh, tp_plan())
    return module


def _gather_rows(data: DataProto, group: Any, n: int) -> DataProto:
    import torch.distributed as dist

    parts: list[DataProto | None] = [None] * n
    dist.all_gather_object(parts, data, group=group)
    merged = DataProto.concat([p for p in parts if p is not None])
    merged.meta_info = data.meta_info
    return merged


@dataclass
class TensorParallelLayout:
    """This rank's place in the ``(dp, tp)`` mesh.

    Attributes:
        tp: TP degree (> 1).
        dp: data-parallel size, ``world / tp``.
        mesh: the `DeviceMesh` ``("dp", "tp")``.
        sp: always 1 (Ulysses SP together with TP is refused by `build_layout`).
    """

    tp: int
    dp: int
    mesh: Any
    sp: int = 1
    what: str = "tensor_parallel_size"

    @classmethod
    def build(cls, tp: int, world_size: int, device: str = "cpu", what: str = "tensor_parallel_size",
              training: bool = True) -> TensorParallelLayout:
        """The layout of ``world_size`` ranks at TP degree ``tp`` (a collective).

        Args:
            what: the key named in errors.
            training: the layout of a trained model (its TP groups share one data shard, recorded
                in `verl.engine.dist`); False for the rollout's own layout.

        Raises:
            ConfigError: ``tp`` does not divide ``world_size``.
        """
        from torch.distributed.device_mesh import init_device_mesh

        from verl.engine.dist import set_sequence_parallel_size
        from verl.workers.sharding.ulysses import data_parallel_size

        dp = data_parallel_size(world_size, tp, what)
        if training:
            set_sequence_parallel_size(tp)  # the ranks of a TP group share one data shard
        mesh = init_device_mesh("cpu" if device == "cpu" else "cuda", (dp, tp), mesh_dim_names=("dp", "tp"))
        return cls(tp=tp, dp=dp, mesh=mesh, what=what)

    @property
    def tp_group(self) -> Any:
        return self.mesh["tp"].get_group()

    @property
    def dp_group(self) -> Any:
        return self.mesh["dp"].get_group()

    def prepare(self, module: torch.nn.Module) -> None:
        """Split ``module``'s decoder blocks over the ``tp`` dim (`apply_tensor_parallel`)."""
        apply_tensor_parallel(module, self.mesh["tp"], self.tp, self.what)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Counts and metrics reduced over the ``dp`` dim inside the block."""
        from verl.engine.dist import reduce_over

        with reduce_over(self.dp_group):
            yield

    def gather(self, data: DataProto) -> DataProto:
        """The TP group's chunks of ``data`` concatenated in rank order (this rank's ``meta_info``)."""
        return _gather_rows(data, self.tp_group, self.tp)

    def local(self, out: DataProto) -> DataProto:
        """This rank's rows of a result computed on the gathered rows (`gather`), in order."""
        import torch.distributed as dist

        return out if out.batch is None else out.chunk(self.tp)[dist.get_rank(self.tp_group)]

    def run(self, data: DataProto, method: Any, *args: Any) -> DataProto:
        """``local(method(gather(data), *args))`` inside `scope`."""
        with self.scope():
            return self.local(method(self.gather(data), *args))


def build_layout(sp: int, tp: int, world_size: int, device: str = "cpu") -> Any:
    """`TensorParallelLayout` when ``tp > 1``, else `UlyssesLayout` at ``sp`` (the identity at 1).

    Raises:
        ConfigError: ``sp > 1`` and ``tp > 1`` together (not supported yet), or a degree that
            does not divide ``world_size``.
    """
    from verl.workers.sharding.ulysses import UlyssesLayout

    if tp > 1 and sp > 1:
        raise ConfigError(f"tensor_parallel_size={tp} with ulysses_sequence_parallel_size={sp} is not supported yet; "
                          "use one of them")
    if tp > 1:
        return TensorParallelLayout.build(tp, world_size, device)
    return UlyssesLayout.build(sp, world_size, device)


def build_rollout_layout(config: Any, world_size: int, device: str = "cpu") -> TensorParallelLayout | None:
    """The hf rollout's own ``(dp, tp)`` layout at ``rollout.tensor_model_parallel_size`` (None at 1
    or for another engine, which reads the key itself: vLLM's ``tensor_parallel_size``).

    The engine's copy of the model is split like the trained one (`tp_plan`); the ranks of a TP
    group decode the same prompts together (`TensorParallelLayout.run`), each holding ``1 / tp`` of
    every decoder block, and get the whole logits (replicated head), so they sample the same tokens.

    Raises:
        ConfigError: the degree does not divide ``world_size``.
    """
    tp = int(getattr(config, "tensor_model_parallel_size", 1) or 1)
    if tp == 1 or config.name != "hf":
        return None
    return TensorParallelLayout.build(tp, world_size, device, "rollout.tensor_model_parallel_size", training=False)


def shard_kwargs(layout: Any, world_size: int) -> dict[str, Any]:
    """``build_engine`` keyword arguments of a layout: FSDP2 over the ``dp`` dim under TP, the
    loss multiplier ``dp``; the whole world otherwise (Ulysses: every rank shards)."""
    if isinstance(layout, TensorParallelLayout):
        return {"world_size": layout.dp, "mesh": layout.mesh["dp"] if layout.dp > 1 else None}
    return {"world_size": world_size}
