"""DataProto: construction, indexing, key operations, splitting and merging round trips."""

from __future__ import annotations

import copy
import pickle
import re

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import verl.protocol as protocol
from verl.protocol import CANONICAL_KEYS, CANONICAL_NON_TENSOR_KEYS, DataProto, collate_fn


def make(n: int = 4) -> DataProto:
    """Rows are recognisable: row i has input_ids [i, 10 + i], uid f"u{i}", a dict reward_model."""
    return DataProto.from_dict(
        tensors={
            "input_ids": torch.stack([torch.arange(n), 10 + torch.arange(n)], dim=1),
            "values": torch.arange(n, dtype=torch.float32) / 2,
        },
        non_tensors={
            "uid": [f"u{i}" for i in range(n)],
            "reward_model": [{"ground_truth": str(i)} for i in range(n)],
        },
        meta_info={"temperature": 1.0},
    )


def assert_same(a: DataProto, b: DataProto) -> None:
    assert (a.batch is None) == (b.batch is None)
    if a.batch is not None:
        assert sorted(a.batch.keys()) == sorted(b.batch.keys())
        for k in a.batch.keys():
            assert torch.equal(a.batch[k], b.batch[k]), k
    assert sorted(a.non_tensor_batch) == sorted(b.non_tensor_batch)
    for k, v in a.non_tensor_batch.items():
        assert list(v) == list(b.non_tensor_batch[k]), k
    assert a.meta_info == b.meta_info


def uids(d: DataProto) -> list[str]:
    return list(d.non_tensor_batch["uid"])


# ------------------------------------------------------------------------ construction
def test_from_dict_fields_and_len():
    d = make(3)
    assert len(d) == 3
    assert isinstance(d.batch, TensorDict) and list(d.batch.batch_size) == [3]
    assert d.non_tensor_batch["uid"].dtype == object
    assert d.batch["input_ids"].tolist() == [[0, 10], [1, 11], [2, 12]]
    assert d.meta_info == {"temperature": 1.0}


def test_from_dict_length_mismatch_names_key():
    with pytest.raises(ValueError, match="'mask' has length 2"):
        DataProto.from_dict({"ids": torch.zeros(3, 2), "mask": torch.zeros(2, 2)})
    with pytest.raises(ValueError, match="'uid' has length 4"):
        DataProto.from_dict({"ids": torch.zeros(3, 2)}, {"uid": ["a", "b", "c", "d"]})


def test_equal_length_lists_stay_one_dimensional():
    d = DataProto.from_dict(non_tensors={"raw_prompt": [[1, 2], [3, 4], [5, 6]]})
    assert d.non_tensor_batch["raw_prompt"].shape == (3,)
    assert d.non_tensor_batch["raw_prompt"][1] == [3, 4]
    assert len(d) == 3 and d.batch is None


def test_from_single_dict_splits_tensors():
    d = DataProto.from_single_dict({"x": torch.ones(2, 3), "uid": ["a", "b"]}, meta_info={"k": 1})
    assert list(d.batch.keys()) == ["x"]
    assert list(d.non_tensor_batch) == ["uid"] and d.meta_info == {"k": 1}


def test_check_consistency_rejects_bad_non_tensor():
    with pytest.raises(ValueError, match=re.escape("non_tensor_batch['uid'] has length 2, expected 3")):
        DataProto(batch=TensorDict({"x": torch.zeros(3)}, batch_size=[3]), non_tensor_batch={"uid": ["a", "b"]})


def test_canonical_keys_glossary():
    expected = (
        "input_ids attention_mask position_ids prompts responses response_mask rollout_log_probs old_log_probs "
        "ref_log_prob values rm_scores token_level_scores token_level_rewards advantages returns entropys"
    ).split()
    assert list(CANONICAL_KEYS) == expected
    assert CANONICAL_KEYS["responses"].startswith("(B, R) int64")
    assert set(CANONICAL_NON_TENSOR_KEYS) == {"uid", "data_source", "reward_model", "extra_info", "raw_prompt", "index"}
    for key in [*CANONICAL_KEYS, *CANONICAL_NON_TENSOR_KEYS]:
        assert f"    {key} " in protocol.__doc__


