"""Sandbox must-show (issue 9): sleeping past the timeout, raising, printing 1 MB, opening a socket,
writing outside the working directory — each contained, the caller keeps running."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from verl.tools import FunctionCall, ToolSession
from verl.tools.code_interpreter import PythonCodeTool
from verl.tools.sandbox import SandboxLimits, run_python

pytestmark = pytest.mark.e2e  # every test starts sandbox subprocesses

LIMITS = SandboxLimits(timeout_s=2.0, cpu_time_s=1, memory_mb=256, max_output_bytes=4096)


def run(code, limits=LIMITS):
    return asyncio.run(run_python(code, limits))


def test_plain_code_runs():
    r = run("print(sum(range(10)))")
    assert (r.status, r.exit_code, r.stdout, r.stderr) == ("ok", 0, "45\n", "")


def test_sleep_past_wall_timeout_is_killed():
    start = time.monotonic()
    r = run("import time\nprint('start', flush=True)\ntime.sleep(60)")
    assert time.monotonic() - start < 5.0
    assert r.status == "timeout" and r.exit_code == -9
    assert r.stdout == "start\n" and "wall-clock timeout of 2 s" in r.stderr


def test_busy_loop_hits_cpu_limit():
    r = run("while True:\n    pass", SandboxLimits(timeout_s=10.0, cpu_time_s=1, memory_mb=256))
    assert r.status == "timeout" and "CPU time limit of 1 s" in r.stderr
    assert r.duration_s < 8.0  # the CPU limit fired, not the 10 s wall clock


def test_exception_is_a_traceback_of_the_code_only():
    r = run("def f():\n    raise ValueError('boom')\nf()")
    assert r.status == "error" and r.exit_code == 1
    assert r.stderr.endswith("ValueError: boom\n") and 'File "<code>", line 2, in f' in r.stderr
    assert "_sandbox_child" not in r.stderr


def test_memory_limit():
    r = run("x = bytearray(400 * 1024 * 1024)")
    assert r.status == "error" and "MemoryError" in r.stderr


def test_one_megabyte_of_output_is_cut():
    r = run("print('x' * 1_000_000)\nprint('END')")
    assert r.status == "ok" and r.output_truncated
    assert len(r.stdout) < 4096 + 100
    assert r.stdout.startswith("x" * 100) and r.stdout.endswith("END\n")
    assert "bytes of output dropped" in r.stdout


def test_socket_is_refused():
    r = run("import socket\ns = socket.socket()\ns.connect(('93.184.216.34', 80))")
    assert r.status == "error"
    assert "PermissionError: sandbox: network access is disabled (socket.__new__)" in r.stderr


def test_network_namespace_has_only_loopback():
    r = run("print(open('/proc/self/net/dev').read())")
    if r.network_isolation == "none":
        pytest.skip("this kernel refuses network namespaces; only the audit hook applies")
    interfaces = [line.split(":")[0].strip() for line in r.stdout.splitlines()[2:] if ":" in line]
    assert interfaces == ["lo"]


def test_write_outside_working_directory_is_refused(tmp_path):
    target = tmp_path / f"escape-{uuid.uuid4().hex}.txt"
    code = (
        f"import os\n"
        f"for attempt in (lambda: open({str(target)!r}, 'w'), lambda: os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT),\n"
        f"                lambda: open('../{target.name}', 'a'), lambda: os.remove('/etc/hostname')):\n"
        f"    try:\n"
        f"        attempt()\n"
        f"        print('ESCAPED')\n"
        f"    except PermissionError as e:\n"
        f"        print('refused')\n"
        f"open('inside.txt', 'w').write('ok')\n"
        f"print(open('inside.txt').read())\n"
    )
    r = run(code)
    assert r.status == "ok", r.stderr
    assert r.stdout == "refused\nrefused\nrefused\nrefused\nok\n"
    assert not target.exists() and os.path.exists("/etc/hostname")


@pytest.mark.parametrize(
    "code, event",
    [
        ("import subprocess\nsubprocess.run(['true'])", "subprocess.Popen"),
        ("import os\nos.system('true')", "os.system"),
        ("import os\nos.kill(1, 0)", "os.kill"),
        ("import ctypes\nctypes.CDLL(None)", "ctypes.dlopen"),
    ],
)
def test_escape_hatches_are_refused(code, event):
    r = run(code)
    assert r.status == "error" and f"sandbox: {event} is not allowed" in r.stderr


def test_working_directory_is_temporary_and_removed():
    r = run("import os\nprint(os.getcwd())")
    cwd = r.stdout.strip()
    assert os.path.basename(cwd).startswith("verl-sandbox-") and not os.path.exists(cwd)


def test_code_tool_contained_in_a_session():
    tool = PythonCodeTool({"timeout_s": 1.5, "cpu_time_s": 1, "memory_limit_mb": 256})

    async def go():
        s = ToolSession({"code_interpreter": tool}, None, timeout_s=5.0, max_response_length=200, truncate_side="left")
        codes = ["print(6*7)", "import time\ntime.sleep(30)", "raise KeyError('k')", "print('y'*1_000_000)"]
        results = [await s.call(FunctionCall("code_interpreter", {"code": c})) for c in codes]
        return s, results

    s, results = asyncio.run(go())
    assert [r.status for r in results] == ["ok", "timeout", "error", "ok"]
    assert results[0].response.text == "42\n"
    assert "wall-clock timeout of 1.5 s" in results[1].response.text
    assert results[2].response.text.endswith("KeyError: 'k'")
    assert results[3].response.text == "y" * 200 + "...(truncated)"
    assert dict(s.counts) == {"ok": 2, "timeout": 1, "error": 1}


def test_cancellation_kills_the_process_group():
    async def go():
        task = asyncio.ensure_future(run_python("import time\nprint(flush=True)\ntime.sleep(60)", SandboxLimits(timeout_s=30)))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    start = time.monotonic()
    asyncio.run(go())
    assert time.monotonic() - start < 5.0
    # no sandbox child survives its cancelled caller
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _is_sandbox_child(p)]
    assert leftovers == []


def _is_sandbox_child(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return b"_sandbox_child.py" in cmd and b"time.sleep(60)" not in cmd and b"-I" in cmd
