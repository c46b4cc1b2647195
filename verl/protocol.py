"""`DataProto`: the one batch container that crosses every boundary in verl.

A `DataProto` holds N samples (trajectories or prompts) in three parts:

- ``batch``: a :class:`tensordict.TensorDict` with ``batch_size=[N]``; every tensor has
  dim 0 = N.
- ``non_tensor_batch``: ``dict[str, np.ndarray]``, each array of length N (numpy object
  arrays for strings, dicts, chat messages...).
- ``meta_info``: a free-form ``dict`` shared by the whole batch (temperature, step,
  ``metrics``...).

The glossary of canonical keys (`CANONICAL_KEYS` for tensors, `CANONICAL_NON_TENSOR_KEYS`
for per-sample values; B sequences, P prompt length, R response length, T = P + R) is defined
once below and appended to this docstring, so ``help(verl.protocol)`` lists every key with
its shape and meaning.

`meta_info["metrics"]` is special: `DataProto.concat` merges the per-worker values into
``dict[str, list]`` so the controller can reduce them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.utils.arrays import object_array

__all__ = ["CANONICAL_KEYS", "CANONICAL_NON_TENSOR_KEYS", "DataProto", "DataProtoItem", "collate_fn"]

CANONICAL_KEYS: dict[str, str] = {
    "input_ids": "(B, T) int64 prompt + response token ids; prompt left-padded, response right-padded",
    "attention_mask": "(B, T) int64 1 on real tokens, 0 on padding",
    "position_ids": "(B, T) int64 cumsum(attention_mask) - 1 clipped at 0, correct under left padding",
    "prompts": "(B, P) int64 prompt token ids, left-padded",
    "responses": "(B, R) int64 response token ids, right-padded",
    "response_mask": "(B, R) int64 1 on response tokens that count in losses and metrics",
    "rollout_log_probs": "(B, R) float32 log-probs of the sampled tokens reported by the rollout engine",
    "old_log_probs": "(B, R) float32 log-probs of the actor before this update (behaviour policy)",
    "ref_log_prob": "(B, R) float32 log-probs of the reference policy",
    "values": "(B, R) float32 critic value estimates V(s_t)",
    "rm_scores": "(B, R) float32 reward-model score, placed on the last valid response token",
    "token_level_scores": "(B, R) float32 task score per token, before the KL penalty",
    "token_level_rewards": "(B, R) float32 token_level_scores minus the in-reward KL penalty",
    "advantages": "(B, R) float32 advantage estimates",
    "returns": "(B, R) float32 value-function targets",
    "entropys": "(B, R) float32 per-token entropy of the policy distribution",
}

CANONICAL_NON_TENSOR_KEYS: dict[str, str] = {
    "uid": "(B,) str id of the prompt; samples of the same prompt share it (GRPO/RLOO groups)",
    "data_source": "(B,) str dataset name, selects the reward scorer",
    "reward_model": "(B,) dict with 'ground_truth' and 'style' ('rule' or 'model')",
    "extra_info": "(B,) dict of free-form per-sample information (split, index, ...)",
    "raw_prompt": "(B,) list[dict] chat messages before the chat template",
    "index": "(B,) int position of the sample in its source dataset",
}

if __doc__ is not None:  # python -OO strips docstrings
    __doc__ += "\nGlossary:\n" + "\n".join(
        f"    {key:<20} {meaning}" for key, meaning in {**CANONICAL_KEYS, **CANONICAL_NON_TENSOR_KEYS}.items()
    )

Index = slice | Sequence[int] | np.ndarray | torch.Tensor


def _values_equal(a: Any, b: Any) -> bool:
    """Deep equality that also handles tensors, arrays and containers of them."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if a.dtype != object and b.dtype != object:
            return bool(np.array_equal(a, b))
        return all(_values_equal(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_values_equal, a, b))
    return bool(a == b)


