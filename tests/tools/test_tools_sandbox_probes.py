"""Escape probes against the bubblewrap sandbox, one test per class of attack that model code can
write: read other processes' environment and files, write / delete outside through every path
API, tamper with the sandbox's own Python state, start processes by every route, outlive the run,
signal other processes, reach the network, raise limits, fill the disk, fork-bomb. The probes run
with the Python audit hook off (``audit_hook=False``) unless they attack it: what is tested is
the OS boundary. Each asserts containment from the host side where it can (files, processes,
listeners on the host), not only from what the sandboxed code prints."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from verl.tools.isolation import IsolationError, check_isolation, python_roots
from verl.tools.sandbox import SandboxLimits, SandboxPool

try:
    ISOLATION = check_isolation()
    _WHY = ""
except IsolationError as e:
    ISOLATION, _WHY = None, str(e)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(ISOLATION is None, reason=f"no OS isolation here: {_WHY}")]

SECRET = f"verl-probe-secret-{uuid.uuid4().hex}"
LIMITS = SandboxLimits(
    timeout_s=3.0,
    cpu_time_s=2,
    memory_mb=256,
    max_output_bytes=16384,
    tmpfs_mb=8,
    max_file_bytes=4 * 1024 * 1024,
    max_processes=16,
    audit_hook=False,
)

# prints one JSON object; `attempt(name, fn)` records "ok: <result>" or the exception's type
PRELUDE = """
import json, os, sys
RESULTS = {}
def attempt(name, fn):
    try:
        RESULTS[name] = "ok: " + repr(fn())[:200]
    except BaseException as e:
        RESULTS[name] = type(e).__name__
def report():
    print(json.dumps(RESULTS), flush=True)
"""


def run(code: str, limits: SandboxLimits = LIMITS):
    """Runs PRELUDE + code in a cold sandbox started now (after the test set its environment)."""
    return asyncio.run(SandboxPool(limits).run(PRELUDE + code))


def results(r) -> dict[str, str]:
    assert r.stdout.strip(), (r.status, r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture()
def secret_env(monkeypatch, tmp_path):
    """The secret in this (trainer) process's environment and in a host file the sandbox must not read."""
    monkeypatch.setenv("VERL_PROBE_SECRET", SECRET)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    secret_file = tmp_path / "credentials"
    secret_file.write_text(SECRET)
    return secret_file


@pytest.fixture()
def host_target():
    """A file in a directory the sandbox sees read-only (the venv root), and that directory."""
    folder = os.path.realpath(sys.prefix)
    target = os.path.join(folder, f"verl-probe-{uuid.uuid4().hex}.txt")
    with open(target, "w") as f:
        f.write("untouched")
    os.chmod(target, 0o644)
    before = set(os.listdir(folder))
    yield target, folder, before
    os.remove(target)


def assert_target_untouched(target: str, folder: str, before: set[str]) -> None:
    with open(target) as f:
        assert f.read() == "untouched"
    assert oct(os.stat(target).st_mode & 0o777) == "0o644"
    assert set(os.listdir(folder)) == before  # nothing created, renamed or linked next to it


