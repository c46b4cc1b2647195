"""``python -m verl.trainer.main_generation_server [CONFIG] key=value ...``: verl's standalone rollout servers.

As verl's ``main_generation_server``: with verl's PPO keys (``actor_rollout_ref.model.path``,
``actor_rollout_ref.rollout.{name, n, temperature, top_p, response_length,
tensor_model_parallel_size}``, ``trainer.{n_gpus_per_node, nnodes, device, seed}``,
``data.{train_files, prompt_key}`` and ``data.output_path``), it starts
``n_gpus_per_node x nnodes / tensor_model_parallel_size`` rollout replicas, each behind its own
OpenAI-style endpoint (`verl.workers.rollout.chat_server`; here threads of this process on
127.0.0.1, each with its own copy of the model), splits the rows of ``data.train_files`` over the
replicas (``numpy.array_split``), sends every prompt (a chat list in ``data.prompt_key``) as one
request with ``n`` choices, and writes the rows plus ``responses`` (a list of ``n``
strings per row) to ``data.output_path``. ``temperature=0`` needs ``n=1`` (as verl).

Seeds: row i's choices use the seeds ``verl generate`` gives row i (``SeedSequence((seed, i, s))``,
``seed`` = ``rollout.seed`` or ``trainer.seed``), sent as the request's ``sample_seeds``, so the file
equals ``verl generate``'s with ``data.batch_size=1``. ``VERL_SERVE_SECONDS=N`` keeps the
servers up N seconds after the file is written (their addresses are printed) for other clients.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["generate_with_servers", "main", "start_servers", "submit_request"]

USAGE = __doc__.split("\n\n")[1]


def _split_output_path(overrides: Sequence[str]) -> tuple[str | None, list[str]]:
    """``data.output_path`` (verl passes it with or without ``+``) taken out of the RL overrides."""
    out, rest = None, []
    for o in overrides:
        key, _, value = o.lstrip("+").partition("=")
        if key == "data.output_path":
            out = value.strip("'\"")
        else:
            rest.append(o)
    return out, rest


def start_servers(cfg: Any) -> list[Any]:
    """Build and start the replicas of a loaded RL config; returns the started `ChatCompletionsReplica` list.

    Raises:
        ConfigError: a world size not divisible by ``rollout.tensor_model_parallel_size``.
    """
    import torch

    from verl.config.errors import ConfigError
    from verl.modules import create_model
    from verl.run.model_access import load_run_tokenizer
    from verl.workers.rollout import build_rollout_engine
    from verl.workers.rollout.chat_server import ChatCompletionsReplica

    t, arr = cfg.trainer, cfg.actor_rollout_ref
    ro = arr.rollout
    world, tp = t.n_gpus_per_node * t.nnodes, ro.tensor_model_parallel_size
    if world % tp:
        raise ConfigError(
            f"trainer.n_gpus_per_node x nnodes = {world} is not divisible by "
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}"
        )
    tokenizer = load_run_tokenizer(cfg)
    replicas = []
    for _ in range(world // tp):
        torch.manual_seed(t.seed)
        module = create_model("actor", arr.model, device=t.device).requires_grad_(False).eval()
        engine = build_rollout_engine(module, ro, tokenizer)
        if ro.name != "hf":
            engine.update_weights(module)
        replica = ChatCompletionsReplica(
            engine, tokenizer, arr.model.path, ro.response_length, dict(cfg.data.apply_chat_template_kwargs or {})
        )
        replica.start()
        replicas.append(replica)
    return replicas


def submit_request(address: str, request: dict[str, Any], timeout_s: float = 3600.0) -> dict[str, Any]:
    """POST one chat-completion request to ``http://<address>/v1/chat/completions``; returns the answer."""
    req = urllib.request.Request(
        f"http://{address}/v1/chat/completions",
        data=json.dumps(request).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer token-abc123"},
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def generate_with_servers(cfg: Any, addresses: list[str], chats: list[list[dict[str, Any]]]) -> list[list[str]]:
    """``rollout.n`` responses per chat, the chats split over the replicas; row i seeded as ``verl generate``'s
    row i."""
    import numpy as np

    from verl.workers.rollout.layout import derive_seeds

    ro, t = cfg.actor_rollout_ref.rollout, cfg.trainer
    seed = ro.seed if getattr(ro, "seed", None) is not None else t.seed
    n = ro.n
    parts = np.array_split(np.arange(len(chats)), len(addresses))
    jobs = []
    for address, rows in zip(addresses, parts):
        for i in rows.tolist():
            seeds = [int(derive_seeds([seed, i, s], 1)[0]) for s in range(n)]
            jobs.append(
                (
                    address,
                    {
                        "model": cfg.actor_rollout_ref.model.path,
                        "messages": chats[i],
                        "n": n,
                        "temperature": ro.temperature,
                        "top_p": ro.top_p,
                        "max_tokens": ro.response_length,
                        "sample_seeds": seeds,
                    },
                )
            )
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        answers = list(pool.map(lambda job: submit_request(*job), jobs))
    return [[c["message"]["content"] for c in a["choices"]] for a in answers]


def _run(config_path: str | None, overrides: list[str]) -> int:
    from verl.config.errors import ConfigError
    from verl.config.loader import load_config
    from verl.commands.generate import _write, read_data_rows

    output_path, rest = _split_output_path(overrides)
    if not output_path:
        raise ConfigError("data.output_path: set where the generated responses go (e.g. +data.output_path=gen.parquet)")
    cfg = load_config(config_path, rest)
    ro = cfg.actor_rollout_ref.rollout
    if ro.temperature == 0.0 and ro.n != 1:
        raise ConfigError("actor_rollout_ref.rollout.n must be 1 when temperature=0 (greedy samples are all equal)")
    rows: list[dict[str, Any]] = []
    for path in cfg.data.train_files:
        rows += read_data_rows(path, "data.train_files")[0]
    chats = [list(row[cfg.data.prompt_key]) for row in rows]
    replicas = start_servers(cfg)
    try:
        addresses = [f"{r.host}:{r.port}" for r in replicas]
        print(f"rollout servers: {', '.join(addresses)}", flush=True)
        responses = generate_with_servers(cfg, addresses, chats)
        Path(output_path).expanduser().parent.mkdir(parents=True, exist_ok=True)  # verl makes the directory
        _write([{**row, "responses": r} for row, r in zip(rows, responses, strict=True)], output_path)
        print(f"Saving results to {output_path}: {len(rows)} rows x {ro.n} responses", flush=True)
        time.sleep(float(os.environ.get("VERL_SERVE_SECONDS", "0")))
    finally:
        for r in replicas:
            r.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Returns the exit status (user errors: see `verl.cli`)."""
    from verl.config.cli import config_command

    return config_command(argv, USAGE, "main_generation_server", _run)


if __name__ == "__main__":
    from verl.cli import run_reporting_user_errors

    sys.exit(run_reporting_user_errors("python -m verl.trainer.main_generation_server", main, sys.argv[1:]))
