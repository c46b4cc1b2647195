"""`object_array`: the per-row columns of `verl.protocol.DataProto.non_tensor_batch`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["object_array"]


def object_array(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """``values`` as a column with dim 0 = ``len(values)``: `(B,)` object array of arbitrary values.

    ``np.array`` would turn a list of equal-length lists into a `(B, k)` array (and fail on ragged
    ones); here every element is stored as it is, so a row's list stays one element.

    Args:
        values: one value per row (list, tuple, any sized sequence), or an ndarray.

    Returns:
        An ndarray unchanged (numeric columns such as ``index`` keep their dtype); any other
        sequence as a new 1-D ``dtype=object`` array of its elements.
    """
    if isinstance(values, np.ndarray):
        return values
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out
