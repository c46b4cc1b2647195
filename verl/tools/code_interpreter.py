"""A Python code interpreter tool that runs the model's code in the OS-isolated sandbox.

``code_interpreter(code="print(47*38)")`` runs the code in a fresh bubblewrap sandbox
(`verl.tools.sandbox`, `verl.tools.isolation`: own user / PID / network namespaces, read-only
interpreter, a private ``/tmp`` as the only writable path, no environment of the trainer; CPU,
memory, file-size, process-count and wall limits enforced from outside) and answers with what it
printed: stdout, then stderr (tracebacks) if any, then a line for a killed run. A crash or a
limit is reported to the model in that text and flagged with ``metrics["status"]`` = ``error`` /
``timeout`` so the agent loop counts it; the rollout goes on. Each run takes a warm worker
(``warm_workers`` are kept started) and the worker is discarded after it.

Without bubblewrap the tool refuses to start (`verl.tools.isolation.IsolationError`, one line
naming the package) unless the config says ``unsafe_no_isolation: true``, which is logged once.

verl's ``SandboxFusionTool`` class path maps here (`verl.tools.registry.CLASS_ALIASES`); its
``default_timeout``, ``memory_limit_mb``, ``num_workers`` and ``default_language: python`` keys
work, a ``sandbox_fusion_url`` is refused (code runs locally, not on a remote service).
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from typing import Any

from verl.tools.base import BaseTool, ToolError, ToolResponse, check_config_keys
from verl.tools.sandbox import SandboxLimits, SandboxPool, SandboxResult

__all__ = ["PythonCodeTool", "format_result"]

DEFAULT_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "Run Python code and return what it prints (stdout and errors). No network, "
        "no files outside a scratch folder.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run."}},
            "required": ["code"],
        },
    },
}

_KEYS = {
    "timeout_s",
    "default_timeout",
    "cpu_time_s",
    "memory_limit_mb",
    "max_output_bytes",
    "max_concurrency",
    "num_workers",
    "default_language",
    "warm_workers",
    "max_processes",
    "tmpfs_mb",
    "unsafe_no_isolation",
}


def format_result(result: SandboxResult) -> str:
    """The text the model reads: stdout, then ``stderr:`` and its text when non-empty."""
    parts = [result.stdout]
    if result.stderr.strip():
        parts.append(("stderr:\n" if result.stdout else "") + result.stderr.strip("\n"))
    text = "\n".join(p for p in parts if p)
    return text if text.strip() else "(no output)"


class PythonCodeTool(BaseTool):
    """Runs Python code in the sandbox.

    Args:
        config: optional ``timeout_s`` (wall seconds, default 10; verl's ``default_timeout`` is
            the same), ``cpu_time_s`` (default 5), ``memory_limit_mb`` (default 512),
            ``max_output_bytes`` (kept per stream, default 65536), ``max_concurrency`` (runs at
            once per tool, default 2; verl's ``num_workers`` is the same), ``default_language``
            (only ``python``), ``warm_workers`` (isolated workers kept started, default =
            ``max_concurrency``; 0 = a cold start per run), ``max_processes`` (processes and
            threads per run, default 64), ``tmpfs_mb`` (the run's writable ``/tmp``, default 64),
            ``unsafe_no_isolation`` (default false: run without bubblewrap — never for real
            training; logged once).
        tool_schema: default :data:`DEFAULT_SCHEMA` (``code_interpreter``).

    Raises:
        ValueError: unknown key, ``sandbox_fusion_url``, another language, or bad limits.
        IsolationError: bubblewrap is missing or cannot sandbox here (and not ``unsafe_no_isolation``).
    """

    def __init__(self, config: dict[str, Any] | None = None, tool_schema: dict[str, Any] | None = None) -> None:
        config = config or {}
        if "sandbox_fusion_url" in config:
            raise ValueError("`sandbox_fusion_url` is not supported yet: code runs in the local sandbox; drop the key")
        check_config_keys(config, _KEYS, "PythonCodeTool")
        if config.get("default_language", "python") != "python":
            raise ValueError(f"`default_language={config['default_language']}` is not supported yet: only python")
        super().__init__(config, tool_schema or DEFAULT_SCHEMA)
        self.limits = SandboxLimits(
            timeout_s=float(config.get("timeout_s", config.get("default_timeout", 10.0))),
            cpu_time_s=int(config.get("cpu_time_s", 5)),
            memory_mb=int(config.get("memory_limit_mb", 512)),
            max_output_bytes=int(config.get("max_output_bytes", 64 * 1024)),
            max_processes=int(config.get("max_processes", 64)),
            tmpfs_mb=int(config.get("tmpfs_mb", 64)),
        )
        self.max_concurrency = int(config.get("max_concurrency", config.get("num_workers", 2)))
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        unsafe = config.get("unsafe_no_isolation", False)
        if not isinstance(unsafe, bool):
            raise ValueError(f"unsafe_no_isolation must be true or false, got {unsafe!r}")
        self.pool = SandboxPool(
            self.limits, warm=int(config.get("warm_workers", self.max_concurrency)), unsafe_no_isolation=unsafe
        )
        self._semaphores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> Semaphore

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """No per-trajectory state (every run gets a fresh sandbox); starts the warm workers."""
        self.pool.start()
        return instance_id or str(uuid.uuid4()), ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Runs ``parameters["code"]``; metrics carry ``status``, ``duration_s``, ``exit_code``."""
        code = parameters.get("code")
        if not isinstance(code, str):
            raise ToolError("code must be a string")
        # one semaphore per event loop: the rollout runs each step in a new asyncio.run, and a
        # semaphore bound to the previous step's loop raises under contention
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            semaphore = self._semaphores[loop] = asyncio.Semaphore(self.max_concurrency)
        async with semaphore:
            result = await self.pool.run(code)
        metrics = {
            "status": result.status,
            "duration_s": result.duration_s,
            "exit_code": result.exit_code,
            "output_truncated": result.output_truncated,
            "isolation": result.isolation,
        }
        return ToolResponse(text=format_result(result)), 0.0, metrics
