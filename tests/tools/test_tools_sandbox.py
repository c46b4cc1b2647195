"""The code sandbox's limits and its tool: sleeping past the timeout, burning CPU, raising,
allocating, printing 1 MB, opening a socket, writing outside the working directory — each
contained, the caller keeps running; the warm pool never reuses a worker; without bubblewrap the
tool refuses to start in one line, unless ``unsafe_no_isolation`` (logged once). The escape
probes against the OS boundary are in ``test_tools_sandbox_probes.py``."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from verl.tools import FunctionCall, ToolSession
from verl.tools.code_interpreter import PythonCodeTool
from verl.tools import isolation
from verl.tools.isolation import IsolationError, check_isolation
from verl.tools.sandbox import SandboxLimits, SandboxPool, run_python

try:
    check_isolation()
    _WHY = ""
except IsolationError as e:
    _WHY = str(e)

# every test starts sandbox subprocesses; all but the unsafe-mode ones need bubblewrap
pytestmark = pytest.mark.e2e
needs_bwrap = pytest.mark.skipif(bool(_WHY), reason=f"no OS isolation here: {_WHY}")

LIMITS = SandboxLimits(timeout_s=2.0, cpu_time_s=1, memory_mb=256, max_output_bytes=4096)


def run(code, limits=LIMITS):
    return asyncio.run(run_python(code, limits))


@needs_bwrap
def test_plain_code_runs():
    r = run("print(sum(range(10)))")
    assert (r.status, r.exit_code, r.stdout, r.stderr) == ("ok", 0, "45\n", "")


@needs_bwrap
def test_sleep_past_wall_timeout_is_killed():
    start = time.monotonic()
    r = run("import time\nprint('start', flush=True)\ntime.sleep(60)")
    assert time.monotonic() - start < 5.0
    assert r.status == "timeout" and r.exit_code == -9
    assert r.stdout == "start\n" and "wall-clock timeout of 2 s" in r.stderr


@needs_bwrap
def test_busy_loop_hits_cpu_limit():
    r = run("while True:\n    pass", SandboxLimits(timeout_s=10.0, cpu_time_s=1, memory_mb=256))
    assert r.status == "timeout" and "CPU time limit of 1 s" in r.stderr
    assert r.duration_s < 8.0  # the CPU limit fired, not the 10 s wall clock


@needs_bwrap
def test_exception_is_a_traceback_of_the_code_only():
    r = run("def f():\n    raise ValueError('boom')\nf()")
    assert r.status == "error" and r.exit_code == 1
    assert r.stderr.endswith("ValueError: boom\n") and 'File "<code>", line 2, in f' in r.stderr
    assert "_sandbox_child" not in r.stderr


@needs_bwrap
def test_memory_limit():
    r = run("x = bytearray(400 * 1024 * 1024)")
    assert r.status == "error" and "MemoryError" in r.stderr


@needs_bwrap
def test_one_megabyte_of_output_is_cut():
    r = run("print('x' * 1_000_000)\nprint('END')")
    assert r.status == "ok" and r.output_truncated
    assert len(r.stdout) < 4096 + 100
    assert r.stdout.startswith("x" * 100) and r.stdout.endswith("END\n")
    assert "bytes of output dropped" in r.stdout


@needs_bwrap
def test_socket_is_refused():
    r = run("import socket\ns = socket.socket()\ns.connect(('93.184.216.34', 80))")
    assert r.status == "error"
    assert "PermissionError: sandbox: network access is disabled (socket.__new__)" in r.stderr


@needs_bwrap
def test_network_namespace_has_only_loopback():
    r = run("print(open('/proc/self/net/dev').read())")
    assert r.isolation == "bubblewrap"
    interfaces = [line.split(":")[0].strip() for line in r.stdout.splitlines()[2:] if ":" in line]
    assert interfaces == ["lo"]


@needs_bwrap
def test_write_outside_working_directory_is_refused(tmp_path):
    target = tmp_path / f"escape-{uuid.uuid4().hex}.txt"
    code = (
        f"import os\n"
        f"for attempt in (lambda: open({str(target)!r}, 'w'), "
        f"lambda: os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT),\n"
        f"                lambda: open('../{target.name}', 'a'), lambda: os.remove('/etc/hostname')):\n"
        f"    try:\n"
        f"        attempt()\n"
        f"        print('ESCAPED')\n"
        f"    except PermissionError as e:\n"
        f"        print('refused')\n"
        f"    except FileNotFoundError as e:\n"
        f"        print('missing')\n"
        f"open('inside.txt', 'w').write('ok')\n"
        f"print(open('inside.txt').read())\n"
    )
    r = run(code)
    assert r.status == "ok", r.stderr
    # the host's /tmp is not even there: the first two land in the private /tmp, whose folder is missing
    assert r.stdout == "missing\nmissing\nrefused\nrefused\nok\n"
    assert not target.exists() and os.path.exists("/etc/hostname")


@needs_bwrap
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


@needs_bwrap
def test_working_directory_is_a_private_tmpfs_gone_after_the_run():
    r = run("import os\nopen('left.txt', 'w').write('x')\nprint(os.getcwd(), sorted(os.listdir('.')))")
    # an interpreter that lives under /tmp (a clone there) is bound read-only inside it
    binds = {p.split("/")[2] for p in isolation.python_roots() if p.startswith("/tmp/")}
    assert r.stdout == f"/tmp {sorted(['left.txt', *binds])}\n"
    assert run("import os\nprint(sorted(os.listdir('.')))").stdout == f"{sorted(binds)}\n"  # the next run starts empty


@needs_bwrap
def test_warm_pool_gives_each_snippet_a_fresh_worker():
    async def go():
        pool = SandboxPool(LIMITS, warm=2)
        try:
            code = (
                "import os, builtins\nprint(getattr(builtins, 'LEAK', None), os.path.exists('/tmp/mark'))\n"
                "builtins.LEAK = 1\nopen('/tmp/mark', 'w')"
            )
            return [await pool.run(code) for _ in range(4)], len(pool._ready)
        finally:
            pool.close()

    rs, ready = asyncio.run(go())
    assert [r.stdout for r in rs] == ["None False\n"] * 4 and ready <= 2


def test_without_bubblewrap_the_tool_refuses_in_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    isolation.check_isolation.cache_clear()
    try:
        with pytest.raises(IsolationError) as e:
            PythonCodeTool({})
        assert (
            "\n" not in str(e.value)
            and "bubblewrap" in str(e.value)
            and "apt-get install -y bubblewrap" in str(e.value)
        )
        assert "unsafe_no_isolation: true" in str(e.value)
    finally:
        isolation.check_isolation.cache_clear()


def test_unsafe_no_isolation_runs_and_says_so_once(monkeypatch, caplog):
    from verl.tools import sandbox

    monkeypatch.setattr(sandbox, "_UNSAFE_LOGGED", False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap: the opt-out still runs
    isolation.check_isolation.cache_clear()
    try:
        tools = [PythonCodeTool({"unsafe_no_isolation": True, "warm_workers": 0}) for _ in range(2)]
        result = asyncio.run(tools[0].pool.run("print(6*7)"))
    finally:
        isolation.check_isolation.cache_clear()
    assert (result.stdout, result.isolation) == ("42\n", "none")
    warnings = [r for r in caplog.records if "UNSAFE: unsafe_no_isolation=true" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
    with pytest.raises(ValueError, match="unsafe_no_isolation must be true or false"):
        PythonCodeTool({"unsafe_no_isolation": "yes"})


@needs_bwrap
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


@needs_bwrap
def test_cancellation_kills_the_sandbox():
    marker = f"verl-cancel-{uuid.uuid4().hex}"
    code = (
        "import os, sys\nprint(flush=True)\n"
        f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])"
    )

    async def go():
        task = asyncio.ensure_future(run_python(code, SandboxLimits(timeout_s=30, audit_hook=False)))
        await asyncio.sleep(1.0)
        assert _processes_with(marker)  # running, before the cancel
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    start = time.monotonic()
    asyncio.run(go())
    assert time.monotonic() - start < 5.0
    time.sleep(0.3)
    assert _processes_with(marker) == []  # nothing of the sandbox survives its cancelled caller


def _processes_with(marker: str) -> list[str]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


def test_doctor_reports_the_isolation(monkeypatch):
    from verl.commands.doctor import sandbox_isolation

    isolation.check_isolation.cache_clear()
    name, status, detail = sandbox_isolation()
    if _WHY:
        assert (status, detail) == ("WARN", f"no OS isolation: {_WHY}")
    else:
        assert (name, status) == ("code sandbox", "ok" if check_isolation().process_cap else "WARN")
        assert detail.startswith("bubblewrap ")
        assert "user/mount/pid/ipc/uts/net namespaces" in detail and "process count:" in detail
    monkeypatch.setenv("PATH", "/nonexistent")
    isolation.check_isolation.cache_clear()
    try:
        assert sandbox_isolation()[1:] == (
            "WARN",
            "no OS isolation: bubblewrap (`bwrap`) is not installed: " + isolation.INSTALL_HINT,
        )
    finally:
        isolation.check_isolation.cache_clear()


@needs_bwrap
def test_code_tool_works_across_event_loops_under_contention():
    """The rollout runs every step in its own asyncio.run: the second step's calls must not fail
    on a semaphore bound to the first step's loop."""
    tool = PythonCodeTool({"timeout_s": 5, "max_concurrency": 1, "warm_workers": 1})

    async def step():
        calls = [tool.execute("i", {"code": f"print({i})"}) for i in range(3)]  # more than max_concurrency
        return [r.text for r, _, _ in await asyncio.gather(*calls)]

    assert [asyncio.run(step()) for _ in range(2)] == [["0\n", "1\n", "2\n"]] * 2
    tool.pool.close()