def test_cannot_read_the_trainers_environment_or_files(secret_env):
    code = f"""
import glob
SECRET = {SECRET!r}
found = []
if any(SECRET in v for v in os.environ.values()):
    found.append("os.environ")
for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/task/*/environ"):
    try:
        if SECRET.encode() in open(path, "rb").read():
            found.append(path)
    except OSError:
        pass
for top in ("/tmp", "/dev", "/proc/self/cwd"):
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in {set(python_roots())!r}]  # read-only interpreter
        for name in files:
            try:
                if SECRET.encode() in open(os.path.join(root, name), "rb").read(1 << 20):
                    found.append(os.path.join(root, name))
            except OSError:
                pass
RESULTS["found"] = found
RESULTS["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
RESULTS["ppid"] = os.getppid()
attempt("parent_environ", lambda: open("/proc/{os.getpid()}/environ").read())
attempt("host_file", lambda: open({str(secret_env)!r}).read())
attempt("repo_readme", lambda: open({os.path.abspath("README.md")!r}).read())
attempt("etc_shadow", lambda: open("/etc/shadow").read())
attempt("root_home", lambda: os.listdir("/root"))
attempt("host_root_via_proc", lambda: os.listdir("/proc/1/root/etc"))
RESULTS["top"] = sorted(os.listdir("/"))
report()
"""
    r = run(code, dataclasses.replace(LIMITS, timeout_s=20.0, cpu_time_s=15))  # the walk is slow on a loaded machine
    out = results(r)
    assert out["found"] == [] and SECRET not in r.stdout + r.stderr
    assert out["pids"] == [1, 2] and out["ppid"] == 1  # bwrap's init and the code: no host process is visible
    for name in ("parent_environ", "host_file", "repo_readme", "etc_shadow", "host_root_via_proc"):
        assert out[name] in ("FileNotFoundError", "PermissionError"), (name, out[name])
    assert out["root_home"] in ("FileNotFoundError", "ok: []") or ".bashrc" not in out["root_home"]
    assert "etc" not in out["top"] and "home" not in out["top"]


def test_cannot_write_or_delete_outside_through_any_path_api(host_target):
    target, folder, before = host_target
    new = os.path.join(folder, "verl-probe-created")
    code = f"""
import sqlite3, shutil
T, D, NEW = {target!r}, {folder!r}, {new!r}
dfd = os.open(D, os.O_RDONLY)
attempt("open_w", lambda: open(T, "w").write("x"))
attempt("open_a", lambda: open(T, "a").write("x"))
attempt("os_open_creat", lambda: os.open(NEW, os.O_WRONLY | os.O_CREAT))
attempt("dir_fd_creat", lambda: os.open("verl-probe-created", os.O_WRONLY | os.O_CREAT, dir_fd=dfd))
attempt("dir_fd_unlink", lambda: os.unlink(os.path.basename(T), dir_fd=dfd))
attempt("dir_fd_mkdir", lambda: os.mkdir("verl-probe-created", dir_fd=dfd))
attempt("remove", lambda: os.remove(T))
attempt("truncate", lambda: os.truncate(T, 0))
attempt("rename", lambda: os.rename(T, NEW))
attempt("replace_into", lambda: (open("/tmp/x", "w").write("x"), os.replace("/tmp/x", T)))
attempt("link", lambda: os.link(T, NEW))
attempt("symlink", lambda: os.symlink("/tmp", NEW))
attempt("mkfifo", lambda: os.mkfifo(NEW))
attempt("mknod", lambda: os.mknod(NEW))
attempt("chmod_path", lambda: os.chmod(T, 0o777))
attempt("chmod_fd", lambda: os.fchmod(os.open(T, os.O_RDONLY), 0o777))
attempt("utime", lambda: os.utime(T, (0, 0)))
attempt("sqlite3", lambda: sqlite3.connect(NEW).execute("create table t(x)"))
attempt("rmtree", lambda: shutil.rmtree(D))
attempt("write_usr", lambda: open("/usr/verl-probe", "w"))
attempt("remount_rw", lambda: __import__("ctypes").CDLL(None, use_errno=True).mount(b"none", D.encode(), None, \
32 | 4096 | 1 << 20, None))
attempt("tmp_is_writable", lambda: open("/tmp/inside.txt", "w").write("ok"))
# bwrap's own root (a tmpfs as large as half the host's memory) and /dev: read-only
for top in ("/", "/dev", "/proc/self/cwd/.."):
    attempt("root_dir_fd_" + top, lambda: os.open("verl-fill", os.O_WRONLY | os.O_CREAT, \
dir_fd=os.open(top, os.O_RDONLY)))
    attempt("root_mkdir_" + top, lambda: os.mkdir(os.path.join(top, "verl-fill")))
report()
"""
    out = results(run(code))
    assert out.pop("tmp_is_writable") == "ok: 2"
    assert out.pop("remount_rw") == "ok: -1"  # mount(2) fails: no capability
    assert all(not v.startswith("ok") for v in out.values()), out
    assert_target_untouched(target, folder, before)