# ------------------------------------------------------------------------ indexing
def test_getitem_slice_list_tensor_and_mask():
    d = make(4)
    assert uids(d[1:3]) == ["u1", "u2"]
    assert d[[3, 0]].batch["input_ids"].tolist() == [[3, 13], [0, 10]]
    assert uids(d[np.array([2, 2])]) == ["u2", "u2"]
    assert uids(d[torch.tensor([1, 3])]) == ["u1", "u3"]
    masked = d[torch.tensor([True, False, False, True])]
    assert uids(masked) == ["u0", "u3"] and masked.batch["values"].tolist() == [0.0, 1.5]
    assert uids(d[np.array([False, True, True, False])]) == ["u1", "u2"]
    assert d[1:3].meta_info == {"temperature": 1.0}


def test_getitem_int_gives_a_verl_data_proto_item():
    d = make(3)
    item = d[1]
    assert item.batch["input_ids"].tolist() == d.batch["input_ids"][1].tolist()
    assert item.non_tensor_batch["uid"] == "u1" and item.meta_info is d.meta_info
    assert d[-1].non_tensor_batch["uid"] == "u2" and d[np.int64(0)].non_tensor_batch["uid"] == "u0"
    assert [it.non_tensor_batch["uid"] for it in d] == ["u0", "u1", "u2"]
    with pytest.raises(IndexError, match="out of range"):
        d[3]
    with pytest.raises(IndexError, match="boolean mask"):
        make(2)[torch.tensor([True])]


def test_pickle_and_deepcopy_round_trip():
    d = make(3)
    assert_same(pickle.loads(pickle.dumps(d)), d)
    c = copy.deepcopy(d)
    assert_same(c, d)
    c.batch["values"][0] = 99.0
    c.non_tensor_batch["reward_model"][0]["ground_truth"] = "x"
    assert d.batch["values"][0] == 0.0 and d.non_tensor_batch["reward_model"][0] == {"ground_truth": "0"}


def test_to_device_and_repr():
    d = make(2).to("cpu")
    assert d.batch["input_ids"].device.type == "cpu"
    assert repr(d) == (
        "DataProto(len=2, batch={'input_ids': (2, 2), 'values': (2,)}, "
        "non_tensor_batch=['reward_model', 'uid'], meta_info=['temperature'])"
    )


# ------------------------------------------------------------------------ keys
def test_select_shares_or_copies():
    d = make(2)
    s = d.select(batch_keys=["values"], non_tensor_batch_keys=["uid"], meta_info_keys=[])
    assert list(s.batch.keys()) == ["values"] and list(s.non_tensor_batch) == ["uid"] and s.meta_info == {}
    s.batch["values"][0] = 5.0
    assert d.batch["values"][0] == 5.0  # shared storage
    c = d.select(batch_keys=["values"], deepcopy=True)
    c.batch["values"][0] = -1.0
    assert d.batch["values"][0] == 5.0
    full = d.select()
    assert sorted(full.batch.keys()) == ["input_ids", "values"]
    assert sorted(full.non_tensor_batch) == ["reward_model", "uid"]


def test_pop_removes_from_self():
    d = make(2)
    p = d.pop(batch_keys=["values"], non_tensor_batch_keys=["uid"], meta_info_keys=["temperature"])
    assert p.batch["values"].tolist() == [0.0, 0.5] and uids(p) == ["u0", "u1"]
    assert p.meta_info == {"temperature": 1.0}
    assert list(d.batch.keys()) == ["input_ids"] and list(d.non_tensor_batch) == ["reward_model"]
    assert d.meta_info == {} and len(d) == 2


