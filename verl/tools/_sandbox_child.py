"""Bootstrap of a sandboxed Python process (run as ``python -I -B _sandbox_child.py CONFIG_JSON``).

Standalone on purpose (no ``verl`` import: ``-I`` drops the caller's paths). In order it:
1. enters a new network namespace (``unshare(CLONE_NEWNET)``, or with ``CLONE_NEWUSER`` when not
   root) so the kernel offers no route out; records whether that worked;
2. sets resource limits: ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_AS`` (address space),
   ``RLIMIT_FSIZE`` (largest file written), ``RLIMIT_CORE`` = 0;
3. reads the code from stdin, then installs a PEP 578 audit hook that refuses sockets, writes /
   deletes / renames / chmods outside the working directory, new processes (fork, exec,
   subprocess, os.system), signals to other processes and ctypes foreign calls;
4. runs the code as ``__main__`` in the working directory; an uncaught exception prints its
   traceback to stderr and exits with 1.

See `verl.tools.sandbox` for what this does and does not stop.
"""

import json
import os
import resource
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _isolate_network():
    """Returns the mechanism that cut the network: 'netns', 'userns+netns' or 'none'."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return "none"
    if libc.unshare(CLONE_NEWNET) == 0:
        return "netns"
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        try:  # map ourselves to the same ids so the working directory stays writable
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError:
            pass
        return "userns+netns"
    return "none"


def _set_limits(cfg):
    cpu = int(cfg["cpu_time_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(cfg["max_file_bytes"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    mem = int(cfg["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {
    "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1, "os.truncate": 1,
    "os.utime": 1, "os.rename": 2, "os.link": 2, "os.symlink": 2, "shutil.rmtree": 1, "shutil.copyfile": 2,
    "shutil.copytree": 2, "shutil.move": 2,
}
_FORBIDDEN = {
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
    "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym",
    "ctypes.dlsym/handle", "ctypes.call_function", "sys.remote_exec",
}


def _install_hook(workdir):
    root = os.path.realpath(workdir)
    allowed_files = {"/dev/null"}

    def inside(path):
        if isinstance(path, int):
            return True  # an already-open descriptor: its opening was checked
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real == root or real.startswith(root + os.sep) or real in allowed_files

    def hook(event, args):
        if event.startswith("socket."):
            raise PermissionError(f"sandbox: network access is disabled ({event})")
        if event in _FORBIDDEN:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {path!r}")
        elif event in _PATH_EVENTS:
            for path in args[: _PATH_EVENTS[event]]:
                if path is not None and not inside(path):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed: {path!r}")

    sys.addaudithook(hook)


def main():
    cfg = json.loads(sys.argv[1])
    network = _isolate_network() if cfg.get("isolate_network", True) else "none"
    code = sys.stdin.read()
    os.chdir(cfg["workdir"])
    _set_limits(cfg)
    sys.stdin = open(os.devnull)
    sys.argv = ["<sandbox>"]
    sys.path.insert(0, cfg["workdir"])
    report_fd = cfg.get("report_fd")
    if report_fd is not None:  # tell the parent which network barrier is in place, then let go of the pipe
        os.write(report_fd, network.encode())
        os.close(report_fd)
    _install_hook(cfg["workdir"])
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(code, "<code>", "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as e:  # the user's error goes to stderr as a traceback, like `python file.py`
        import traceback

        # hide the bootstrap's own frames (exec call, audit hook): the model should see its code only
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
        sys.stderr.write("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)))
        sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
