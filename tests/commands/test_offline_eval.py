"""``verl generate`` / ``verl eval`` (verl's main_generation / main_eval): offline sampling and scoring.

Greedy generation is checked against transformers' own ``generate``; the scores against hand
counts; the samples against their seeds (independent of the batch size).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from verl.config.errors import ConfigError
from verl.config.offline import load_eval_config, load_generation_config
from verl.commands.evaluate import evaluate
from verl.commands.generate import generate
from verl.utils.errors import DataError, ModelError, RewardFunctionError

REPO = Path(__file__).resolve().parents[2]
TEST = "builtin://arithmetic/test"


def _gen(tmp_path: Path, name: str, *extra: str) -> tuple[list[dict], dict[str, float]]:
    out = tmp_path / name
    figures = generate(
        load_generation_config(None, [f"data.path={TEST}", f"data.output_path={out}", *extra]), log=lambda *_: None
    )
    if out.suffix == ".parquet":
        return pq.read_table(out).to_pylist(), figures
    return [json.loads(x) for x in out.read_text().splitlines()], figures


def test_greedy_generation_equals_transformers_generate_and_scores_the_builtin_accuracy(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    rows, figures = _gen(tmp_path, "greedy.parquet", "rollout.do_sample=false", "data.batch_size=100")
    assert len(rows) == 512 and figures["samples"] == 512 and figures["clip_ratio"] == 0.0
    # every input column kept, responses added
    assert set(rows[0]) == {"data_source", "prompt", "ability", "reward_model", "extra_info", "responses"}
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.modules import resolve_model_path

    path = resolve_model_path("builtin://tiny-arithmetic")
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()
    for row in rows[:12]:
        text = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, do_sample=False, max_new_tokens=8, pad_token_id=tok.pad_token_id)
        assert row["responses"] == [tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)]
    metrics = evaluate(load_eval_config(None, [f"data.path={tmp_path / 'greedy.parquet'}"]))
    # the built-in model's held-out greedy accuracy before RL (README: 28.1 %): 144 of 512
    assert metrics["test_score/builtin/arithmetic"] == pytest.approx(144 / 512)
    assert metrics["test_score/builtin/arithmetic/best@1"] == metrics["test_score/builtin/arithmetic"]
    assert metrics["num_rows/builtin/arithmetic"] == 512 and metrics["num_errors"] == 0


def test_samples_depend_on_their_seeds_not_on_the_batch_size(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    common = ["data.n_samples=3", "rollout.temperature=1.0"]
    a, _ = _gen(tmp_path, "a.jsonl", *common, "data.batch_size=512")
    b, _ = _gen(tmp_path, "b.jsonl", *common, "data.batch_size=37")
    c, _ = _gen(tmp_path, "c.jsonl", *common, "rollout.seed=5")
    assert [r["responses"] for r in a] == [r["responses"] for r in b]
    assert all(len(r["responses"]) == 3 for r in a)
    assert sum(len(set(r["responses"])) > 1 for r in a) > 100  # the samples of a row differ
    assert [r["responses"] for r in a] != [r["responses"] for r in c]  # another seed, other samples


def test_eval_metrics_by_hand_and_failing_scorers_are_counted(tmp_path: Path) -> None:
    rows = [
        {
            "data_source": "a",
            "reward_model": {"ground_truth": "1"},
            "responses": ["1", "2", "1", "1"],
        },  # mean 3/4, best 1
        {"data_source": "a", "reward_model": {"ground_truth": "5"}, "responses": ["4", "4"]},  # mean 0, best 0
        {"data_source": "b", "reward_model": {"ground_truth": "7"}, "responses": ["7", "raise", "hang"]},  # 1/3, best 1
        {
            "data_source": "c",
            "reward_model": {"ground_truth": "7"},
            "responses": ["7", "hang"],
        },  # 1/2 (a second timeout)
        {"data_source": "c", "reward_model": {"ground_truth": "7"}, "responses": ["7", "7"]},  # 1
    ]
    data = tmp_path / "gen.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = tmp_path / "reward.py"
    reward.write_text(
        "import time\n"
        "def score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    if solution_str == 'raise':\n        raise RuntimeError('broken scorer')\n"
        "    if solution_str == 'hang':\n        time.sleep(5)\n"
        "    return {'score': float(solution_str == ground_truth) + bonus}\n"
    )
    cfg = load_eval_config(
        None,
        [
            f"data.path={data}",
            f"custom_reward_function.path={reward}",
            "custom_reward_function.name=score",
            "reward_model.timeout_s=0.5",
        ],
    )
    logged: list[str] = []
    m = evaluate(cfg, log=logged.append)
    # the mean of the rows' means (3/4 and 0), not the pooled 3/6; rows of 4 and 2 responses: best@var
    assert m["test_score/a"] == pytest.approx((0.75 + 0.0) / 2) and m["test_score/a/best@var"] == pytest.approx(0.5)
    assert m["test_score/b"] == pytest.approx(1 / 3) and m["test_score/b/best@3"] == 1.0
    assert m["test_score/c"] == pytest.approx(0.75) and m["test_score/c/best@2"] == 1.0
    assert m["num_rows/a"] == 2 and m["num_rows/b"] == 1 and m["num_rows/c"] == 2
    assert m["num_errors"] == 1 and m["num_timeouts"] == 2 and m["num_nonfinite"] == 0
    assert any("num_errors" in x and "broken scorer" in x for x in logged)  # the first error, with its message
    # reward_kwargs reach the function
    m2 = evaluate(
        load_eval_config(
            None,
            [
                f"data.path={data}",
                f"custom_reward_function.path={reward}",
                "custom_reward_function.name=score",
                "reward_model.timeout_s=0.5",
                "+custom_reward_function.reward_kwargs.bonus=1.0",
            ],
        )
    )
    assert m2["test_score/a"] == pytest.approx(m["test_score/a"] + 1.0)
    # a scorer that fails on every response is an error, not a score of 0
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def score(solution_str, ground_truth):\n    return 1.0\n")  # verl's keywords missing
    with pytest.raises(RewardFunctionError, match="failed on every one of the 13 responses.*unexpected keyword"):
        evaluate(
            load_eval_config(
                None, [f"data.path={data}", f"custom_reward_function.path={wrong}", "custom_reward_function.name=score"]
            ),
            log=lambda *_: None,
        )
    # 3 timeouts in a row: the scorer looks hung, an error naming the row (not hours of waiting, not silent zeros)
    hung = tmp_path / "hung.jsonl"
    hung.write_text(
        "".join(
            json.dumps({"data_source": "a", "reward_model": {"ground_truth": "1"}, "responses": [x]}) + "\n"
            for x in ["1", "hang", "hang", "hang", "1", "1"]
        )
    )
    start = time.perf_counter()
    with pytest.raises(
        RewardFunctionError, match=r"timed out on 3 responses in a row, the last at .*hung.jsonl: row 3 \(line 4\)"
    ):
        evaluate(
            load_eval_config(
                None,
                [
                    f"data.path={hung}",
                    f"custom_reward_function.path={reward}",
                    "custom_reward_function.name=score",
                    "reward_model.timeout_s=0.3",
                ],
            )
        )
    assert time.perf_counter() - start < 3.0
    # a data source no built-in scorer handles: one line naming the row
    with pytest.raises(DataError, match=r"gen.jsonl: row 0 \(line 1\): .*'a'"):
        evaluate(load_eval_config(None, [f"data.path={data}"]))


def test_config_and_data_errors_are_one_line_naming_the_key(tmp_path: Path) -> None:
    out = f"data.output_path={tmp_path / 'o.jsonl'}"
    with pytest.raises(ConfigError, match=r"unknown key 'data.n_sample' \(did you mean 'data.n_samples'"):
        load_generation_config(None, [f"data.path={TEST}", out, "data.n_sample=2"])
    with pytest.raises(
        ConfigError, match=r"unknown key 'rollout\.temprature' \(did you mean 'rollout\.temperature'"
    ) as e:
        load_generation_config(None, [f"data.path={TEST}", out, "rollout.temprature=0.5"])
    assert "actor_rollout_ref" not in str(e.value)
    with pytest.raises(ConfigError, match=r"unknown key 'rolout.n' \(did you mean 'rollout.n'"):
        load_generation_config(None, [f"data.path={TEST}", out, "rolout.n=2"])
    with pytest.raises(ConfigError, match="data.output_path: set where"):
        load_generation_config(None, [f"data.path={TEST}"])
    with pytest.raises(ConfigError, match="identical samples"):
        load_generation_config(None, [f"data.path={TEST}", out, "data.n_samples=2", "rollout.do_sample=false"])
    with pytest.raises(ConfigError, match="n_gpus_per_node=2.*not supported yet"):
        load_generation_config(None, [f"data.path={TEST}", out, "trainer.n_gpus_per_node=2"])
    # keys generation does not read are refused unless at their default; RL messages use this tool's keys
    for key, message in [
        ("rollout.n=2", "rollout.n=2 has no effect in verl generate: set data.n_samples"),
        ("rollout.val_kwargs.do_sample=true", "rollout.val_kwargs.do_sample=True has no effect"),
        ("model.lora_rank=8", "model.lora_rank=8 has no effect"),
        ("trainer.project_name=x", "trainer.project_name='x' has no effect"),
        ("rollout.response_length=0", "^rollout.response_length: must be >= 1"),
        ("rollout.temprature=1", "unknown key 'rollout.temprature'"),
        ("trainer.seed=-5", "trainer.seed: must be >= 0"),
        ("rollout.seed=-1", "rollout.seed: must be >= 0"),
    ]:
        with pytest.raises(ConfigError, match=message) as e:
            load_generation_config(None, [f"data.path={TEST}", out, key])
        assert "actor_rollout_ref" not in str(e.value) and "data.max_" not in str(e.value), str(e.value)
    load_generation_config(None, [f"data.path={TEST}", out, "rollout.n=1"])  # a default value: accepted
    # verl's own generation.yaml keys for work generation does not do: accepted, named in a note
    cfg = load_generation_config(
        None,
        [
            f"data.path={TEST}",
            out,
            "actor.strategy=fsdp",
            "actor.fsdp_config.fsdp_size=-1",
            "rollout.log_prob_micro_batch_size_per_gpu=8",
        ],
    )
    assert cfg.ignored == ("actor.strategy", "actor.fsdp_config.fsdp_size", "rollout.log_prob_micro_batch_size_per_gpu")
    # the vLLM engine's keys are not refused as "no effect" (the engine reads them)
    load_generation_config(
        None,
        [
            f"data.path={TEST}",
            out,
            "rollout.free_cache_engine=false",
            "rollout.calculate_log_probs=false",
            "rollout.scheduling_policy=priority",
            "rollout.mode=async",
        ],
    )
    (tmp_path / "isdir.parquet").mkdir()
    with pytest.raises(ConfigError, match="data.output_path: .*isdir.parquet is a directory"):
        generate(load_generation_config(None, [f"data.path={TEST}", f"data.output_path={tmp_path / 'isdir.parquet'}"]))
    with pytest.raises(DataError, match=r"data.path: .*not found"):
        generate(load_generation_config(None, [f"data.path={tmp_path / 'missing.parquet'}", out]))
    with pytest.raises(ModelError, match=r"^model.path: cannot read the model config"):
        generate(load_generation_config(None, [f"data.path={TEST}", out, f"model.path={tmp_path / 'no_model'}"]))
    long = tmp_path / "long.jsonl"
    long.write_text(
        json.dumps({"prompt": [{"role": "user", "content": "1+1"}]})
        + "\n"
        + json.dumps({"prompt": [{"role": "user", "content": "1+1 " * 200}]})
        + "\n"
    )
    with pytest.raises(DataError, match=r"long.jsonl: row 1 \(line 2\).*data.truncation"):
        generate(
            load_generation_config(None, [f"data.path={long}", out, "rollout.prompt_length=32"]), log=lambda *_: None
        )
    rows, _ = _gen(tmp_path, "t.jsonl", f"data.path={long}", "rollout.prompt_length=32", "data.truncation=left")
    assert len(rows) == 2 and set(rows[1]) == {"prompt", "responses"}  # only the prompt column is required
    # a prompt longer than the model's 128 positions: unset lengths, cut by data.truncation
    huge = tmp_path / "huge.jsonl"
    huge.write_text(json.dumps({"prompt": [{"role": "user", "content": "1+1 " * 400}]}) + "\n")
    with pytest.raises(
        ConfigError, match=r"no room for the responses: the longest prompt has \d+ tokens .* set data.truncation"
    ):
        _gen(tmp_path, "h.jsonl", f"data.path={huge}")
    _, figures = _gen(tmp_path, "h.jsonl", f"data.path={huge}", "data.truncation=left")
    assert figures["prompt_length"] == figures["response_length"] == 64
    # rows parquet cannot hold as one table: one line, and the samples kept as jsonl beside it
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        "".join(json.dumps({"prompt": [{"role": "user", "content": "1+2"}], "extra": v}) + "\n" for v in (1, "a"))
    )
    (tmp_path / "mixed_out.rows.jsonl").write_text("keep me\n")  # an existing file is never overwritten
    with pytest.raises(
        DataError,
        match=r"data.output_path: the rows do not fit one parquet table.*wrote them to .*mixed_out.rows.1.jsonl",
    ):
        _gen(tmp_path, "mixed_out.parquet", f"data.path={mixed}")
    assert len((tmp_path / "mixed_out.rows.1.jsonl").read_text().splitlines()) == 2
    assert (tmp_path / "mixed_out.rows.jsonl").read_text() == "keep me\n"
    assert not list(tmp_path.glob(".*.tmp*"))  # the temporary files were renamed away
    with pytest.raises(ConfigError, match="ray_kwargs.ray_init.num_cpus is not supported yet"):
        load_eval_config(None, [f"data.path={long}", "+ray_kwargs.ray_init.num_cpus=4"])
    load_eval_config(None, [f"data.path={long}", "+ray_kwargs.ray_init.num_cpus=null"])  # verl's default: accepted
    with pytest.raises(DataError, match=r"long.jsonl: row 0 \(line 1\): field 'data_source' \(data.data_source_key\)"):
        evaluate(load_eval_config(None, [f"data.path={long}"]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"data_source": "a", "reward_model": {"ground_truth": "1"}, "responses": []}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl: row 0 \(line 1\): field 'responses' \(data.response_key\)"):
        evaluate(load_eval_config(None, [f"data.path={bad}"]))


@pytest.mark.e2e
def test_verl_entry_points_run_as_modules(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    gen = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_generation",
            f"data.path={TEST}",
            f"data.output_path={tmp_path / 'g.parquet'}",
            "rollout.do_sample=false",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert gen.returncode == 0, gen.stderr[-2000:]
    assert "512 rows x 1 samples" in gen.stdout
    ev = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_eval", f"data.path={tmp_path / 'g.parquet'}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert json.loads(ev.stdout.strip().splitlines()[-1])["test_score/builtin/arithmetic"] == pytest.approx(144 / 512)
    bad = subprocess.run(
        [sys.executable, "-m", "verl.cli", "eval", "data.pth=x"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "did you mean 'data.path'" in bad.stderr


def test_unset_lengths_fit_the_model_and_set_ones_are_checked(tmp_path: Path) -> None:
    # the built-in model has 128 positions: unset lengths become the longest prompt + what is left
    _, figures = _gen(tmp_path, "a.jsonl", "rollout.do_sample=false")
    assert figures["prompt_length"] + figures["response_length"] == 128 and figures["prompt_length"] < 40
    _, figures = _gen(tmp_path, "b.jsonl", "rollout.do_sample=false", "rollout.response_length=8")
    assert figures["response_length"] == 8
    # truncation on: the responses keep half of a small budget, the prompts are cut (no 1-token responses)
    _, figures = _gen(
        tmp_path, "d.jsonl", "rollout.do_sample=false", "rollout.max_model_len=12", "data.truncation=left"
    )
    assert (figures["prompt_length"], figures["response_length"]) == (6, 6)
    with pytest.raises(
        ConfigError,
        match=r"no room for the responses: .*rollout.max_model_len is 30 \(rollout.prompt_length "
        r"\d+ derived, rollout.response_length 40 as set\)",
    ):
        _gen(tmp_path, "e.jsonl", "rollout.response_length=40", "rollout.max_model_len=30")
    with pytest.raises(
        ConfigError,
        match=r"max_position_embeddings is 128 \(rollout.prompt_length 100 as set, "
        r"rollout.response_length 100 as set\); set rollout.prompt_length \+ rollout.response_length <= 128",
    ):
        _gen(tmp_path, "c.jsonl", "rollout.prompt_length=100", "rollout.response_length=100")
