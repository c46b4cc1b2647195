"""`verl.utils.arrays.object_array`: one element per row, whatever the values are."""

from __future__ import annotations

import numpy as np

from verl.utils.arrays import object_array


def test_equal_length_lists_stay_elements_not_a_second_axis() -> None:
    out = object_array([[1, 2], [3, 4], [5, 6]])
    assert out.shape == (3,) and out.dtype == object
    assert out[1] == [3, 4] and isinstance(out[1], list)
    assert np.array([[1, 2], [3, 4], [5, 6]], dtype=object).shape == (3, 2)  # what np.array would do


def test_ragged_dicts_none_and_empty() -> None:
    out = object_array(({"a": 1}, [], None, "text"))
    assert out.shape == (4,) and out[0] == {"a": 1} and out[1] == [] and out[2] is None and out[3] == "text"
    assert object_array([]).shape == (0,)
    assert object_array([[] for _ in range(2)]).tolist() == [[], []]


def test_ndarray_is_returned_unchanged() -> None:
    ids = np.arange(4)
    assert object_array(ids) is ids and ids.dtype != object


def test_async_feed_state_round_trip_keeps_list_fields_as_one_element() -> None:
    """`rows_from_state` rebuilds each one-row object column with `object_array`."""
    import torch

    from verl.protocol import DataProto
    from verl.trainer.async_rl.feed import Row, rows_from_state, rows_to_state

    data = DataProto.from_single_dict(
        {
            "input_ids": torch.tensor([[5, 6]]),
            "tools": object_array([["calc", "search"]]),
            "ground_truth": object_array(["85"]),
        }
    )
    (back,) = rows_from_state(rows_to_state([Row("u0", data, torch.tensor([7, 8]), 2)]))
    assert back.data.non_tensor_batch["tools"].shape == (1,) and back.data.non_tensor_batch["tools"][0] == [
        "calc",
        "search",
    ]
    assert back.data.non_tensor_batch["ground_truth"].tolist() == ["85"] and back.epoch == 2
    assert torch.equal(back.data.batch["input_ids"], torch.tensor([[5, 6]]))
