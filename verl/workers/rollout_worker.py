"""`RolloutWorker`: the rollout engine alone, on its own worker group (``hybrid_engine=false``).

verl's standalone rollout: the engine does not share a process (or, on Ray, a device) with the
actor; it holds its own copy of the weights and is fed the actor's after every update
(`verl.trainer.ppo.split_rollout` drives the transfer; `verl.workers.weight_stream` sends it in the
buckets of `verl.workers.rollout.weight_sync`, the bucketer every engine shares).

Decisions:

* The model is built by the same factory from the actor's model config (``create_model("actor",
  ...)``, LoRA included), so tensor names match the actor's one to one. Its initial values do not
  matter: the first sync is a full one. It is built under ``torch.random.fork_rng`` so that a run
  with a separate rollout consumes the global RNG exactly as a colocated one (equal metrics).
* The engine is `build_rollout_engine` + `wrap_rollout_engine` (agent loops work as in the
  colocated worker). ``hf`` generates with this module; a bucket is copied into it in place. An
  engine that holds its own weights (``streams_weights``: vLLM) receives each bucket through its
  ``begin/load/finish_weight_update`` calls and this worker drops its module after the engine is
  built (``load_format=dummy``: only the config was needed), so a rollout rank holds one copy.
* Partial syncs: after the first full sync (and the one after a checkpoint load) the engine
  takes only the trainable parameters (LoRA: only the adapter; frozen base weights and buffers
  never change) — except vLLM without LoRA, which takes the full state on every sync (its
  layer-wise reload needs every weight of a layer). vLLM with LoRA gets the base weights on a full
  sync and, on every sync, the adapter as a new ``LoRARequest`` (the colocated adapter path,
  `verl.workers.rollout.vllm.vllm_weights.EngineWeightSync.begin_stream`).
* World size: any (``actor_rollout_ref.rollout.nnodes x n_gpus_per_node`` on Ray, default the
  actor's world size); each rank generates its data-parallel chunk with a full copy. On the local
  backend it is a second in-process worker with its own copy of the weights (tests and
  debugging: the same code path as Ray, minus the processes).
* ``hf`` with ``rollout.tensor_model_parallel_size`` = t > 1: the pool's ranks form groups of t
  (`verl.workers.sharding.tensor_parallel.build_rollout_layout`, the colocated engine's layout);
  the module's decoder blocks are split before the engine is built, so a rank holds ``1 / t`` of
  every block. A bucket's whole tensors are cut locally, each rank copying only its slice
  (`load_bucket_in_place`, no communication), so a rank holds at most one bucket of whole tensors
  beyond its slices (``peak_extra_bytes`` of `finish_weight_update`), never a whole unsharded
  model. The group decodes its ranks' prompts together (`TensorParallelLayout.run`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.workers.sync_attest_worker import RolloutAttestMixin
from verl.workers.rollout.weight_sync import load_bucket_in_place

if TYPE_CHECKING:
    from verl.config.schema import ActorRolloutRefConfig


class RolloutWorker(RolloutAttestMixin, Worker):
    """Rollout engine with its own weights, fed bucket by bucket (see the module docstring).

    Args:
        config: the ``actor_rollout_ref`` section (finalized: rollout lengths resolved).
        seed: seed of the (overwritten) weight init and of the engine's sampling generator.
        device: ``cpu`` or ``cuda`` (``trainer.device``).
    """

    def __init__(self, config: ActorRolloutRefConfig, seed: int = 1, device: str = "cpu") -> None:
        super().__init__(device)
        self.config, self.seed = config, seed
        self.module: torch.nn.Module | None = None
        self.engine: Any = None
        self.rollout: Any = None
        self.rollout_tp: Any = None  # hf TP layout (None at tensor_model_parallel_size=1)
        self.synced_once = False
        self.lora = config.model.lora_rank > 0
        self._update: dict[str, float] = {}
        self.policy_version = self._pending_version = 0  # actor updates the weights are synced to (sent with each sync)

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the model (random values until the first sync) and the rollout engine."""
        from verl.modules import create_model, load_tokenizer
        from verl.workers.rollout import build_rollout_engine
        from verl.workers.rollout.agent_loop import wrap_rollout_engine
        from verl.workers.sharding.tensor_parallel import build_rollout_layout

        cfg = self.config
        self.rollout_tp = build_rollout_layout(cfg.rollout, self.world_size, self.device)
        tokenizer = load_tokenizer(
            cfg.model.tokenizer_path or cfg.model.path, trust_remote_code=cfg.model.trust_remote_code
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            module = create_model("actor", cfg.model, device=self.device).requires_grad_(False)
            if self.rollout_tp is not None:
                self.rollout_tp.prepare(module)
            self.engine = build_rollout_engine(module, cfg.rollout, tokenizer)
        self.rollout = wrap_rollout_engine(self.engine, cfg.rollout, tokenizer)
        self.module = None if self.streams_weights() else module

    @register(Dispatch.RANK_ZERO)
    def streams_weights(self) -> bool:
        """True when the engine holds its own weights (vLLM): it takes buckets, not a module."""
        return bool(getattr(self.engine, "streams_weights", False))

    @register(Dispatch.RANK_ZERO)
    def full_syncs_only(self) -> bool:
        """True when every sync must be a full one: vLLM without LoRA (see the module docstring)."""
        return self.streams_weights() and not self.lora

    @register(Dispatch.ONE_TO_ALL)
    def begin_weight_update(self, policy_version: int = 0) -> None:
        """Start receiving one sync (full or trainable-only; the sender decides) of the actor after
        ``policy_version`` updates (reported back by the attestation, `sync_fingerprints`).

        An engine with partial rollouts (``hf``) is paused first: a generation in flight (another
        thread) parks at a decode-step boundary until `finish_weight_update` sets the engine's
        ``policy_version`` and resumes it (each trajectory then continues from its prefix)."""
        self._update = {
            "start": time.perf_counter(),
            "tensors": 0.0,
            "bytes": 0.0,
            "buckets": 0.0,
            "peak_extra_bytes": 0.0,
        }
        self._pending_version = int(policy_version)
        if callable(getattr(self.engine, "pause", None)):  # partial rollouts: generation in flight parks
            self.engine.pause()
        if self.module is None:
            self.engine.begin_weight_update()

    @register(Dispatch.ONE_TO_ALL)
    def load_weight_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> int:
        """Load one bucket of ``(actor state-dict name, full tensor)`` in place; returns its tensor count.

        Raises:
            KeyError: a name the rollout model does not have (hf engine).
        """
        if self.module is None:
            self.engine.load_weight_bucket(bucket)
        else:
            load_bucket_in_place(self.module, bucket)
        nbytes = float(sum(t.numel() * t.element_size() for _, t in bucket))
        self._update["tensors"] += len(bucket)
        self._update["bytes"] += nbytes
        self._update["buckets"] += 1
        # the bucket's whole tensors are this rank's only memory beyond its own weights during a sync
        self._update["peak_extra_bytes"] = max(self._update["peak_extra_bytes"], nbytes)
        return len(bucket)

    @register(Dispatch.ONE_TO_ALL)
    def finish_weight_update(self) -> dict[str, float]:
        """End the sync; returns what it moved (``buckets``, ``tensors``, ``bytes``, ``seconds``), the
        largest bucket this rank held (``peak_extra_bytes``) and the bytes of its own weights
        (``resident_bytes``: TP slices count their local part).

        Raises:
            RuntimeError: vLLM has parameters the sync did not cover.
        """
        if self.module is None:
            self.engine.finish_weight_update()
        self.synced_once = True
        self.policy_version = self._pending_version
        if callable(getattr(self.engine, "resume", None)):  # tokens sampled from now on carry the new version
            self.engine.set_policy_version(self.policy_version)
            self.engine.resume()
        stats = {k: v for k, v in self._update.items() if k != "start"}
        stats["seconds"] = time.perf_counter() - self._update["start"]
        stats["resident_bytes"] = float(_local_bytes(self.module)) if self.module is not None else 0.0
        return stats

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Responses for ``prompts`` (already repeated ``rollout.n`` times by the trainer).

        Raises:
            RuntimeError: before the first weight sync (the weights would be random).
        """
        if not self.synced_once:
            raise RuntimeError(
                "RolloutWorker.generate_sequences before the first weight sync: the rollout has no actor weights yet"
            )
        start = time.perf_counter()
        tp = self.rollout_tp  # hf TP: the group decodes its ranks' prompts together
        out = (
            tp.run(prompts, self.rollout.generate_sequences)
            if tp is not None
            else self.rollout.generate_sequences(prompts)
        )
        out.meta_info.setdefault("metrics", {})["timing_s/generate_sequences"] = time.perf_counter() - start
        return out

    @register(Dispatch.ONE_TO_ALL)
    def close(self) -> None:
        """Shut the engine down (vLLM: its engine core; an in-process one frees vLLM's per-process state)."""
        engine, self.engine = self.engine, None
        if engine is not None and hasattr(engine, "close"):
            engine.close()

    @register(Dispatch.RANK_ZERO)
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The hf engine's weights (tests compare them with the actor's); vLLM's stay in the engine.

        Raises:
            ValueError: the engine holds its own weights (vLLM), or TP slices of them.
        """
        if self.module is None:
            raise ValueError("the vLLM rollout keeps its weights inside the engine; compare log-probs instead")
        if self.rollout_tp is not None:  # rank 0 alone cannot gather the group's slices
            raise ValueError("the TP rollout holds slices of its weights; compare log-probs instead")
        return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}


def _local_bytes(module: torch.nn.Module) -> int:
    """Bytes of ``module``'s parameters and buffers held by this rank (a ``DTensor`` counts its local slice)."""
    tensors = list(module.parameters()) + list(module.buffers())
    return sum((t.to_local() if hasattr(t, "to_local") else t).numel() * t.element_size() for t in tensors)
