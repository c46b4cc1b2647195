"""The ranks of a worker group laid out as data parallel × tensor parallel (FSDP2 × TP), optionally
× Ulysses sequence parallel (FSDP2 × SP × TP).

``world = dp · tp`` ranks form a `DeviceMesh` with dims ``("dp", "tp")``; rank ``r`` is
data-parallel rank ``r // tp`` and TP rank ``r % tp`` (consecutive ranks share a model shard and
its rows, as Megatron's and torchtitan's layouts). Each decoder block is split over the ``tp`` dim
with ``parallelize_module`` (Megatron-LM's column/row split, Shoeybi et al. 2019; the plan of
torchtitan's ``parallelize_llama``): ``q/k/v/gate/up`` column-wise (each TP rank holds
``heads / tp`` attention heads and ``intermediate / tp`` MLP columns), ``o/down`` row-wise (a sum
over the group restores the replicated residual stream). Then FSDP2 shards every parameter over the
``dp`` dim (`verl.engine.fsdp.shard_module` with ``mesh``; no FSDP when ``dp == 1``).

With Ulysses SP at ``sp > 1`` the ``world = dp · sp · tp`` ranks form the mesh ``("dp", "sp",
"tp")``: rank ``r`` is data-parallel rank ``r // (sp · tp)``, SP rank ``(r // tp) % sp`` and TP rank
``r % tp``. The blocks are split over ``tp`` as above, then the attention switches to the Ulysses
function (`verl.modules.ulysses`), whose all-to-all over the ``sp`` group (the ranks of one TP index)
exchanges the ``heads / tp`` heads each TP rank holds, so ``heads / tp`` and ``kv_heads / tp`` must be
divisible by ``sp``. FSDP2 shards over the flattened ``("dp", "sp")`` dims (``dp_sp``, ``world / tp``
ranks), as verl shards parameters over ``dp · sp``.

Embeddings, norms, the LM head and the value head stay replicated over the TP group (sharded over
``dp`` only): the built-in and most small checkpoints tie the input and output embeddings, and a
replicated head gives every TP rank the whole ``(B, R, V)`` logits the log-prob code reads.

Rows: the controller hands every rank its own chunk of a batch; `TensorParallelLayout.run` /
`scope` all-gather the chunks of the ``sp · tp`` ranks of a data-parallel rank (the TP group when
``sp == 1``) so they compute on the same rows (under SP each on its columns), reduce counts and
metrics over ``dp`` only and hand back each rank's own rows — the same protocol as
`verl.workers.sharding.ulysses.UlyssesLayout`, whose interface (``sp``, ``dp``, ``prepare``,
``scope``, ``gather``, ``local``, ``run``) this class offers, so the workers use either.

Gradient: the TP ranks of a group compute the same loss; the sharded parameters' gradients are
DTensors of their shards, the replicated ones are equal copies; under SP each SP rank's gradient is
that of its own columns (`verl.workers.sharding.ulysses`). FSDP2 averages over ``dp · sp`` and the
engine scales the loss by ``dp · sp`` (`shard_kwargs`): the SP ranks' gradients add up, the data-parallel
ranks' average.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from verl.config.errors import ConfigError
from verl.protocol import DataProto

__all__ = [
    "TP_ARCHITECTURES",
    "TensorParallelLayout",
    "build_layout",
    "build_rollout_layout",
    "check_tp_heads",
    "check_tp_sp_heads",
    "shard_kwargs",
    "tp_plan",
]

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
        raise ConfigError(
            f"{what}={tp}: no tensor-parallel plan for architecture {arch!r} "
            f"(plans exist for {', '.join(TP_ARCHITECTURES)})"
        )
    heads = config.num_attention_heads
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        value = getattr(config, key, None) or heads
        if value % tp:
            raise ConfigError(f"{what}={tp} does not divide the model's {key}={value}")


def check_tp_sp_heads(config: Any, tp: int, sp: int) -> None:
    """Refuse a model for the ``tp × sp`` layout: TP's own rules (`check_tp_heads`), then the heads each
    TP rank holds (``heads / tp``, ``kv_heads / tp``) not divisible by ``sp``.

    Raises:
        ConfigError: one line naming the numbers.
    """
    from verl.modules.ulysses import check_heads

    check_tp_heads(config, tp)
    check_heads(config, sp, tp=tp)


def _decoder_blocks(module: torch.nn.Module) -> list[torch.nn.Module]:
    from verl.engine.fsdp import _blocks

    return _blocks(module)


def apply_tensor_parallel(
    module: torch.nn.Module, tp_mesh: Any, tp: int, what: str = "tensor_parallel_size"
) -> torch.nn.Module:
    """Split every decoder block of ``module`` over ``tp_mesh`` in place (`tp_plan`; a LoRA layer's
    adapters are placed with its base layer, `verl.workers.sharding.tp_lora`).

    Raises:
        ConfigError: see `check_tp_heads` and `verl.workers.sharding.tp_lora.block_plan`.
    """
    from torch.distributed.tensor.parallel import parallelize_module

    from verl.workers.sharding.tp_lora import block_plan

    check_tp_heads(module.config, tp, what)
    blocks = _decoder_blocks(module)
    if not blocks:
        raise ConfigError(f"{what}={tp}: the model has no decoder blocks to split")
    for block in blocks:
        parallelize_module(block, tp_mesh, block_plan(block, tp_plan(), what))
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
    """This rank's place in the ``(dp, tp)`` or ``(dp, sp, tp)`` mesh.

    Attributes:
        tp: TP degree (> 1).
        dp: data-parallel size, ``world / (sp · tp)``.
        mesh: the `DeviceMesh` ``("dp", "tp")`` at ``sp == 1``, else ``("dp", "sp", "tp")`` with the
            flattened dims ``dp_sp`` (FSDP2's) and ``sp_tp`` (the ranks sharing rows).
        sp: Ulysses SP degree (1: whole sequences).
    """

    tp: int
    dp: int
    mesh: Any
    sp: int = 1
    what: str = "tensor_parallel_size"

    @classmethod
    def build(
        cls,
        tp: int,
        world_size: int,
        device: str = "cpu",
        what: str = "tensor_parallel_size",
        training: bool = True,
        sp: int = 1,
    ) -> TensorParallelLayout:
        """The layout of ``world_size`` ranks at TP degree ``tp`` and SP degree ``sp`` (a collective).

        Args:
            what: the key named in errors.
            training: the layout of a trained model (the ``sp · tp`` ranks of a data-parallel rank
                share one data shard, recorded in `verl.engine.dist`); False for the rollout's own layout.
            sp: Ulysses SP degree of the trained model (1 for the rollout).

        Raises:
            ConfigError: ``sp · tp`` does not divide ``world_size``.
        """
        from torch.distributed.device_mesh import init_device_mesh

        from verl.engine.dist import set_sequence_parallel_size
        from verl.workers.sharding.ulysses import data_parallel_size

        dp = data_parallel_size(world_size, sp * tp, what if sp == 1 else f"ulysses_sequence_parallel_size x {what}")
        if training:
            set_sequence_parallel_size(sp * tp)  # the ranks of a data-parallel rank share one data shard
        device_type = "cpu" if device == "cpu" else "cuda"
        if sp == 1:
            return cls(
                tp=tp, dp=dp, mesh=init_device_mesh(device_type, (dp, tp), mesh_dim_names=("dp", "tp")), what=what
            )
        mesh = init_device_mesh(device_type, (dp, sp, tp), mesh_dim_names=("dp", "sp", "tp"))
        # every rank creates the flattened groups, in the same order (new process groups are collective)
        mesh["dp", "sp"]._flatten("dp_sp")
        mesh["sp", "tp"]._flatten("sp_tp")
        return cls(tp=tp, dp=dp, mesh=mesh, sp=sp, what=what)

    @property
    def tp_group(self) -> Any:
        return self.mesh["tp"].get_group()

    @property
    def dp_group(self) -> Any:
        return self.mesh["dp"].get_group()

    @property
    def sp_group(self) -> Any:
        """The Ulysses group (the ranks of this data-parallel rank with this TP index); None at ``sp == 1``."""
        return self.mesh["sp"].get_group() if self.sp > 1 else None

    @property
    def rows_group(self) -> Any:
        """The ``sp · tp`` ranks that compute on the same rows (the TP group at ``sp == 1``)."""
        return self.mesh["sp_tp"].get_group() if self.sp > 1 else self.tp_group

    @property
    def fsdp_size(self) -> int:
        """Ranks FSDP2 shards over: ``dp · sp``."""
        return self.dp * self.sp

    @property
    def fsdp_mesh(self) -> Any:
        """The 1-D mesh FSDP2 shards over (``dp``, or the flattened ``dp_sp``); None when of size 1."""
        if self.fsdp_size == 1:
            return None
        return self.mesh["dp_sp"] if self.sp > 1 else self.mesh["dp"]

    def prepare(self, module: torch.nn.Module) -> None:
        """Split ``module``'s decoder blocks over the ``tp`` dim (`apply_tensor_parallel`); at ``sp > 1``
        switch its attention to the Ulysses function (`verl.modules.ulysses.enable_ulysses`).

        Raises:
            ConfigError: see `check_tp_heads`; at ``sp > 1`` `check_tp_sp_heads`.
        """
        if self.sp > 1:
            check_tp_sp_heads(module.config, self.tp, self.sp)  # before any block is split
        apply_tensor_parallel(module, self.mesh["tp"], self.tp, self.what)
        if self.sp > 1:
            from verl.modules.ulysses import enable_ulysses

            enable_ulysses(module, self.sp, tp=self.tp)

    def prepare_reference(self, module: torch.nn.Module) -> None:
        """Ulysses attention only (the reference policy stays whole, FSDP2 over the world): its forwards
        run split over the ``sp`` group like the actor's, with all heads.

        Raises:
            ConfigError: heads not divisible by ``sp`` (`verl.modules.ulysses.check_heads`).
        """
        if self.sp > 1:
            from verl.modules.ulysses import enable_ulysses

            enable_ulysses(module, self.sp)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Counts and metrics reduced over the ``dp`` dim inside the block; at ``sp > 1`` packed
        forwards split over the ``sp`` group (`verl.modules.ulysses.sequence_parallel`)."""
        from verl.engine.dist import reduce_over
        from verl.modules.ulysses import sequence_parallel

        with reduce_over(self.dp_group), sequence_parallel(self.sp_group):
            yield

    def gather(self, data: DataProto) -> DataProto:
        """The chunks of `rows_group` concatenated in rank order (this rank's ``meta_info``)."""
        return _gather_rows(data, self.rows_group, self.sp * self.tp)

    def local(self, out: DataProto) -> DataProto:
        """This rank's rows of a result computed on the gathered rows (`gather`), in order."""
        import torch.distributed as dist

        return out if out.batch is None else out.chunk(self.sp * self.tp)[dist.get_rank(self.rows_group)]

    def run(self, data: DataProto, method: Any, *args: Any) -> DataProto:
        """``local(method(gather(data), *args))`` inside `scope`."""
        with self.scope():
            return self.local(method(self.gather(data), *args))


def build_layout(sp: int, tp: int, world_size: int, device: str = "cpu") -> Any:
    """`TensorParallelLayout` at ``(sp, tp)`` when ``tp > 1``, else `UlyssesLayout` at ``sp`` (the identity at 1).

    Raises:
        ConfigError: ``sp · tp`` does not divide ``world_size``.
    """
    from verl.workers.sharding.ulysses import UlyssesLayout

    if tp > 1:
        return TensorParallelLayout.build(tp, world_size, device, sp=sp)
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
    """``build_engine`` keyword arguments of a layout: FSDP2 over the ``dp`` (``dp_sp`` with SP) dims
    under TP, the loss multiplier ``dp · sp``; the whole world otherwise (Ulysses: every rank shards)."""
    if isinstance(layout, TensorParallelLayout):
        return {"world_size": layout.fsdp_size, "mesh": layout.fsdp_mesh}
    return {"world_size": world_size}
