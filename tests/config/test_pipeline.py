"""The one config pipeline: ``defaults:`` lists, presets, overrides and key errors behave the same
in ``verl train``, ``verl sft``, ``verl dpo``, ``verl generate`` and ``verl eval``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from verl.config import ConfigError, load_config
from verl.config.offline import EVAL_LAYOUT, GENERATION_LAYOUT, load_eval_config, load_generation_config
from verl.config.pipeline import list_presets, read_yaml
from verl.config.sft_loader import SFT_LAYOUT, load_sft_config

REPO = Path(__file__).resolve().parents[2]
OUT = ["data.path=builtin://arithmetic/test", "data.output_path=out.jsonl"]


def _train(path: Any, overrides: list[str]) -> Any:
    return load_config(path, overrides)


def _sft(path: Any, overrides: list[str]) -> Any:
    return load_sft_config(path, overrides, algorithm="sft")


def _dpo(path: Any, overrides: list[str]) -> Any:
    return load_sft_config(path, overrides, algorithm="dpo")


def _generate(path: Any, overrides: list[str]) -> Any:
    return load_generation_config(path, [*OUT, *overrides]).rl


# (loader, key A set by the base file, key B set by the including file, read a key of the result)
COMMANDS: dict[str, tuple[Callable[[Any, list[str]], Any], str, str, Callable[[Any, str], Any]]] = {
    "train": (_train, "actor_rollout_ref.actor.optim.lr", "trainer.total_epochs", lambda c, k: _get(c, k)),
    "sft": (_sft, "optim.lr", "trainer.total_epochs", lambda c, k: _get(c, k)),
    "dpo": (_dpo, "optim.lr", "dpo.beta", lambda c, k: _get(c, k)),
    # generate's rollout.temperature is the RL actor_rollout_ref.rollout.temperature
    "generate": (_generate, "rollout.top_p", "rollout.temperature", lambda c, k: _get(c, "actor_rollout_ref." + k)),
}


def _get(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _yaml(path: Path, tree: dict[str, Any]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return path


def _nested(key: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    return out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_defaults_list_and_delete_behave_the_same_in_every_command(command: str, tmp_path: Path) -> None:
    load, key_a, key_b, get = COMMANDS[command]
    default_a, default_b = get(load(None, []), key_a), get(load(None, []), key_b)
    value_a, value_b = 0.25, 3 if isinstance(default_b, int) else 0.5
    assert value_a != default_a and value_b != default_b
    sub = tmp_path / "base"
    sub.mkdir()
    _yaml(sub / "base.yaml", _nested(key_a, value_a))
    top = _yaml(tmp_path / "top.yaml", {"defaults": ["base/base.yaml", "_self_"], **_nested(key_b, value_b)})
    cfg = load(top, [])
    assert get(cfg, key_a) == value_a  # from the defaults list, relative to the including file
    assert get(cfg, key_b) == value_b  # the file's own key
    # ~key: back to the schema default; ~key=v deletes only when the value is v
    assert get(load(top, [f"~{key_a}"]), key_a) == default_a
    assert get(load(top, [f"~{key_a}={value_a}"]), key_a) == default_a
    with pytest.raises(ConfigError, match=rf"^~{key_a}=0\.5: the current value is 0\.25, not deleted$"):
        load(top, [f"~{key_a}=0.5"])
    # +key / ++key set a key the schema has, like key=v
    assert get(load(top, [f"+{key_a}=0.125"]), key_a) == get(load(top, [f"++{key_a}=0.125"]), key_a) == 0.125
    # a defaults cycle is refused
    _yaml(sub / "base.yaml", {"defaults": ["../top.yaml"], **_nested(key_a, value_a)})
    with pytest.raises(ConfigError, match="again \\(a cycle\\)"):
        load(top, [])


@pytest.mark.parametrize("command", list(COMMANDS))
def test_unknown_key_names_the_key_and_the_closest_valid_one_in_every_command(command: str) -> None:
    load, key_a, _, _ = COMMANDS[command]
    typo = key_a[:-1] + key_a[-1] * 2  # optim.lrr, rollout.top_pp
    shown = typo.removeprefix("actor_rollout_ref.") if command == "generate" else typo
    expect = shown.rpartition(".")[0] + "." + key_a.rpartition(".")[2]
    for override in (f"{typo}=1", f"+{typo}=1", f"~{typo}"):
        with pytest.raises(ConfigError) as err:
            load(None, [override.replace(typo, shown)])
        assert str(err.value).startswith(f"unknown key '{shown}' (did you mean '{expect}'?)"), str(err.value)


def test_sft_keys_inside_a_list_of_sections_are_checked():
    with pytest.raises(
        ConfigError, match=r"^unknown key 'hybrid.tasks\[0\].los' \(did you mean 'hybrid.tasks\[0\].loss'\?\)$"
    ):
        load_sft_config(None, ["trainer.algorithm=hybrid", "hybrid.tasks=[{name: a, los: sft, train_files: [x]}]"])


@pytest.mark.parametrize("layout", [SFT_LAYOUT, GENERATION_LAYOUT], ids=["sft", "generate"])
def test_every_preset_of_a_layout_loads(layout) -> None:
    names = list_presets(layout.preset_dir)
    assert names, layout.name
    for name in names:
        if layout is SFT_LAYOUT:
            raw = read_yaml(layout.preset_dir / f"{name}.yaml")
            cfg = load_sft_config(name, algorithm=raw.get("trainer", {}).get("algorithm", "sft"))
            assert cfg.trainer.experiment_name == name
        else:
            assert load_generation_config(name, ["data.output_path=o.jsonl"]).data.path


def test_a_file_builds_on_a_preset_by_name(tmp_path: Path) -> None:
    mine = _yaml(tmp_path / "mine.yaml", {"defaults": ["arithmetic_sft"], "optim": {"lr": 0.001}})
    cfg = load_sft_config(mine)
    assert cfg.model.partial_pretrain == "builtin://tiny-arithmetic" and cfg.optim.lr == 0.001
    assert cfg.trainer.experiment_name == "mine"
    gen = _yaml(tmp_path / "gen.yaml", {"defaults": ["arithmetic_greedy"], "data": {"output_path": "o.jsonl"}})
    assert not load_generation_config(gen).rl.actor_rollout_ref.rollout.do_sample
    with pytest.raises(
        ConfigError,
        match=r"config 'arithmetic_sf' not found: .*presets: arithmetic_dpo, "
        r"arithmetic_sft\) \(did you mean 'arithmetic_sft'\?\)",
    ):
        load_sft_config("arithmetic_sf")
    assert EVAL_LAYOUT.preset_dir is not None and list_presets(EVAL_LAYOUT.preset_dir) == []
    assert load_eval_config(None, ["data.path=g.jsonl", "~reward_model.timeout_s"]).reward_model.timeout_s == 30.0


def _cli(*commands: list[str]) -> list[tuple[int, str]]:
    """``python -m verl.cli <command>`` for each command, run at the same time: (exit status, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("VERL_DEBUG", None)
    env.pop("VERL_TRACEBACK", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "verl.cli", *c],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for c in commands
    ]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    return [(p.returncode, err) for p, err in zip(procs, errs)]