def _as_list(keys: str | Sequence[str] | None) -> list[str]:
    if keys is None:
        return []
    return [keys] if isinstance(keys, str) else list(keys)


@dataclass
class DataProtoItem:
    """One row of a `DataProto` (verl's ``DataProtoItem``): what ``data[i]`` returns.

    Attributes:
        batch: ``TensorDict`` with ``batch_size=[]``: each tensor is the row's slice, e.g.
            ``item.batch["responses"]`` is `(R,)`.
        non_tensor_batch: ``{key: value}`` of the row (``item.non_tensor_batch["reward_model"]
            ["ground_truth"]``).
        meta_info: the batch's meta_info (shared, not copied).
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.non_tensor_batch = {} if self.non_tensor_batch is None else self.non_tensor_batch
        self.meta_info = {} if self.meta_info is None else self.meta_info


@dataclass(eq=False)
class DataProto:
    """A batch of N samples: tensors, per-sample non-tensors and batch-level meta info.

    Attributes:
        batch: TensorDict with ``batch_size=[N]`` (or None when there are no tensors).
        non_tensor_batch: per-sample values, each an ``np.ndarray`` of length N (None is
            taken as ``{}``, as in verl).
        meta_info: batch-level information; ``meta_info["metrics"]`` is merged by `concat`
            (None is taken as ``{}``).

    Indexing with a slice, an index list/array/tensor or a boolean mask returns a new
    DataProto. Indexing with an int raises TypeError: use ``data[i:i + 1]`` for a one-row
    DataProto, or ``data.batch[i]`` / ``data.non_tensor_batch[key][i]`` for values.
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # verl accepts None for the optional dicts (``DataProto(batch=td, non_tensor_batch=None)``)
        self.non_tensor_batch = {k: object_array(v) for k, v in (self.non_tensor_batch or {}).items()}
        if self.meta_info is None:
            self.meta_info = {}
        self.check_consistency()

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Sequence[Any] | np.ndarray] | None = None,
        meta_info: dict[str, Any] | None = None,
    ) -> DataProto:
        """Build a DataProto; every tensor and non-tensor must have the same length N.

        Raises:
            ValueError: naming the first key whose length differs from the others.
        """
        tensors, non_tensors = tensors or {}, non_tensors or {}
        lengths = {k: int(v.shape[0]) if v.dim() > 0 else -1 for k, v in tensors.items()}
        lengths.update({k: len(v) for k, v in non_tensors.items()})
        if lengths:
            first_key = next(iter(lengths))
            n = lengths[first_key]
            for key, length in lengths.items():
                if length != n:
                    raise ValueError(
                        f"DataProto.from_dict: key {key!r} has length {length}, "
                        f"but {first_key!r} has length {n}; all entries must share dim 0"
                    )
        batch = TensorDict(dict(tensors), batch_size=[n]) if tensors else None
        return cls(batch=batch, non_tensor_batch=dict(non_tensors), meta_info=dict(meta_info or {}))

    @classmethod
    def from_single_dict(cls, data: dict[str, Any], meta_info: dict[str, Any] | None = None) -> DataProto:
        """Build a DataProto from one dict: tensors go to ``batch``, the rest to ``non_tensor_batch``."""
        tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
        others = {k: v for k, v in data.items() if not isinstance(v, torch.Tensor)}
        return cls.from_dict(tensors, others, meta_info)

    def check_consistency(self) -> None:
        """Raise ValueError if the batch is not 1-D or a non-tensor's length differs from it."""
        n = None
        if self.batch is not None:
            if len(self.batch.batch_size) != 1:
                raise ValueError(f"DataProto.batch must have a 1-D batch_size, got {list(self.batch.batch_size)}")
            n = int(self.batch.batch_size[0])
        for key, arr in self.non_tensor_batch.items():
            if not isinstance(arr, np.ndarray) or arr.ndim == 0:
                raise ValueError(f"non_tensor_batch[{key!r}] must be an np.ndarray with dim 0 = batch size")
            if n is None:
                n = len(arr)
            elif len(arr) != n:
                raise ValueError(f"non_tensor_batch[{key!r}] has length {len(arr)}, expected {n}")

    # ----------------------------------------------------------------- basics
    def __len__(self) -> int:
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        if self.non_tensor_batch:
            return len(next(iter(self.non_tensor_batch.values())))
        return 0

    def __repr__(self) -> str:
        tensors = {} if self.batch is None else {k: tuple(v.shape) for k, v in self.batch.items()}
        return (
            f"DataProto(len={len(self)}, batch={tensors}, "
            f"non_tensor_batch={sorted(self.non_tensor_batch)}, meta_info={sorted(self.meta_info)})"
        )

    def __getitem__(self, item: int | Index) -> DataProto | DataProtoItem:
        """``data[i]`` -> one row as a `DataProtoItem` (verl's reward managers index rows this
        way); a slice, index list/array/tensor or boolean mask -> a `DataProto` of those rows."""
        if isinstance(item, (int, np.integer)) or (isinstance(item, torch.Tensor) and item.dim() == 0):
            return self._item(int(item))
        if isinstance(item, slice):
            return self._take(item)
        idx = torch.as_tensor(np.asarray(item) if not isinstance(item, torch.Tensor) else item)
        if idx.dtype == torch.bool:
            if idx.shape != (len(self),):
                raise IndexError(f"boolean mask of shape {tuple(idx.shape)} for a DataProto of length {len(self)}")
            idx = idx.nonzero().flatten()
        return self._take(idx.long())

    def _item(self, i: int) -> DataProtoItem:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for a DataProto of length {n}")
        i %= n
        return DataProtoItem(
            batch=None if self.batch is None else self.batch[i],
            non_tensor_batch={k: v[i] for k, v in self.non_tensor_batch.items()},
            meta_info=self.meta_info,
        )

    def __iter__(self):
        """Rows as `DataProtoItem` (``for item in data``)."""
        return (self._item(i) for i in range(len(self)))

    def _take(self, idx: slice | torch.Tensor) -> DataProto:
        """Rows ``idx`` (slice or int64 index tensor); meta_info is shallow-copied."""
        np_idx = idx if isinstance(idx, slice) else idx.cpu().numpy()
        return DataProto(
            batch=None if self.batch is None else self.batch[idx],
            non_tensor_batch={k: v[np_idx] for k, v in self.non_tensor_batch.items()},
            meta_info=dict(self.meta_info),
        )

    def to(self, device: str | torch.device) -> DataProto:
        """Move the tensors to ``device`` in place and return self."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    # ----------------------------------------------------------------- keys
    def select(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """Return a DataProto with only the given keys (None keeps all of that part).

        Tensors and arrays are shared with self unless ``deepcopy`` is True.
        """
        batch = self.batch
        if batch is None and batch_keys:
            raise KeyError(f"cannot select {list(batch_keys)}: DataProto has no tensors")
        if batch is not None and batch_keys is not None:
            batch = batch.select(*batch_keys)
        elif batch is not None:
            batch = batch.select(*batch.keys())
        ntb = dict(self.non_tensor_batch)
        if non_tensor_batch_keys is not None:
            ntb = {k: self.non_tensor_batch[k] for k in non_tensor_batch_keys}
        meta = dict(self.meta_info)
        if meta_info_keys is not None:
            meta = {k: self.meta_info[k] for k in meta_info_keys}
        out = DataProto(batch=batch, non_tensor_batch=ntb, meta_info=meta)
        return copy.deepcopy(out) if deepcopy else out

    def pop(
        self,
        batch_keys: Sequence[str] = (),
        non_tensor_batch_keys: Sequence[str] = (),
        meta_info_keys: Sequence[str] = (),
    ) -> DataProto:
        """Remove the given keys from self and return them as a new DataProto."""
        batch = None
        if batch_keys:
            if self.batch is None:
                raise KeyError(f"cannot pop {list(batch_keys)}: DataProto has no tensors")
            batch = TensorDict({k: self.batch.pop(k) for k in batch_keys}, batch_size=self.batch.batch_size)
        ntb = {k: self.non_tensor_batch.pop(k) for k in non_tensor_batch_keys}
        meta = {k: self.meta_info.pop(k) for k in meta_info_keys}
        return DataProto(batch=batch, non_tensor_batch=ntb, meta_info=meta)

    def rename(self, old_keys: str | Sequence[str], new_keys: str | Sequence[str]) -> DataProto:
        """Rename tensor keys in place and return self."""
        old, new = _as_list(old_keys), _as_list(new_keys)
        if len(old) != len(new):
            raise ValueError(f"rename needs as many new keys as old keys, got {old} -> {new}")
        if old and self.batch is None:
            raise KeyError(f"cannot rename {old}: DataProto has no tensors")
        for o, n in zip(old, new, strict=True):
            self.batch.rename_key_(o, n)
        return self

    def union(self, other: DataProto) -> DataProto:
        """Add the keys of ``other`` to self (in place) and return self.

        Raises:
            ValueError: if lengths differ (a fresh ``DataProto()`` takes other's length), or a
                key present in both holds different values.
        """
        is_empty = self.batch is None and not self.non_tensor_batch
        if not is_empty and len(self) != len(other):
            raise ValueError(f"union of DataProtos with different lengths: {len(self)} vs {len(other)}")
        if other.batch is not None:
            if self.batch is None:
                self.batch = TensorDict({}, batch_size=[len(other)])
            for key, value in other.batch.items():
                if key in self.batch.keys() and not torch.equal(self.batch[key], value):
                    raise ValueError(f"union conflict on tensor key {key!r}: the values differ")
                self.batch[key] = value
        for key, arr in other.non_tensor_batch.items():
            if key in self.non_tensor_batch and not _values_equal(self.non_tensor_batch[key], arr):
                raise ValueError(f"union conflict on non-tensor key {key!r}: the values differ")
            self.non_tensor_batch[key] = arr
        for key, value in other.meta_info.items():
            if key in self.meta_info and not _values_equal(self.meta_info[key], value):
                raise ValueError(f"union conflict on meta_info key {key!r}: the values differ")
            self.meta_info[key] = value
        return self

    # ----------------------------------------------------------------- splitting
    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into ``chunks`` equal parts (e.g. one per data-parallel rank).

        Raises:
            ValueError: if ``len(self)`` is not divisible by ``chunks``; call
                `pad_to_divisor` first and `unpad` the collected result.
        """
        if chunks <= 0 or len(self) % chunks != 0:
            raise ValueError(
                f"cannot chunk a DataProto of length {len(self)} into {chunks} equal parts; "
                f"use data.pad_to_divisor({chunks}) first and unpad the result"
            )
        return self.split(len(self) // chunks)

    def split(self, split_size: int) -> list[DataProto]:
        """Split into consecutive parts of ``split_size`` rows (the last may be smaller)."""
        if split_size <= 0:
            raise ValueError(f"split_size must be positive, got {split_size}")
        return [self[i : i + split_size] for i in range(0, len(self), split_size)]

    @staticmethod
    def concat(data: Sequence[DataProto]) -> DataProto:
        """Concatenate along dim 0 and merge ``meta_info``.

        A meta_info key is kept when every part holding it has an equal value (ValueError
        otherwise). ``meta_info["metrics"]`` (a dict, or a list of dicts as verl's workers
        return) becomes ``dict[str, list]``: each part's values (scalars or lists) appended in
        order, ready for the controller to reduce.
        """
        if not data:
            raise ValueError("DataProto.concat needs at least one DataProto")
        has_batch = {d.batch is not None for d in data}
        if len(has_batch) != 1:
            raise ValueError("DataProto.concat: some parts have tensors and some do not")
        batch = torch.cat([d.batch for d in data], dim=0) if data[0].batch is not None else None
        keys = set(data[0].non_tensor_batch)
        for d in data[1:]:
            if set(d.non_tensor_batch) != keys:
                raise ValueError(
                    f"DataProto.concat: non-tensor keys differ: {sorted(keys)} vs {sorted(d.non_tensor_batch)}"
                )
        ntb = {k: np.concatenate([d.non_tensor_batch[k] for d in data]) for k in data[0].non_tensor_batch}
        return DataProto(batch=batch, non_tensor_batch=ntb, meta_info=_merge_meta_info([d.meta_info for d in data]))

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every sample: interleave gives [a, a, b, b], otherwise [a, b, a, b]."""
        n = len(self)
        if interleave:
            idx = torch.arange(n).repeat_interleave(repeat_times)
        else:
            idx = torch.arange(n).repeat(repeat_times)
        return self._take(idx)

    def reorder(self, indices: torch.Tensor) -> None:
        """Permute rows in place: row i becomes old row ``indices[i]``."""
        reordered = self[indices]
        self.batch, self.non_tensor_batch = reordered.batch, reordered.non_tensor_batch

    def pad_to_divisor(self, divisor: int) -> tuple[DataProto, int]:
        """Pad by repeating rows from the start (cyclically) until len % divisor == 0.

        Returns:
            (padded DataProto, pad_size); `unpad(pad_size)` undoes it on any result that
            keeps the row order.
        """
        if divisor <= 0:
            raise ValueError(f"divisor must be positive, got {divisor}")
        n = len(self)
        pad_size = (-n) % divisor
        if pad_size and n == 0:
            raise ValueError("cannot pad an empty DataProto")
        idx = torch.cat([torch.arange(n), torch.arange(pad_size) % max(n, 1)])
        return self._take(idx), pad_size

    def unpad(self, pad_size: int) -> DataProto:
        """Drop the last ``pad_size`` rows added by `pad_to_divisor`."""
        if pad_size < 0 or pad_size > len(self):
            raise ValueError(f"pad_size {pad_size} out of range for length {len(self)}")
        return self[: len(self) - pad_size]


def _merge_meta_info(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge per-part meta_info dicts (see `DataProto.concat`)."""
    merged: dict[str, Any] = {}
    metrics: dict[str, list[Any]] = {}
    has_metrics = False
    for meta in metas:
        for key, value in meta.items():
            if key == "metrics":
                has_metrics = True
                # a worker reports a dict of values, or (verl's workers) a list of such dicts
                for part in value if isinstance(value, list) else [value]:
                    for name, val in part.items():
                        bucket = metrics.setdefault(name, [])
                        if isinstance(val, list):
                            bucket.extend(val)
                        else:
                            bucket.append(val)
            elif key in merged and not _values_equal(merged[key], value):
                raise ValueError(
                    f"DataProto.concat: meta_info[{key!r}] differs between parts; "
                    "put per-worker values under meta_info['metrics']"
                )
            else:
                merged[key] = value
    if has_metrics:
        merged["metrics"] = metrics
    return merged


def collate_fn(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Collate dataset rows: tensors are stacked, everything else becomes an object array.

    Args:
        rows: samples with the same keys; tensor values must have equal shapes.

    Returns:
        dict of ``(B, ...)`` tensors and ``(B,)`` numpy object arrays, ready for
        `DataProto.from_single_dict`.
    """
    if not rows:
        raise ValueError("collate_fn got no rows")
    keys = list(rows[0])
    for i, row in enumerate(rows):
        if list(row) != keys and set(row) != set(keys):
            raise ValueError(f"collate_fn: row {i} has keys {sorted(row)}, row 0 has {sorted(keys)}")
    out: dict[str, Any] = {}
    for key in keys:
        values = [row[key] for row in rows]
        if isinstance(values[0], torch.Tensor):
            out[key] = torch.stack(values)
        else:
            out[key] = object_array(values)
    return out
