"""Built-in tokenizer and tiny-arithmetic model: ids, chat template, shipped asset, resolver, build."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import verl.modules.builtin as builtin
from verl.data.builtin_task import arithmetic_problems, needs_carry
from verl.modules.builtin import (
    BuiltinModelSpec,
    build_tokenizer,
    get_builtin_model_dir,
    load_builtin_tokenizer,
    sloppy_sum,
)
from verl.recipes import build as recipes_build
from verl.recipes.tiny_arithmetic import build_builtin_model
from verl.reward.scorers.arithmetic import compute_score
from verl.utils.errors import ModelError

TINY = BuiltinModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, sft_steps=3, sft_batch_size=8)
# A spec that builds in about a second: for the build and cache mechanics, not for accuracy.


def greedy_answers(model: torch.nn.Module, tok, problems: list[tuple[int, int]]) -> list[str]:
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": f"{a}+{b}"}], add_generation_prompt=True, tokenize=False)
        for a, b in problems
    ]
    tok.padding_side = "left"
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=2)
    return tok.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


# ------------------------------------------------------------------------------- tokenizer
def test_special_ids_and_round_trip() -> None:
    tok = load_builtin_tokenizer("tiny-arithmetic")
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert len(tok) == 100
    assert tok("12+3")["input_ids"] == [5, 6, 76, 7]  # no special tokens added on encode
    text = "Q:47+38\nA:85 What is 2*(3-1)? ok!"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text) and tok.unk_token_id not in ids
    assert tok.decode(ids) == text
    assert tok("é")["input_ids"] == [3]
    assert tok.decode([1, 12, 9, 2, 0], skip_special_tokens=True) == "85"


def test_chat_template_renders_short_prompt_and_assistant_turn() -> None:
    tok = build_tokenizer()
    user = [{"role": "user", "content": "47+38"}]
    assert tok.apply_chat_template(user, add_generation_prompt=True, tokenize=False) == "<s>Q:47+38\nA:"
    convo = user + [{"role": "assistant", "content": "85"}]
    assert tok.apply_chat_template(convo, tokenize=False) == "<s>Q:47+38\nA:85</s>"


def test_b27_bos_once_whether_template_tokenizes_or_text_is_encoded() -> None:
    """B27: the template holds BOS; encoding the rendered text (even with special tokens) adds none."""
    tok = build_tokenizer()
    msgs = [{"role": "user", "content": "hi"}]
    via_template = tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)["input_ids"]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    for ids in (via_template, tok(text)["input_ids"], tok(text, add_special_tokens=False)["input_ids"]):
        assert ids == [1, 56, 81, 21, 22, 99, 40, 81]  # <s> Q : h i \n A :
        assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id


def test_sloppy_sum_hand_values() -> None:
    assert sloppy_sum(47, 38) == 75  # forgot the carry: true sum 85
    assert sloppy_sum(71, 52) == 123  # no carry between columns: correct
    assert sloppy_sum(99, 99) == 188  # true sum 198
    assert sloppy_sum(5, 18) == 13  # one-digit operand: true sum 23


def test_unknown_model_name_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"unknown built-in model 'tiny'.*\['tiny-arithmetic', 'tiny-calculator'\]"):
        get_builtin_model_dir("tiny")
    with pytest.raises(ValueError, match="valid names"):
        load_builtin_tokenizer("tiny")


# --------------------------------------------------------------------------- shipped model
def test_shipped_model_loads_offline_and_matches_its_record() -> None:
    """The asset loads with the Auto classes; its recorded held-out greedy accuracy is reproduced.

    The warm start forgets most carries: about 1/4 held-out accuracy, the non-carrying quarter.
    """
    path = get_builtin_model_dir()
    assert path == builtin.ASSETS_DIR / "tiny-arithmetic"
    info = json.loads((path / "verl_builtin.json").read_text())
    assert info["spec"] == asdict(builtin.BUILTIN_MODELS["tiny-arithmetic"])
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.vocab_size == len(tok) == 100
    assert sum(p.numel() for p in model.parameters()) < 200_000
    sample = "<s>Q:47+38\nA:85</s>"
    assert tok(sample, add_special_tokens=False)["input_ids"] == build_tokenizer()(sample)["input_ids"]
    problems = arithmetic_problems("test")
    answers = greedy_answers(model, tok, problems)
    accuracy = sum(compute_score(r, str(a + b)) for r, (a, b) in zip(answers, problems)) / len(problems)
    assert accuracy == pytest.approx(info["test_greedy_accuracy"], abs=2 / len(problems))
    assert 0.15 <= accuracy <= 0.40
    plain = [(r, a, b) for r, (a, b) in zip(answers, problems) if not needs_carry(a, b)]
    assert sum(r == str(a + b) for r, a, b in plain) / len(plain) > 0.85


# ---------------------------------------------------------------------------- build, cache
def test_build_writes_loadable_dir_with_info(tmp_path: Path) -> None:
    out = build_builtin_model(tmp_path / "m", TINY)
    info = json.loads((out / "verl_builtin.json").read_text())
    assert info["spec"] == asdict(TINY) and 0.0 <= info["test_greedy_accuracy"] <= 1.0
    assert info["sft_path"] == "verl.trainer.sft_trainer"  # the warm start is a `verl sft` run
    model = AutoModelForCausalLM.from_pretrained(out)
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (16, 1)
    tok = AutoTokenizer.from_pretrained(out)
    assert (
        tok.apply_chat_template([{"role": "user", "content": "1+2"}], add_generation_prompt=True, tokenize=False)
        == "<s>Q:1+2\nA:"
    )


def test_build_is_reproducible(tmp_path: Path) -> None:
    a = build_builtin_model(tmp_path / "a", TINY)
    b = build_builtin_model(tmp_path / "b", TINY)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_stale_asset_is_an_error_naming_the_build_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec that differs from the shipped asset's record never trains: one line says what to run."""
    monkeypatch.setitem(builtin.BUILTIN_MODELS, "tiny-arithmetic", TINY)
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))

    def fail(*args: object) -> None:
        raise AssertionError("the resolver started a build")

    monkeypatch.setitem(recipes_build.BUILDERS, "tiny-arithmetic", fail)
    with pytest.raises(
        ModelError,
        match=r"^built-in model 'tiny-arithmetic': the shipped .* is stale .*"
        r"build it with `verl builtin build tiny-arithmetic`$",
    ) as err:
        get_builtin_model_dir("tiny-arithmetic")
    assert "\n" not in str(err.value) and not (tmp_path / "builtin").exists()


