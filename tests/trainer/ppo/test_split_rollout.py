"""``actor_rollout_ref.hybrid_engine=false``: the rollout on its own worker group (local backend).

The separate rollout must generate with exactly the trained weights: a run with it gives the
same metrics as the colocated engine (which generates with the actor module itself), its
weights equal the actor's bit for bit after every sync, and bucket size never changes results.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.trainer import RLTrainer

# wall-clock and memory readings differ between any two runs; everything else must be equal
_VOLATILE = ("timing_s/", "timing_per_token_ms/", "perf/", "weight_sync/", "sync/")  # sync/: attestation (split only)


def builtin_overrides(run_dir: Path, **extra: object) -> list[str]:
    """3 GRPO steps of the built-in task and model (the schema defaults), small enough for a test."""
    base = {
        "data.train_batch_size": 8,
        "actor_rollout_ref.rollout.n": 4,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "data.max_prompt_length": 16,
        "data.max_response_length": 8,
        "actor_rollout_ref.actor.optim.lr": 5e-5,
        "algorithm.adv_estimator": "grpo",
        "data.val_max_samples": 16,
        "trainer.test_freq": 3,
        "trainer.total_training_steps": 3,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.progress_bar": False,
        "trainer.plot": False,
        "trainer.output_dir": str(run_dir / "out"),
        "trainer.default_local_dir": str(run_dir / "ckpt"),
        "trainer.save_freq": -1,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def comparable(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(_VOLATILE)}


def assert_same_metrics(a: dict[int, dict], b: dict[int, dict], tol: float = 1e-6, b_may_add: bool = False) -> int:
    """Every non-volatile metric of ``a`` equal in ``b`` within ``tol`` (and the same names unless
    ``b_may_add``: a run with more ranks adds ``global_seqlen/*``); returns how many were compared."""
    assert sorted(a) == sorted(b)
    n = 0
    for step in a:
        ra, rb = comparable(a[step]), comparable(b[step])
        assert set(ra) <= set(rb) if b_may_add else set(ra) == set(rb), (step, set(ra) ^ set(rb))
        for k, v in ra.items():
            if isinstance(v, float) and math.isnan(v):
                assert math.isnan(rb[k]), (step, k)
                continue
            assert rb[k] == pytest.approx(v, abs=tol, rel=0), (step, k, v, rb[k])
            n += 1
    return n


def _run(run_dir: Path, overrides: list[str]) -> dict[int, dict]:
    RLTrainer(config=load_config(None, overrides)).fit()
    return read_metrics(run_dir)


@pytest.mark.e2e
def test_separate_rollout_gives_the_colocated_metrics_on_the_builtin_task(tmp_path):
    colocated = _run(tmp_path / "a", builtin_overrides(tmp_path / "a"))
    split = _run(tmp_path / "b", builtin_overrides(tmp_path / "b", **{"actor_rollout_ref.hybrid_engine": False}))
    assert assert_same_metrics(colocated, split) > 50
    assert any(abs(colocated[s]["actor/pg_loss"]) > 1e-4 for s in colocated)  # the policy really moved
    assert "val/accuracy" in split[3] or any(
        k.startswith("val-core/") for k in split[3]
    )  # validation on the rollout group
    for step in (1, 2, 3):
        assert split[step]["timing_s/update_weights"] > 0 and colocated[step]["timing_s/update_weights"] == 0
        assert split[step]["weight_sync/buckets"] == 1
    # step 1 is the full first sync (parameters + buffers), later ones only the trainable parameters
    assert split[1]["weight_sync/tensors"] > split[2]["weight_sync/tensors"] == split[3]["weight_sync/tensors"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    "extra",
    [
        {"actor_rollout_ref.rollout.mode": "async"},  # every row through its agent loop on the token server
        {
            "actor_rollout_ref.model.lora_rank": 4,
            "actor_rollout_ref.model.lora_alpha": 8,
            "actor_rollout_ref.actor.optim.lr": 1e-2,
        },
        {
            "algorithm.adv_estimator": "remax",
            "actor_rollout_ref.actor.use_kl_loss": True,
        },  # two generations per step, reference
    ],
    ids=["agent_loop", "lora", "remax_kl"],
)
def test_separate_rollout_equals_colocated_in_other_modes(tmp_path, extra):
    runs = [
        _run(
            tmp_path / str(he),
            builtin_overrides(
                tmp_path / str(he),
                **{
                    "actor_rollout_ref.hybrid_engine": he,
                    "trainer.total_training_steps": 2,
                    "trainer.test_freq": 2,
                    **extra,
                },
            ),
        )
        for he in (True, False)
    ]
    assert assert_same_metrics(*runs) > 50


def _parts_after_one_step(tmp_path: Path, **extra: object):
    trainer = RLTrainer(
        config=load_config(
            None,
            builtin_overrides(
                tmp_path,
                **{
                    "actor_rollout_ref.hybrid_engine": False,
                    "trainer.total_training_steps": 1,
                    "data.val_files": "[]",
                    **extra,
                },
            ),
        )
    )
    trainer.fit()
    group = trainer.parts.actor_rollout_wg
    return group, group.actor_wg.workers[0].actor_engine.module, group.rollout_wg.workers[0]


def _assert_bitwise_equal(actor: torch.nn.Module, rollout: dict[str, torch.Tensor]) -> None:
    actor_state = actor.state_dict()
    assert set(actor_state) == set(rollout)
    for name, value in actor_state.items():
        assert torch.equal(value, rollout[name]), name


def test_after_an_update_the_rollout_weights_equal_the_actor_bit_for_bit(tmp_path):
    group, actor, rollout = _parts_after_one_step(tmp_path)
    # the step's update made the rollout stale: its weights are the pre-update ones
    assert any(not torch.equal(v, rollout.state_dict()[k]) for k, v in actor.state_dict().items())
    seconds = group.sync_weights()
    assert seconds > 0 and group.sync_weights() == 0.0  # a second call finds nothing stale
    _assert_bitwise_equal(actor, rollout.state_dict())
    trainable = sum(1 for p in actor.parameters() if p.requires_grad)
    assert group.last_sync["tensors"] == trainable < len(actor.state_dict())  # trainable only after the first sync


def test_lora_syncs_only_the_adapter_after_the_first_sync(tmp_path):
    group, actor, rollout = _parts_after_one_step(
        tmp_path,
        **{
            "actor_rollout_ref.model.lora_rank": 4,
            "actor_rollout_ref.model.lora_alpha": 8,
            "actor_rollout_ref.actor.optim.lr": 1e-2,
        },
    )
    group.sync_weights()
    adapter = [n for n, p in actor.named_parameters() if p.requires_grad]
    assert adapter and all("lora_" in n for n in adapter)
    assert group.last_sync["tensors"] == len(adapter)
    assert group.last_sync["bytes"] < 0.2 * sum(t.numel() * t.element_size() for t in actor.state_dict().values())
    _assert_bitwise_equal(actor, rollout.state_dict())


def test_a_checkpoint_load_forces_a_full_resync(tmp_path):
    group, actor, rollout = _parts_after_one_step(tmp_path, **{"trainer.save_freq": 1})
    group.sync_weights()
    with torch.no_grad():  # the rollout drifts (as a fresh engine would hold other values)
        for p in rollout.module.parameters():
            p.add_(1.0)
    group.load_checkpoint(str(tmp_path / "ckpt" / "global_step_1" / "actor"))
    group.sync_weights()
    assert group.last_sync["tensors"] == len(actor.state_dict())  # full: buffers and frozen tensors too
    _assert_bitwise_equal(actor, rollout.state_dict())


@pytest.mark.e2e
def test_resume_with_a_separate_rollout_equals_the_uninterrupted_run(tmp_path):
    split = {"actor_rollout_ref.hybrid_engine": False, "data.val_files": "[]", "trainer.test_freq": -1}
    full = _run(tmp_path / "a", builtin_overrides(tmp_path / "a", **split))
    _run(
        tmp_path / "b",
        builtin_overrides(tmp_path / "b", **split, **{"trainer.total_training_steps": 2, "trainer.save_freq": 2}),
    )
    resumed = _run(tmp_path / "b", builtin_overrides(tmp_path / "b", **split, **{"trainer.save_freq": 2}))
    assert_same_metrics({3: full[3]}, {3: resumed[3]})


@pytest.mark.e2e
def test_tiny_buckets_give_the_same_run(tmp_path, tiny_model_dir):
    from verl.modules import init_model

    # one wide layer (~3.3 MB in fp32: its MLP matrices are 0.75 MB each), so 1 MB buckets split it
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(
            init_model.SIZES, "wide1", {"hidden": 256, "layers": 1, "heads": 8, "kv_heads": 4, "intermediate": 768}
        )
        model = init_model.init_random_model(
            "llama", "wide1", Path(tiny_model_dir).parent / "tokenizer", tmp_path / "wide1", seed=0
        )
    runs = {}
    for mb in (2048, 1):
        d = tmp_path / f"mb{mb}"
        runs[mb] = _run(
            d,
            tiny_run_overrides(
                model,
                d,
                **{
                    "actor_rollout_ref.hybrid_engine": False,
                    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": mb,
                },
            ),
        )
    assert runs[2048][1]["weight_sync/buckets"] == 1
    assert runs[1][1]["weight_sync/buckets"] >= runs[1][1]["weight_sync/megabytes"] > 3
    assert runs[1][2]["weight_sync/buckets"] > 1
    assert assert_same_metrics(runs[2048], runs[1], tol=0.0) > 20


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["actor_rollout_ref.rollout.nnodes=2"],
            r"^`actor_rollout_ref.rollout.nnodes` is not supported yet: it sizes the rollout's own",
        ),
        (
            ["actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.rollout.n_gpus_per_node=2"],
            r"^actor_rollout_ref.hybrid_engine=false: a rollout pool of 2 workers needs the Ray backend",
        ),
        (
            ["actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"],
            r"^`actor_rollout_ref.rollout.checkpoint_engine.backend` is not supported yet: 'nccl'",
        ),
        (
            [
                "actor_rollout_ref.hybrid_engine=false",
                "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=0",
            ],
            r"update_weights_bucket_megabytes: must be > 0",
        ),
        (
            ["actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.rollout.nnodes=-1"],
            r"rollout.nnodes: must be >= 0",
        ),
    ],
)
def test_settings_that_cannot_work_with_a_separate_rollout_are_one_line_errors(overrides, message):
    from verl.config import ConfigError

    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, overrides)
    assert "\n" not in str(err.value)


def test_rollout_pool_size_defaults_to_the_actor_world_size():
    from verl.config.finalize import rollout_world_size

    cfg = load_config(None, ["actor_rollout_ref.hybrid_engine=false", "trainer.n_gpus_per_node=4"])
    assert rollout_world_size(cfg) == 4
    cfg = load_config(
        None,
        [
            "actor_rollout_ref.hybrid_engine=false",
            "trainer.n_gpus_per_node=4",
            "actor_rollout_ref.rollout.n_gpus_per_node=2",
            "actor_rollout_ref.rollout.nnodes=3",
        ],
    )
    assert rollout_world_size(cfg) == 6


def test_plan_puts_the_separate_rollout_on_its_own_device():
    from verl.commands.plan import GIB, ModelShape, plan_memory

    shape = ModelShape(n_params=1_000_000, hidden=64, layers=2, kv_dim=32, intermediate=128, vocab=1000)
    common = [
        "data.train_batch_size=64",
        "actor_rollout_ref.rollout.n=32",
        "data.max_prompt_length=6",
        "data.max_response_length=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=64",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "trainer.n_gpus_per_node=2",
        "trainer.backend=ray",
    ]
    colocated = plan_memory(load_config(None, common), 8 * GIB, 100.0, shape)
    split = plan_memory(
        load_config(
            None, [*common, "actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.rollout.n_gpus_per_node=4"]
        ),
        8 * GIB,
        100.0,
        shape,
    )
    assert "rollout_copy" in colocated.static and "rollout_copy" not in split.static
    # 2048 sequences over 4 rollout workers = 512 each: KV 2*2*32*10*4 B + 7 sampling rows of 1000 float32
    stage = 512 * (2 * 2 * 32 * 10 * 4 + 7 * 1000 * 4)
    assert split.stages["rollout"] == stage and split.peak_stage == "rollout"
    assert split.peak == 100.0 + 4e6 + stage  # runtime + one whole fp32 copy + the stage, no actor state


def test_a_rollout_pool_without_free_gpus_is_a_one_line_error():
    from verl.config import ConfigError
    from verl.trainer.ppo.builders import check_free_gpus

    check_free_gpus(2, 2.0)
    with pytest.raises(ConfigError, match=r"needs 2 GPU\(s\) besides the actor's, but 1 are free") as err:
        check_free_gpus(2, 1.0)
    assert "\n" not in str(err.value)


@pytest.mark.e2e
@pytest.mark.parametrize(
    "extra",
    [
        {
            "algorithm.filter_groups.enable": True
        },  # several generation batches per step, only the last one's metrics kept
        {"trainer.test_freq": 1},  # validation after every update syncs the rollout before the next step's generation
    ],
    ids=["dynamic_sampling", "validate_every_step"],
)
def test_every_step_reports_the_sync_of_the_weights_it_generated_with(tmp_path, extra):
    rows = _run(
        tmp_path,
        builtin_overrides(
            tmp_path, **{"actor_rollout_ref.hybrid_engine": False, "trainer.total_training_steps": 2, **extra}
        ),
    )
    for step in (1, 2):  # was 0.0 at step 2: the sync ran in an earlier generation call whose metrics were dropped
        assert rows[step]["timing_s/update_weights"] > 0, (step, rows[step]["timing_s/update_weights"])
    assert rows[1]["weight_sync/tensors"] > rows[2]["weight_sync/tensors"]  # full first sync, then trainable only
