"""Bootstrap of a sandboxed Python process (run as ``python -I -B -c <this source> CONFIG_JSON``).

Standalone on purpose (no ``verl`` import: inside the sandbox the repository is not mounted).
In order it:
1. without OS isolation only (``unsafe_no_isolation``): enters a new network namespace when the
   kernel allows (``unshare(CLONE_NEWNET)``, with ``CLONE_NEWUSER`` when not root) and sets the
   rlimits itself (under bubblewrap ``prlimit`` has set them from outside before it started);
2. sets ``RLIMIT_NPROC`` when asked (it must be set once inside the sandbox's user namespace:
   set before, the kernel counts every process of the calling user against it);
3. reads the code from stdin (a warm worker waits here), then — unless ``audit_hook`` is false —
   installs a PEP 578 audit hook that refuses sockets, writes outside the working directory,
   new processes, signals and ctypes calls, with a clear ``PermissionError``. The hook is
   defence in depth and a readable message for the model, **not a security boundary**: native
   code steps around it. The boundary is the bubblewrap sandbox (`verl.tools.isolation`);
4. runs the code as a fresh ``__main__`` module in the working directory; an uncaught exception
   prints its traceback (the code's frames only) to stderr and exits with 1; a clean end runs
   the atexit callbacks, flushes and exits without the interpreter's teardown (`_finish`).
"""

import json
import os
import resource
import sys
import types

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _isolate_network():
    """Cuts the network without bubblewrap where the kernel allows (best effort)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    if libc.unshare(CLONE_NEWNET) == 0:
        return
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        try:  # map ourselves to the same ids so the working directory stays writable
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError:
            pass


def _set_limits(cfg):
    cpu = int(cfg["cpu_time_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(cfg["max_file_bytes"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(cfg["max_open_files"]),) * 2)
    mem = int(cfg["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {
    "os.remove": 1,
    "os.rmdir": 1,
    "os.mkdir": 1,
    "os.chmod": 1,
    "os.chown": 1,
    "os.truncate": 1,
    "os.utime": 1,
    "os.rename": 2,
    "os.link": 2,
    "os.symlink": 2,
    "os.mkfifo": 1,
    "os.mknod": 1,
    "shutil.rmtree": 1,
    "shutil.copyfile": 2,
    "shutil.copytree": 2,
    "shutil.move": 2,
    "sqlite3.connect": 1,
}
_FORBIDDEN = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "subprocess.Popen",
        "pty.spawn",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
        "sys.remote_exec",
    }
)


_PATH_EVENT_ITEMS = tuple(_PATH_EVENTS.items())


def _install_hook(workdir, path_events=_PATH_EVENT_ITEMS, forbidden=_FORBIDDEN):
    root = os.path.realpath(workdir)
    path_events = dict(path_events)  # a private copy: the code cannot edit the module's tables into the hook

    def inside(path):
        if isinstance(path, int):
            return False  # a descriptor (or dir_fd) could point anywhere
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real == root or real.startswith(root + os.sep) or real == "/dev/null" or path == ":memory:"

    def hook(event, args):
        if event.startswith("socket."):
            raise PermissionError(f"sandbox: network access is disabled ({event})")
        if event in forbidden:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {path!r}")
        elif event in path_events:
            for path in args[: path_events[event]]:
                if path is not None and not inside(path):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed: {path!r}")

    sys.addaudithook(hook)


def _finish():
    """Exits at once, skipping the interpreter's teardown (10-20 ms of a one-shot process), after
    what ``python file.py`` would do that the caller can see: atexit callbacks, flushed streams.
    With other threads still running it returns, and the normal exit joins them."""
    import atexit
    import threading

    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    cfg = json.loads(sys.argv[1])
    if cfg.get("set_limits"):
        if cfg.get("isolate_network"):
            _isolate_network()
        _set_limits(cfg)
    if cfg.get("max_processes"):
        n = int(cfg["max_processes"])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    code = sys.stdin.read()
    workdir = cfg["workdir"]
    os.chdir(workdir)
    sys.stdin = open(os.devnull)
    sys.argv = ["<sandbox>"]
    sys.path.insert(0, workdir)
    if cfg.get("audit_hook", True):
        _install_hook(workdir)
    module = types.ModuleType("__main__")  # the code's own module, not this bootstrap's globals
    sys.modules["__main__"] = module
    try:
        exec(compile(code, "<code>", "exec"), module.__dict__)
        _finish()
    except SystemExit:
        raise
    except BaseException as e:  # the user's error goes to stderr as a traceback, like `python file.py`
        import traceback

        # hide the bootstrap's own frames (exec call, audit hook): the model should see its code only
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != "<string>"]
        sys.stderr.write("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)))
        sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
