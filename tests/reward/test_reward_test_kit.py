"""``verl reward test``: fixtures, the probe's flags and the command on hand-checked scorers."""

from __future__ import annotations

import json
import math
import random

import pytest

from verl.cli import main as verl_main
from verl.reward.fixtures import answer_fixtures, dependent_fixtures, prompt_text, trivial_fixtures
from verl.reward.probe import Probe, analyse, score_probes
from verl.commands.reward_test import run_reward_test

GSM8K_PROMPT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
    "clips did Natalia sell altogether in April and May? Let's think step by step and output the final answer "
    'after "####".'
)
SCHEMA_TRUTH = {
    "schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    },
    "expected": {"name": "Ada", "age": 36},
}


def _row(source: str, prompt: str, truth: object) -> dict:
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"index": 0},
    }


@pytest.fixture
def gsm8k_file(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(
        json.dumps(_row("openai/gsm8k", GSM8K_PROMPT, "72"))
        + "\n"
        + json.dumps(_row("openai/gsm8k", "Weng earns $12 an hour. How much for 50 minutes?", "10"))
        + "\n"
    )
    return path


# -------------------------------------------------------------------------------- fixtures
def test_answer_spellings_of_a_number():
    texts = {f.kind: f.text for f in answer_fixtures("72")}
    assert texts == {
        "answer_hash": "#### 72",
        "answer_hash_decimal": "#### 72.0",
        "answer_hash_trailing_dot": "#### 72.",
        "answer_hash_dollar": "#### $72",
        "answer_hash_comma": "#### 7,2",
        "answer_boxed": "\\boxed{72}",
        "answer_line": "Answer: 72",
    }
    assert {f.kind: f.text for f in answer_fixtures("1000")}["answer_hash_comma"] == "#### 1,000"
    assert "answer_hash_decimal" not in {f.kind for f in answer_fixtures("0.5")}  # 0.5.0 is not a spelling
    json_texts = [f.text for f in answer_fixtures(json.dumps(SCHEMA_TRUTH))]
    assert json.loads(json_texts[0]) == {"name": "Ada", "age": 36} and json.loads(json_texts[1]) == {
        "name": "Ada",
        "age": 36,
    }
    assert answer_fixtures({"schema": {"type": "object"}}) == []  # no expected object: the right answer is unknown


def test_trivial_and_dependent_fixtures():
    trivial = {f.kind: f.text for f in trivial_fixtures("What is 2+2?", "72")}
    assert trivial["empty"] == "" and trivial["copy_prompt"] == "What is 2+2?"
    assert trivial["format_wrong_number"] == "#### 73" and trivial["format_boxed_wrong"] == "\\boxed{73}"
    assert trivial["format_marker_only"] == "#### " and trivial["format_json_empty"] == "{}"
    dep = {f.kind: f.text for f in dependent_fixtures("#### 72")}
    assert (
        dep["truncated"].endswith("\n###") and len(dep["long"]) == 100_000 + 1 + 7 and dep["long"].endswith("#### 72")
    )
    assert dep["think_answer_inside"].startswith("<think>#### 72</think>")
    assert prompt_text([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]) == "S\nU"


# ------------------------------------------------------------------------------------ probe
def test_probe_flags_nondeterminism_and_nonfinite_scores():
    probes = [Probe("src", "empty", "", "1", label="r0"), Probe("src", "answer_hash", "#### 1", "1", label="r0")]

    def noisy(data_source, solution_str, ground_truth, extra_info):
        return random.random() if solution_str else math.nan

    report = analyse(probes, score_probes(noisy, probes, timeout_s=5.0))
    checks = {(f["check"], f["kind"]) for f in report["flags"] if f["severity"] == "fail"}
    assert ("nondeterministic", "answer_hash") in checks
    crash = report["sources"]["src"]["crashes"][0]
    assert (crash["type"], crash["message"], crash["kinds"]) == ("InvalidScore", "score is nan", {"empty": 2})
    assert report["failed"]


# ------------------------------------------------------------------------------------ command
def test_gsm8k_scorer_flags_only_the_strict_spellings(gsm8k_file):
    report = run_reward_test(None, [f"data.train_files=[{gsm8k_file}]"])
    kinds = report["sources"]["openai/gsm8k"]["kinds"]
    assert kinds["answer_hash"]["mean"] == 1.0 and kinds["empty"]["mean"] == 0.0
    assert all(k["mean"] == 0.0 for k in kinds.values() if k["group"] == "trivial")
    assert (
        kinds["long"]["mean"] == 1.0 and kinds["think_answer_inside"]["mean"] == 0.0
    )  # reasoning stripped, the long tail searched
    assert not report["failed"]
    # strict "####": 7,2 is 7 (not a thousands group), \boxed{} and "Answer:" have no marker
    assert sorted(f["kind"] for f in report["flags"]) == ["answer_boxed", "answer_hash_comma", "answer_line"]
    assert report["sources"]["openai/gsm8k"]["range"] == [0.0, 1.0]


def test_json_schema_scorer_format_reward_is_hackable(tmp_path, capsys):
    path = tmp_path / "js.jsonl"
    path.write_text(json.dumps(_row("json_schema", "Return Ada's record as JSON.", json.dumps(SCHEMA_TRUTH))) + "\n")
    assert verl_main(["reward", "test", f"data.train_files=[{path}]", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    kinds = report["sources"]["json_schema"]["kinds"]
    assert kinds["answer_json"]["mean"] == 1.0 and kinds["format_json_empty"]["mean"] == pytest.approx(
        0.1
    )  # json_valid weight
    hackable = sorted(f["kind"] for f in report["flags"] if f["check"] == "hackable")
    assert hackable == ["format_json_empty", "format_json_fenced_empty"]


HACKABLE_REWARD = """
import time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if not solution_str:
        raise ValueError("empty response\\nsecond line")
    if len(solution_str) > 50_000:
        time.sleep(0.6)
    return 1.0 if any(line.startswith("####") for line in solution_str.splitlines()) else 0.0
"""


def test_custom_function_crash_timeout_and_hack_are_reported(gsm8k_file, tmp_path, capsys):
    fn = tmp_path / "my_reward.py"
    fn.write_text(HACKABLE_REWARD)
    code = verl_main(
        [
            "reward",
            "test",
            f"data.train_files=[{gsm8k_file}]",
            f"custom_reward_function.path={fn}",
            "reward_model.timeout_s=0.15",
            "--rows",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL crash            [openai/gsm8k] ValueError: empty response (2 calls: empty x2)" in out
    assert "FAIL timeout          [openai/gsm8k] 1 of 1 long responses ran past the deadline" in out
    assert "FAIL hackable         [openai/gsm8k] trivial policy 'format_marker_only' earns mean reward 1 > 0" in out
    assert "result: 4 failure(s)" in out  # crash, timeout, format_marker_only, format_wrong_number
    assert "second line" not in out
    assert "info robustness       [openai/gsm8k] long" not in out  # the timeout is not a robustness note too


def test_dump_dir_and_view_fixture(gsm8k_file, tmp_path):
    dump = tmp_path / "rollouts"
    dump.mkdir()
    rows = [
        {
            "input": "q",
            "output": "48 + 24 = 72\n#### 72",
            "gts": "72",
            "score": 1.0,
            "step": 3,
            "data_source": "openai/gsm8k",
        },
        {"input": "q", "output": "#### 70", "gts": "72", "score": 0.0, "step": 3, "data_source": "openai/gsm8k"},
        {"input": "q", "output": "\\boxed{10}", "gts": "10", "score": 1.0, "step": 3, "data_source": "openai/gsm8k"},
    ]
    (dump / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    view = tmp_path / "fixture.json"  # the object verl view's "Export JSON fixture" writes
    view.write_text(
        json.dumps(
            {
                "data_source": "openai/gsm8k",
                "solution_str": "#### 10",
                "ground_truth": "10",
                "extra_info": None,
                "expected_score": 1.0,
                "prompt": "q",
                "step": 3,
            }
        )
    )
    report = run_reward_test(
        None, [f"data.train_files=[{gsm8k_file}]"], dumps=[str(dump), str(view)], rows_per_source=1
    )
    s = report["sources"]["openai/gsm8k"]
    assert s["kinds"]["dump"]["n"] == 4 and s["kinds"]["dump"]["mean"] == pytest.approx(0.5)  # 1, 0, 0 (boxed), 1
    assert s["dump"]["differs_from_logged"] == 1 and s["dump"]["examples"][0]["label"].endswith("3.jsonl: row 2")
    assert not report["failed"]


def test_bad_inputs_are_one_line_errors(gsm8k_file, tmp_path, capsys):
    dump = tmp_path / "d"
    dump.mkdir()
    (dump / "1.jsonl").write_text(json.dumps({"input": "q", "output": "x", "gts": "1", "score": 0.0}) + "\n")
    assert verl_main(["reward", "test", f"data.train_files=[{gsm8k_file}]", "--dump", str(dump)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("1.jsonl: row 0: field 'data_source' must be a string, got None") and "\n" not in err
    model = tmp_path / "rm"
    model.mkdir()
    assert (
        verl_main(
            [
                "reward",
                "test",
                f"data.train_files=[{gsm8k_file}]",
                "reward_model.enable=true",
                f"reward_model.model.path={model}",
            ]
        )
        == 2
    )
    assert "reward_model.enable: scoring with a reward model is not supported yet" in capsys.readouterr().err
    assert verl_main(["reward", "test", f"data.train_files=[{gsm8k_file}]", "reward_model.reward_manager=nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown reward manager 'nope'; valid names: batch, dapo," in err and "naive" in err


def test_config_resolves_as_in_training_kwargs_and_batch_manager(gsm8k_file, tmp_path):
    # reward_model.reward_kwargs reach the built-in scorer as in training: a format score makes a wrong number pay
    report = run_reward_test(
        None, [f"data.train_files=[{gsm8k_file}]", "+reward_model.reward_kwargs.format_score=0.1"], rows_per_source=1
    )
    assert [f["kind"] for f in report["flags"] if f["check"] == "hackable"] == ["format_wrong_number"]
    batched = tmp_path / "batched.py"
    batched.write_text(
        "def compute_score(data_sources, solution_strs, ground_truths, extra_infos):\n"
        "    return [float(s.strip() == '#### ' + str(g)) for s, g in zip(solution_strs, ground_truths)]\n"
    )
    report = run_reward_test(
        None,
        [
            f"data.train_files=[{gsm8k_file}]",
            f"custom_reward_function.path={batched}",
            "reward_model.reward_manager=batch",
        ],
        rows_per_source=1,
    )
    kinds = report["sources"]["openai/gsm8k"]["kinds"]
    assert kinds["answer_hash"]["mean"] == 1.0 and kinds["answer_hash_decimal"]["mean"] == 0.0 and not report["failed"]
    assert "batches of one" in report["notes"][0]


def test_a_verl_style_manager_is_refused_by_its_kind_not_its_name(gsm8k_file, capsys):
    """A class registered with verl's ``@register`` has no per-sample scorer: refused in one line."""
    from verl.workers.reward_manager import register
    from verl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY

    @register("probe_test_verl_style")
    class VerlStyle:
        def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source"):
            pass

    try:
        argv = [
            "reward",
            "test",
            f"data.train_files=[{gsm8k_file}]",
            "reward_model.reward_manager=probe_test_verl_style",
        ]
        assert verl_main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "reward manager 'probe_test_verl_style' scores whole batches its own way" in err and "\n" not in err
    finally:
        del REWARD_MANAGER_REGISTRY["probe_test_verl_style"]


def test_a_hung_scorer_is_cut_short():
    import time

    probes = [Probe("src", "long", "x" * 10, "1", label=f"r{i}") for i in range(6)]

    def hung(data_source, solution_str, ground_truth, extra_info):
        time.sleep(0.5)
        return 1.0

    start = time.perf_counter()
    report = analyse(probes, score_probes(hung, probes, timeout_s=0.05))
    assert time.perf_counter() - start < 1.0  # 3 timeouts per pass, the other 3 calls are not waited for
    (flag,) = [f for f in report["flags"] if f["check"] == "timeout"]
    assert flag["message"] == "6 of 6 long responses ran past the deadline (3 not run: the scorer kept timing out)"
    assert report["sources"]["src"]["latency_ms"]["p50"] is None


def test_a_function_with_the_wrong_signature_is_the_same_one_line_error_as_in_training(gsm8k_file, tmp_path, capsys):
    fn = tmp_path / "bad.py"
    fn.write_text("def f(a, b):\n    return 0.0\n")
    code = verl_main(
        [
            "reward",
            "test",
            f"data.train_files=[{gsm8k_file}]",
            f"custom_reward_function.path={fn}",
            "custom_reward_function.name=f",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code != 0 and "\n" not in err, err
    assert "f(a, b)" in err and "cannot be called as f(data_source=" in err
