"""``verl generate`` with ``rollout.name=vllm`` (CPU build): the engine gets the model's weights and
samples what the ``hf`` engine samples.

Run: ``VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest -q -m vllm \
tests/workers/rollout/vllm/test_vllm_generate.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.workers.rollout.vllm.vllm_helpers import VLLM_MARKS

pytestmark = VLLM_MARKS


def test_vllm_greedy_generation_equals_hf_and_scores_alike(tmp_path: Path) -> None:
    from verl.config.offline import load_eval_config, load_generation_config
    from verl.commands.evaluate import evaluate
    from verl.commands.generate import generate

    outs = {}
    for name in ("hf", "vllm"):
        out = tmp_path / f"{name}.jsonl"
        generate(
            load_generation_config(
                None,
                [
                    "data.path=builtin://arithmetic/test",
                    f"data.output_path={out}",
                    "rollout.do_sample=false",
                    f"rollout.name={name}",
                ],
            ),
            log=lambda *_: None,
        )
        outs[name] = [json.loads(x)["responses"] for x in out.read_text().splitlines()]
    same = sum(a == b for a, b in zip(outs["hf"], outs["vllm"], strict=True))
    print(f"greedy responses equal on {same} of {len(outs['hf'])} prompts")
    assert same == len(outs["hf"]) == 512
    score = evaluate(load_eval_config(None, [f"data.path={tmp_path / 'vllm.jsonl'}"]))["test_score/builtin/arithmetic"]
    assert score == pytest.approx(144 / 512)  # the built-in model's greedy accuracy (the hf engine's too)