def test_tampering_with_the_audit_hook_does_not_escape(host_target):
    """The hook is not a boundary: the code disables it (its closure cells are reachable) and then
    runs a shell — which is still inside the sandbox."""
    target, folder, before = host_target
    code = f"""
import gc
RESULTS["main_is_fresh"] = not hasattr(sys.modules["__main__"], "_install_hook")
def disable():
    n = 0
    for obj in gc.get_objects():
        if getattr(obj, "__name__", "") == "hook" and getattr(obj, "__closure__", None):
            for cell in obj.__closure__:
                if isinstance(cell.cell_contents, frozenset):
                    cell.cell_contents = frozenset(); n += 1
    return n
attempt("disable", disable)
attempt("system", lambda: os.system("rm -f {target}; echo pwned > {folder}/verl-probe-pwned; \
cat /proc/*/environ; echo"))
report()
"""
    out = results(run(code, SandboxLimits(**{**LIMITS.__dict__, "audit_hook": True})))
    assert out["main_is_fresh"] is True
    assert out["disable"] == "ok: 1"  # defeated, as any Python-level rule can be
    assert out["system"].startswith("ok")  # the shell ran ... inside
    assert_target_untouched(target, folder, before)


@pytest.mark.parametrize(
    "route", ["subprocess", "os_system", "posix_spawn", "fork_exec", "_posixsubprocess", "ctypes", "pty"]
)
def test_every_process_route_stays_inside(route, secret_env, host_target):
    target, folder, before = host_target
    shell = f"cat /proc/*/environ; ls /proc; rm -f {target}; touch {folder}/verl-probe-{route}; kill -9 -1"
    starts = {
        "subprocess": "import subprocess; print(subprocess.run(['/bin/sh', '-c', SH], capture_output=True).stdout)",
        "os_system": "os.system(SH)",
        "posix_spawn": "os.waitpid(os.posix_spawn('/bin/sh', ['sh', '-c', SH], {}), 0)",
        "fork_exec": "pid = os.fork()\nif pid == 0:\n    os.execv('/bin/sh', ['sh', '-c', SH])\nos.waitpid(pid, 0)",
        "_posixsubprocess": (
            "import _posixsubprocess, subprocess\nr, w = os.pipe()\n"
            "pid = _posixsubprocess.fork_exec([b'/bin/sh', b'-c', SH.encode()], [b'/bin/sh'], True, (), None, None, "
            "-1, -1, -1, -1, -1, -1, r, w, True, False, None, None, None, -1, None, False)\nos.waitpid(pid, 0)"
        ),
        "ctypes": "import ctypes\nctypes.CDLL(None).system(SH.encode())",
        "pty": "import pty\npty.spawn(['/bin/sh', '-c', SH])",
    }
    code = f"SH = {shell!r}\n" + starts[route] + "\nprint('DONE')\n"
    r = run(code)
    assert SECRET not in r.stdout + r.stderr
    assert_target_untouched(target, folder, before)


def _host_processes_with(marker: str) -> list[int]:
    pids = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(p))
        except (OSError, ValueError):
            pass
    return [p for p in pids if p != os.getpid()]


@pytest.mark.parametrize("ending", ["returns", "times_out"])
def test_setsid_and_double_fork_do_not_outlive_the_run(ending):
    marker = f"verl-probe-{uuid.uuid4().hex}"
    code = f"""
import subprocess, time
def daemonize():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", {marker!r}])
        os._exit(0)
daemonize()
subprocess.Popen(["/bin/sh", "-c", "sleep 60; echo {marker}"], start_new_session=True)
time.sleep(0.5)
alive = [p for p in os.listdir("/proc") if p.isdigit() and \
{marker!r}.encode() in open(f"/proc/{{p}}/cmdline", "rb").read()]
print("daemons", len(alive), flush=True)
{"time.sleep(60)" if ending == "times_out" else ""}
"""
    r = run(code)
    assert r.stdout == "daemons 2\n" and r.status == ("timeout" if ending == "times_out" else "ok")
    time.sleep(0.3)
    assert _host_processes_with(marker) == []