def test_the_same_typo_gives_the_same_error_line_from_train_and_sft_in_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from verl.cli import main

    lines = []
    for command in ("train", "sft"):
        assert main([command, "trainer.total_epochz=2"]) == 2
        lines.append(capsys.readouterr().err)
    message = "config error: unknown key 'trainer.total_epochz' (did you mean 'trainer.total_epochs'?)\n"
    assert lines == ["verl train: " + message, "verl sft: " + message]


@pytest.mark.e2e  # two fresh interpreters importing the trainers: ~25 s of CPU
def test_the_same_typo_gives_the_same_error_line_from_verl_train_and_verl_sft() -> None:
    train, sft = _cli(["train", "trainer.total_epochz=2"], ["sft", "trainer.total_epochz=2"])
    message = "config error: unknown key 'trainer.total_epochz' (did you mean 'trainer.total_epochs'?)\n"
    assert train == (2, "verl train: " + message), train[1][-2000:]
    assert sft == (2, "verl sft: " + message), sft[1][-2000:]


def test_every_config_command_prints_config_errors_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    from verl.cli import main

    cases = {
        "dpo": ("optim.lrr=1", "optim.lr"),
        "generate": ("data.n_sample=2", "data.n_samples"),
        "eval": ("data.pth=x", "data.path"),
        "config": ("show trainer.total_epochz=1", "trainer.total_epochs"),
    }
    for command, (override, fixed) in cases.items():
        assert main([command, *override.split()]) == 2
        typo = override.split()[-1].partition("=")[0]
        err = capsys.readouterr().err
        assert err == f"verl {command}: config error: unknown key '{typo}' (did you mean '{fixed}'?)\n", err


def test_value_rules_have_one_form_in_every_command() -> None:
    """The `Rule` tables of the RL, SFT and generate schemas word a bad value the same way."""
    for load in (_train, _sft, _generate):
        with pytest.raises(
            ConfigError, match=r"^data\.truncation: must be one of (\w+, )+\w+, got 'lef' \(did you mean 'left'\?\)$"
        ):
            load(None, ["data.truncation=lef"])
    with pytest.raises(ConfigError, match=r"^`model\.use_liger` is not supported yet: set it to false$"):
        load_sft_config(None, ["model.use_liger=true"])
    with pytest.raises(ConfigError, match=r"^reward_model\.timeout_s: must be > 0\.0, got 0\.0$"):
        load_eval_config(None, ["data.path=g.jsonl", "reward_model.timeout_s=0"])