def test_rename():
    d = make(2).rename("values", "old_log_probs")
    assert sorted(d.batch.keys()) == ["input_ids", "old_log_probs"]
    d.rename(["input_ids", "old_log_probs"], ["responses", "ref_log_prob"])
    assert sorted(d.batch.keys()) == ["ref_log_prob", "responses"]
    with pytest.raises(ValueError, match="as many new keys"):
        d.rename(["responses"], ["a", "b"])


def test_union_merges_and_returns_self():
    d = make(2)
    other = DataProto.from_dict(
        {"values": d.batch["values"].clone(), "advantages": torch.tensor([1.0, -1.0])},
        {"uid": ["u0", "u1"], "data_source": ["gsm8k", "math"]},
        {"temperature": 1.0, "step": 3},
    )
    out = d.union(other)
    assert out is d
    assert d.batch["advantages"].tolist() == [1.0, -1.0]
    assert list(d.non_tensor_batch["data_source"]) == ["gsm8k", "math"]
    assert d.meta_info == {"temperature": 1.0, "step": 3}


@pytest.mark.parametrize(
    ("other", "key"),
    [
        (DataProto.from_dict({"values": torch.tensor([0.0, 0.7])}), "'values'"),
        (
            DataProto.from_dict(non_tensors={"reward_model": [{"ground_truth": "0"}, {"ground_truth": "9"}]}),
            "'reward_model'",
        ),
        (DataProto.from_dict(non_tensors={"uid": ["u0", "u1"]}, meta_info={"temperature": 0.5}), "'temperature'"),
    ],
)
def test_union_conflict_names_key(other: DataProto, key: str):
    with pytest.raises(ValueError, match=f"union conflict on .*{key}"):
        make(2).union(other)


def test_union_length_mismatch_and_empty_start():
    with pytest.raises(ValueError, match="different lengths: 2 vs 3"):
        make(2).union(make(3))
    assert_same(DataProto().union(make(3)), make(3))
    with pytest.raises(KeyError, match="no tensors"):
        DataProto.from_dict(non_tensors={"uid": ["a"]}).select(batch_keys=["values"])


# ------------------------------------------------------------------------ splitting
def test_chunk_concat_round_trip():
    d = make(6)
    parts = d.chunk(3)
    assert [uids(p) for p in parts] == [["u0", "u1"], ["u2", "u3"], ["u4", "u5"]]
    assert_same(DataProto.concat(parts), d)


def test_chunk_not_divisible_points_to_padding():
    with pytest.raises(ValueError, match=r"length 5 into 2 .*pad_to_divisor\(2\)"):
        make(5).chunk(2)


def test_split_concat_round_trip_last_smaller():
    d = make(5)
    parts = d.split(2)
    assert [len(p) for p in parts] == [2, 2, 1]
    assert uids(parts[2]) == ["u4"] and parts[2].batch["input_ids"].tolist() == [[4, 14]]
    assert_same(DataProto.concat(parts), d)


def test_concat_merges_metrics_per_worker():
    a, b = make(2), make(2)[[1, 0]]
    a.meta_info["metrics"] = {"actor/loss": 0.5, "actor/grad_norm": [1.0, 2.0]}
    b.meta_info["metrics"] = {"actor/loss": 0.25, "actor/grad_norm": [3.0]}
    out = DataProto.concat([a, b])
    assert out.meta_info == {
        "temperature": 1.0,
        "metrics": {"actor/loss": [0.5, 0.25], "actor/grad_norm": [1.0, 2.0, 3.0]},
    }
    assert uids(out) == ["u0", "u1", "u1", "u0"]


def test_concat_meta_conflict_and_key_mismatch():
    a, b = make(2), make(2)
    b.meta_info["temperature"] = 0.7
    with pytest.raises(ValueError, match=re.escape("meta_info['temperature'] differs")):
        DataProto.concat([a, b])
    c = make(2)
    c.non_tensor_batch.pop("uid")
    with pytest.raises(ValueError, match="non-tensor keys differ"):
        DataProto.concat([make(2), c])
    with pytest.raises(ValueError, match="at least one"):
        DataProto.concat([])


