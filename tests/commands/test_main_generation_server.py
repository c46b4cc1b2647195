"""verl's main_generation_server: replicas behind /v1/chat/completions give verl generate's tokens for the same seed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from verl.data.prepare import write_parquet

CHAT = [{"role": "user", "content": "1+2="}]


def _rl_cfg(model: Path, data: str, *extra: str):
    from verl.config.loader import load_config

    return load_config(
        None,
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files=[{data}]",
            "data.prompt_key=prompt",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.response_length=6",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.temperature=1.0",
            "trainer.device=cpu",
            "trainer.n_gpus_per_node=2",
            *extra,
        ],
    )


def _verl_generate(model: Path, data: str, out: str, seed: int) -> list[list[str]]:
    from verl.config.offline import load_generation_config
    from verl.commands.generate import generate

    cfg = load_generation_config(
        None,
        [
            f"model.path={model}",
            f"data.path={data}",
            f"data.output_path={out}",
            "data.prompt_key=prompt",
            "data.n_samples=2",
            "data.batch_size=1",
            "rollout.response_length=6",
            "rollout.temperature=1.0",
            f"rollout.seed={seed}",
            "trainer.device=cpu",
        ],
    )
    generate(cfg, log=lambda *_: None)
    import pyarrow.parquet as pq

    return [list(r) for r in pq.read_table(out).column("responses").to_pylist()]


def test_server_request_equals_verl_generate(tmp_path: Path, tiny_model_dir: Path) -> None:
    from verl.commands.generate_server import generate_with_servers, start_servers, submit_request

    torch.set_num_threads(1)
    data = str(tmp_path / "p.parquet")
    write_parquet(
        [
            {"prompt": CHAT},
            {"prompt": [{"role": "user", "content": "7*3="}]},
            {"prompt": [{"role": "user", "content": "9-4="}]},
        ],
        Path(data),
    )
    expected = _verl_generate(tiny_model_dir, data, str(tmp_path / "gen.parquet"), seed=5)
    cfg = _rl_cfg(tiny_model_dir, data, "actor_rollout_ref.rollout.seed=5")
    replicas = start_servers(cfg)
    try:
        assert len(replicas) == 2  # n_gpus_per_node=2, tensor_model_parallel_size=1
        addresses = [f"{r.host}:{r.port}" for r in replicas]
        assert (
            generate_with_servers(cfg, addresses, [CHAT, *[[{"role": "user", "content": c}] for c in ("7*3=", "9-4=")]])
            == expected
        )
        # a plain OpenAI request with seed=5 samples row 0's seeds of verl generate
        answer = submit_request(addresses[1], {"model": "m", "messages": CHAT, "n": 2, "seed": 5, "max_tokens": 6})
        assert [c["message"]["content"] for c in answer["choices"]] == expected[0]
        tok = replicas[0].tokenizer
        assert [tok.decode(c["token_ids"], skip_special_tokens=True) for c in answer["choices"]] == expected[0]
        assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] > 0
        greedy = [submit_request(a, {"messages": CHAT, "temperature": 0, "max_tokens": 6}) for a in addresses]
        assert greedy[0]["choices"][0]["token_ids"] == greedy[1]["choices"][0]["token_ids"]
        bad = urllib.request.Request(f"http://{addresses[0]}/v1/chat/completions", data=b'{"n": 1}')
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad, timeout=30)
        assert e.value.code == 400 and "messages" in json.loads(e.value.read())["error"]["message"]
    finally:
        for r in replicas:
            r.close()


def test_cli_writes_responses(tmp_path: Path, tiny_model_dir: Path) -> None:
    from verl.commands.generate_server import main

    torch.set_num_threads(1)
    data, out = tmp_path / "p.parquet", tmp_path / "out" / "gen.parquet"
    write_parquet([{"prompt": CHAT}], data)
    rc = main(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files=[{data}]",
            "data.prompt_key=prompt",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.response_length=4",
            "actor_rollout_ref.rollout.n=1",
            "trainer.device=cpu",
            f"+data.output_path={out}",
        ]
    )
    import pyarrow.parquet as pq

    assert rc == 0 and len(pq.read_table(out).column("responses").to_pylist()[0]) == 1


@pytest.mark.slow  # verl's shell script end to end; the module's in-process tests stay in the default suite
@pytest.mark.e2e
def test_verl_generation_server_script(tmp_path: Path, tiny_model_dir: Path) -> None:
    """verl's examples/generation/run_deepseek_llm_7b.sh (examples/verl_scripts/generation_server.sh):
    paths, sizes, GPU count and rollout.name=hf replaced; 2 replicas, 2 samples per prompt."""
    import os
    import subprocess
    import sys

    import pyarrow.parquet as pq

    root = Path(__file__).resolve().parents[2]
    data, out = tmp_path / "p.parquet", tmp_path / "gen" / "out.parquet"
    write_parquet([{"prompt": CHAT}, {"prompt": [{"role": "user", "content": "2+2="}]}], data)
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": str(root),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "MODEL_PATH": str(tiny_model_dir),
        "DATA_PATH": str(data),
        "OUTPUT_PATH": str(out),
        "NGPUS_PER_NODE": "2",
        "ROLLOUT_TP": "1",
        "PROMPT_LENGTH": "512",
        "RESPONSE_LENGTH": "4",
        "N_SAMPLES": "2",
        "ROLLOUT_NAME": "hf",
    }
    r = subprocess.run(
        ["bash", str(root / "examples" / "verl_scripts" / "generation_server.sh"), "trainer.device=cpu"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    responses = pq.read_table(out).column("responses").to_pylist()
    assert [len(x) for x in responses] == [2, 2]
