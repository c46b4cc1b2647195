"""One standalone rollout replica behind an OpenAI-style HTTP endpoint (``POST /v1/chat/completions``).

`ChatCompletionsReplica` holds a rollout engine (``hf`` by default) and a tokenizer and answers
chat-completion requests: the messages are rendered with the chat template exactly as
``verl generate`` and RL training render prompts (`verl.data.rl_dataset.render_prompts`), the
``n`` choices are sampled as one batch of ``n`` rows, and the answer is OpenAI's
``chat.completion`` object with each choice's ``token_ids`` added (as vLLM's server can).

Request fields read: ``messages`` (required), ``n`` (1), ``temperature`` (1.0; 0 = greedy),
``top_p`` (1.0), ``top_k`` (-1 = off), ``max_tokens`` (default ``rollout.response_length``),
``seed`` and ``sample_seeds``. Seeds: with ``seed`` S, choice j is drawn from the generator
seeded ``SeedSequence((S, 0, j))`` — the seeds ``verl generate`` uses for the first row of a file
with ``rollout.seed=S`` — so the same prompt and seed give the same tokens as ``verl generate``
(`verl.commands.generate.sample_seeds`); ``sample_seeds`` (a list of ``n`` ints) gives each
choice's generator seed directly; neither = the engine's own generator. Requests are served one at a
time per replica (a lock around the engine); concurrency comes from several replicas.
Other paths: ``GET /health``, ``GET /v1/models``. A malformed request is a 400 with
``{"error": {"message": ...}}``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

__all__ = ["ChatCompletionsReplica"]


class ChatCompletionsReplica:
    """A rollout engine served on ``host:port`` (port 0 = a free one).

    Args:
        engine: a rollout engine with ``generate_sequences(DataProto) -> DataProto`` (`HFRollout`).
        tokenizer: the model's tokenizer (chat template, pad and eos ids).
        model_name: the ``model`` reported in answers (verl's clients send the model path).
        default_max_tokens: ``rollout.response_length``, used when a request has no ``max_tokens``.
        chat_template_kwargs: extra ``apply_chat_template`` arguments (``data.apply_chat_template_kwargs``).
    """

    def __init__(
        self,
        engine: Any,
        tokenizer: Any,
        model_name: str,
        default_max_tokens: int,
        chat_template_kwargs: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.engine, self.tokenizer, self.model_name = engine, tokenizer, model_name
        self.default_max_tokens, self.chat_template_kwargs = default_max_tokens, dict(chat_template_kwargs or {})
        self.host, self.port = host, port
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------------------- serving
    def start(self) -> str:
        """Serve in a daemon thread; returns the address ``host:port``."""
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # no per-request lines on stderr
                return

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/health":
                    self._send(200, {"status": "ok"})
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": replica.model_name, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    self._send(200, replica.complete(request))
                except (ValueError, KeyError, TypeError) as e:
                    self._send(400, {"error": {"message": f"{type(e).__name__}: {e}"}})

        self._httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True, name=f"chat-server-{self.port}").start()
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # ---------------------------------------------------------------------------- generation
    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """The ``chat.completion`` answer of one request (see the module docstring).

        Raises:
            ValueError: no ``messages``, ``n < 1``, ``sample_seeds`` of another length than ``n``.
        """
        messages, n = request.get("messages"), int(request.get("n", 1) or 1)
        if not isinstance(messages, list) or not messages:
            raise ValueError("'messages' must be a non-empty list of {role, content}")
        if n < 1:
            raise ValueError(f"'n' must be >= 1, got {n}")
        max_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or self.default_max_tokens)
        ids = self._render(messages)
        batch = self._batch(ids, n, request)
        with self._lock:
            out = self.engine.generate_sequences(batch)
        lengths = [int(x) for x in out.batch["response_mask"].sum(-1).tolist()]
        eos = set(out.meta_info.get("eos_token_id") or [])
        choices = []
        for j, (row, length) in enumerate(zip(out.batch["responses"].tolist(), lengths, strict=True)):
            tokens = row[:length]
            stopped = bool(tokens) and tokens[-1] in eos
            choices.append(
                {
                    "index": j,
                    "finish_reason": "stop" if stopped or length < max_tokens else "length",
                    "message": {
                        "role": "assistant",
                        "content": self.tokenizer.decode(tokens, skip_special_tokens=True),
                    },
                    "token_ids": tokens,
                }
            )
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "prompt_token_ids": ids,
            "usage": {
                "prompt_tokens": len(ids),
                "completion_tokens": sum(lengths),
                "total_tokens": len(ids) * n + sum(lengths),
            },
        }

    def _render(self, messages: list[dict[str, Any]]) -> list[int]:
        from verl.data.rl_dataset import render_prompts

        return render_prompts(self.tokenizer, [messages], self.chat_template_kwargs)[0]

    def _batch(self, ids: list[int], n: int, request: dict[str, Any]) -> Any:
        from verl.data.rl_dataset import left_pad, pad_token_id
        from verl.protocol import DataProto
        from verl.workers.rollout.layout import derive_seeds

        pad = pad_token_id(self.tokenizer)
        p_ids, mask, pos = left_pad(ids, len(ids), pad)
        tensors = {
            "input_ids": p_ids.repeat(n, 1),
            "attention_mask": mask.repeat(n, 1),
            "position_ids": pos.repeat(n, 1),
        }
        seeds = request.get("sample_seeds")
        if seeds is not None:
            if len(seeds) != n:
                raise ValueError(f"'sample_seeds' has {len(seeds)} seeds for n={n}")
            tensors["sample_seeds"] = torch.tensor([int(s) for s in seeds], dtype=torch.long)
        elif request.get("seed") is not None:
            # verl generate's seeds of row 0 (verl.commands.generate.sample_seeds)
            tensors["sample_seeds"] = torch.cat([derive_seeds([int(request["seed"]), 0, j], 1) for j in range(n)])
        temperature = float(request.get("temperature", 1.0))
        meta = {
            "pad_token_id": pad,
            "validate": False,
            "do_sample": temperature > 0,
            "temperature": temperature if temperature > 0 else 1.0,
            "top_p": float(request.get("top_p", 1.0)),
            "top_k": int(request.get("top_k", -1)),
            "response_length": int(
                request.get("max_tokens") or request.get("max_completion_tokens") or self.default_max_tokens
            ),
        }
        return DataProto.from_dict(tensors=tensors, meta_info=meta)