def test_repeat_interleave_and_tile_orders():
    d = make(2)
    inter = d.repeat(3, interleave=True)
    assert uids(inter) == ["u0", "u0", "u0", "u1", "u1", "u1"]
    assert inter.batch["input_ids"][:, 0].tolist() == [0, 0, 0, 1, 1, 1]
    tiled = d.repeat(2, interleave=False)
    assert uids(tiled) == ["u0", "u1", "u0", "u1"]
    assert tiled.batch["values"].tolist() == [0.0, 0.5, 0.0, 0.5]
    assert [r["ground_truth"] for r in tiled.non_tensor_batch["reward_model"]] == ["0", "1", "0", "1"]


def test_reorder_in_place():
    d = make(3)
    assert d.reorder(torch.tensor([2, 0, 1])) is None
    assert uids(d) == ["u2", "u0", "u1"]
    assert d.batch["input_ids"][:, 1].tolist() == [12, 10, 11]


def test_pad_to_divisor_cyclic_and_unpad():
    d = make(3)
    padded, pad = d.pad_to_divisor(4)
    assert pad == 1 and uids(padded) == ["u0", "u1", "u2", "u0"]
    assert_same(padded.unpad(pad), d)
    padded8, pad8 = make(2).pad_to_divisor(8)  # more padding than rows: cycles through them
    assert pad8 == 6 and uids(padded8) == ["u0", "u1"] * 4
    same, zero = d.pad_to_divisor(3)
    assert zero == 0
    assert_same(same, d)


def test_pad_chunk_concat_unpad_pipeline():
    d = make(5)
    padded, pad = d.pad_to_divisor(2)
    restored = DataProto.concat(padded.chunk(2)).unpad(pad)
    assert_same(restored, d)


# ------------------------------------------------------------------------ collate
def test_collate_fn_stacks_tensors_and_objects():
    rows = [
        {"input_ids": torch.tensor([1, 2]), "uid": "a", "extra_info": {"index": 0}},
        {"input_ids": torch.tensor([3, 4]), "uid": "b", "extra_info": {"index": 1}},
    ]
    out = collate_fn(rows)
    assert out["input_ids"].tolist() == [[1, 2], [3, 4]]
    assert out["uid"].dtype == object and list(out["uid"]) == ["a", "b"]
    d = DataProto.from_single_dict(out)
    assert d.non_tensor_batch["extra_info"][1] == {"index": 1} and len(d) == 2
    with pytest.raises(ValueError, match="row 1 has keys"):
        collate_fn([{"a": 1}, {"b": 2}])


def test_concat_merges_verl_style_metric_lists_of_dicts():
    a, b = make(2), make(2)
    a.meta_info["metrics"] = [{"actor/pg_loss": 1.0}, {"actor/pg_loss": 3.0, "actor/lr": 0.1}]
    b.meta_info["metrics"] = {"actor/pg_loss": 5.0, "actor/lr": 0.1}
    merged = DataProto.concat([a, b])
    assert merged.meta_info["metrics"] == {"actor/pg_loss": [1.0, 3.0, 5.0], "actor/lr": [0.1, 0.1]}


def test_from_verl_import_data_proto():
    from verl import DataProto as Exported

    assert Exported is DataProto


def test_none_optional_dicts_are_empty():
    td = TensorDict({"x": torch.arange(3)}, batch_size=[3])
    d = DataProto(batch=td, non_tensor_batch=None, meta_info=None)
    assert len(d) == 3 and d.non_tensor_batch == {} and d.meta_info == {}
    assert len(d[0:2]) == 2 and len(DataProto.concat([d, d])) == 6
    assert len(DataProto(non_tensor_batch=None)) == 0
    item = protocol.DataProtoItem(batch=None, non_tensor_batch=None, meta_info=None)
    assert item.non_tensor_batch == {} and item.meta_info == {}