def test_cannot_signal_processes_outside(secret_env):
    marker = f"verl-probe-{uuid.uuid4().hex}"
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        code = f"""
import signal
attempt("kill_host_pid", lambda: os.kill({victim.pid}, signal.SIGKILL))
attempt("kill_test_process", lambda: os.kill({os.getpid()}, signal.SIGKILL))
attempt("killpg_host", lambda: os.killpg({os.getpgid(0)}, signal.SIGKILL))
attempt("pidfd_host", lambda: os.pidfd_open({victim.pid}))
report()
attempt("kill_everything", lambda: os.kill(-1, signal.SIGKILL))
"""
        out = results(run(code))
        assert out == {
            "kill_host_pid": "ProcessLookupError",
            "kill_test_process": "ProcessLookupError",
            "killpg_host": "ProcessLookupError",
            "pidfd_host": "ProcessLookupError",
        }
        time.sleep(0.2)
        assert victim.poll() is None  # still alive
    finally:
        victim.kill()
        victim.wait()


def test_no_network_to_loopback_or_elsewhere():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(3.0)
    accepted = []
    threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True).start()
    port = server.getsockname()[1]
    code = f"""
import socket
def connect(addr, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(1.0); s.connect(addr); return "connected"
attempt("loopback", lambda: connect(("127.0.0.1", {port})))
attempt("internet", lambda: connect(("1.1.1.1", 443)))
attempt("ipv6", lambda: connect(("::1", {port}), socket.AF_INET6))
attempt("dns", lambda: socket.getaddrinfo("example.com", 80))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53)))
attempt("unix_abstract", lambda: socket.socket(socket.AF_UNIX).connect("\\0verl-probe"))
RESULTS["interfaces"] = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
report()
"""
    out = results(run(code))
    server.close()
    assert out.pop("interfaces") == ["lo"]
    assert all(v.endswith("Error") or v == "gaierror" for v in out.values()), out
    assert accepted in ([], [None])  # the host listener never saw a connection


def _accept(server: socket.socket):
    try:
        return server.accept()
    except OSError:
        return None


def test_cannot_raise_limits():
    code = """
import resource
for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC"):
    r = getattr(resource, name)
    RESULTS[name] = list(resource.getrlimit(r))
    attempt("raise_" + name, lambda: resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))
attempt("prlimit_init", lambda: resource.prlimit(1, resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2))
attempt("nice", lambda: os.nice(-5))
report()
"""
    out = results(run(code))
    assert out["RLIMIT_AS"] == [256 * 2**20] * 2 and out["RLIMIT_CPU"] == [2, 3]
    assert out["RLIMIT_FSIZE"] == [4 * 2**20] * 2 and out["RLIMIT_NPROC"] == [16, 16]
    assert all(not out[k].startswith("ok") for k in out if k.startswith(("raise_", "prlimit", "nice"))), out


def test_filling_the_disk_stops_at_the_private_tmpfs():
    code = """
written = 0
for i in range(100):
    try:
        with open(f"/tmp/fill{i}", "wb") as f:
            for _ in range(64):
                f.write(b"x" * 65536); written += 65536
    except OSError as e:
        RESULTS.setdefault("errors", []).append(e.errno)
        if e.errno == 28:
            break
RESULTS["written"] = written
report()
"""
    out = results(run(code))
    assert 28 in out["errors"]  # ENOSPC from the 8 MiB tmpfs, not the host's disk
    assert 4 * 2**20 <= out["written"] <= 8 * 2**20


@pytest.mark.skipif(
    ISOLATION is not None and not ISOLATION.process_cap,
    reason="root without a writable pids cgroup: the kernel enforces no process cap here",
)
def test_fork_bomb_is_capped_and_cleaned_up():
    marker = f"verl-probe-{uuid.uuid4().hex}"
    code = f"""
import time
n, failed = 0, 0
start = time.time()
while time.time() - start < 1.0:
    try:
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", {marker!r}])
        n += 1
    except OSError:
        failed += 1
RESULTS["forked"], RESULTS["failed"] = n, failed
report()
"""
    r = run(code)
    out = results(r)
    assert out["forked"] < 16 and out["failed"] > 0  # EAGAIN at the process cap
    time.sleep(0.3)
    assert _host_processes_with(marker) == []
