"""A ``calculator(expression)`` tool answered by the code-interpreter sandbox: the built-in tiny
calculator model calls ``calculator``, so a ``verl train calculator`` run with this tool drives
the real `PythonCodeTool` sandbox on every call (the multi-turn code-tool task of the secret test
and of ``benchmarks/bench_sandbox.py``).

With ``probe: true`` each call first searches everything the sandbox can see (its environment,
every ``/proc/<pid>/environ`` and ``cmdline``, the regular files under ``/tmp`` and ``/dev``, the
interpreter's read-only binds left out) for `SECRET_PREFIX`, the start of every secret the test
puts in the trainer's environment, and prints ``probe-hits=<n>`` before the answer."""

from __future__ import annotations

from typing import Any

from verl.tools.calculator import DEFAULT_SCHEMA
from verl.tools.code_interpreter import PythonCodeTool
from verl.tools.isolation import python_roots

SECRET_PREFIX = "VERLSECRET"
PROBE = """
import glob, os
_needle = ("VERL" + "SECRET").encode()
_RO_ROOTS = __RO_ROOTS__
_hits = []
if any(_needle.decode() in v for v in os.environ.values()):
    _hits.append("os.environ")
for _p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline") + \
glob.glob("/proc/[0-9]*/task/*/environ"):
    try:
        if _needle in open(_p, "rb").read():
            _hits.append(_p)
    except OSError:
        pass
for _top in ("/tmp", "/dev", "/proc/1/cwd", "/proc/1/root/tmp"):
    for _root, _dirs, _files in os.walk(_top):
        _dirs[:] = [d for d in _dirs if os.path.join(_root, d) not in _RO_ROOTS]
        for _f in _files:
            _path = os.path.join(_root, _f)
            try:
                if os.path.isfile(_path) and _needle in open(_path, "rb").read(1 << 20):
                    _hits.append(_path)
            except OSError:
                pass
open("probe.txt", "w").write(repr(_hits))
print(f"probe-hits={len(_hits)}")
"""
# the interpreter's read-only binds (a venv under /tmp shows inside the private /tmp) hold no
# secret of the run and would make the walk read a whole venv
PROBE = PROBE.replace("__RO_ROOTS__", repr(set(python_roots())))


class SandboxCalculatorTool(PythonCodeTool):
    """``calculator(expression)``: runs ``print(<expression>)`` in the code sandbox.

    Args:
        config: `PythonCodeTool` keys, plus ``probe`` (bool: run `PROBE` first).
        tool_schema: default the built-in calculator's schema.
    """

    def __init__(self, config: dict[str, Any] | None = None, tool_schema: dict[str, Any] | None = None) -> None:
        config = dict(config or {})
        self.probe = bool(config.pop("probe", False))
        super().__init__(config, tool_schema or DEFAULT_SCHEMA)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        expression = str(parameters.get("expression", ""))
        code = (PROBE if self.probe else "") + f"print({expression})"
        response, reward, metrics = await super().execute(instance_id, {"code": code}, **kwargs)
        response.text = response.text.rstrip("\n")
        return response, reward, metrics