def test_missing_asset_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin, "ASSETS_DIR", tmp_path / "assets")
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    with pytest.raises(ModelError, match=r"is missing .*`verl builtin build tiny-calculator`"):
        get_builtin_model_dir("tiny-calculator")


def test_build_command_writes_the_cache_the_resolver_then_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``verl builtin build`` builds a stale model into the cache, atomically; then it is up to date."""
    monkeypatch.setitem(builtin.BUILTIN_MODELS, "tiny-arithmetic", TINY)
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    assert recipes_build.main(["build", "tiny-arithmetic"]) == 0
    first = get_builtin_model_dir("tiny-arithmetic")
    assert first == builtin.cache_dir("tiny-arithmetic") and first.name.startswith("tiny-arithmetic-")
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name]  # no temporary directory left
    assert json.loads((first / "verl_builtin.json").read_text())["spec"] == asdict(TINY)

    def fail(*args: object) -> None:
        raise AssertionError("rebuilt although the cache is complete")

    monkeypatch.setitem(recipes_build.BUILDERS, "tiny-arithmetic", fail)
    assert recipes_build.main(["build", "tiny-arithmetic", "tiny-calculator"]) == 0  # both current: no build
    assert get_builtin_model_dir("tiny-arithmetic") == first
    out = capsys.readouterr().out
    assert f"tiny-arithmetic: up to date at {first}" in out and "tiny-calculator: up to date at" in out
    assert recipes_build.main(["list"]) == 0
    assert str(first) in capsys.readouterr().out


def test_build_command_refuses_an_unknown_name_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from verl.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["builtin", "build", "tiny"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "verl builtin: error: unknown built-in model 'tiny'; valid names: ['tiny-arithmetic', 'tiny-calculator']"
    )


@pytest.mark.slow
@pytest.mark.e2e  # a whole SFT run
@pytest.mark.timeout(3600)  # ~5 min on one core of a loaded 2-core machine
def test_full_build_through_sft_path_reproduces_the_shipped_asset(tmp_path: Path) -> None:
    """A rebuild runs the product's SFT trainer with the shipped recipe and remakes the shipped asset.

    With the torch version and CPU capability recorded in the shipped info file the rebuild is the
    same bytes and the same record; elsewhere float reduction order may differ, and what must
    hold is the quality the quick start relies on (shipped: 28.1 % held out, SFT loss 0.129).
    """
    out = build_builtin_model(tmp_path / "full")
    info = json.loads((out / "verl_builtin.json").read_text())
    shipped_dir = builtin.ASSETS_DIR / "tiny-arithmetic"
    shipped = json.loads((shipped_dir / "verl_builtin.json").read_text())
    assert info["spec"] == shipped["spec"] and info["sft_path"] == "verl.trainer.sft_trainer"
    assert info["build_version"] == shipped["build_version"] == builtin.BuiltinModelSpec.build_version
    if (info["torch"], info["cpu_capability"]) == (shipped["torch"], shipped["cpu_capability"]):
        assert info == shipped
        for name in ("model.safetensors", "config.json", "tokenizer.json", "generation_config.json"):
            assert (out / name).read_bytes() == (shipped_dir / name).read_bytes(), name
    else:
        assert info["test_greedy_accuracy"] == pytest.approx(shipped["test_greedy_accuracy"], abs=0.05)
        assert info["final_sft_loss"] < 0.3