@needs_bwrap
def test_a_clean_end_still_runs_atexit_flushes_and_joins_threads():
    code = (
        "import atexit, sys, threading, time\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "sys.stdout.write('no newline')\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print(' thread done'))).start()\n"
    )
    r = run(code)
    assert (r.status, r.stdout) == ("ok", "no newline thread done\natexit ran\n")
    r = run("import atexit\natexit.register(lambda: print('bye'))\nprint('hi', end='')")
    assert (r.status, r.stdout) == ("ok", "hibye\n")


@needs_bwrap
def test_a_forked_process_gets_its_own_spawner_and_workers():
    pool = SandboxPool(LIMITS, warm=1)
    assert asyncio.run(pool.run("print(1)")).stdout == "1\n"  # the spawner thread exists now
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's spawner thread is not here
        try:
            ok = asyncio.run(asyncio.wait_for(pool.run("print(2)"), 20)).stdout == "2\n"
            pool.close(wait=True)  # os._exit skips the atexit close
        except BaseException:
            ok = False
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(r)
    pool.close()


def test_bwrap_command_line():
    info = isolation.IsolationInfo(
        bwrap="/usr/bin/bwrap",
        version="bubblewrap 0.6.1",
        prlimit="/usr/bin/prlimit",
        pids_cgroup=None,
        disable_userns=isolation._version_tuple("bubblewrap 0.6.1") >= (0, 8, 0),
    )
    limits = {"memory_bytes": 2**28, "cpu_time_s": 2, "max_file_bytes": 2**20, "max_open_files": 64}
    argv = isolation.sandbox_command(info, ["/py", "-c", "pass"], limits, 2**23)
    assert argv[:7] == [
        "/usr/bin/prlimit",
        f"--as={2**28}",
        "--cpu=2:3",
        f"--fsize={2**20}",
        "--nofile=64",
        "--core=0",
        "--",
    ]
    assert argv[7:10] == ["/usr/bin/bwrap", "--unshare-all", "--unshare-user"] and "--disable-userns" not in argv
    for flag in ("--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert argv[argv.index("--tmpfs") - 2 : argv.index("--tmpfs") + 2] == ["--size", str(2**23), "--tmpfs", "/tmp"]
    assert argv[-4:] == ["--", "/py", "-c", "pass"]
    assert isolation._version_tuple("bubblewrap 0.8.0") == (0, 8, 0) and isolation._version_tuple("weird") == ()


@needs_bwrap
def test_an_interpreter_under_tmp_stays_visible(monkeypatch):
    # bwrap mounts in argument order: the private /tmp must come before the interpreter's binds,
    # or a venv under /tmp (a clone there) is hidden and every run fails with execvp
    monkeypatch.setattr(isolation, "python_roots", lambda: ["/tmp/clone/.venv"])
    argv = isolation.sandbox_command(
        check_isolation(),
        ["/tmp/clone/.venv/bin/python", "-c", "1"],
        {"memory_bytes": 1 << 30, "cpu_time_s": 5, "max_file_bytes": 1 << 20, "max_open_files": 64},
        1 << 20,
    )
    tmpfs = argv.index("--tmpfs")
    bind = [i for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 1] == "/tmp/clone/.venv"]
    assert argv[tmpfs + 1] == "/tmp" and bind and bind[0] > tmpfs
