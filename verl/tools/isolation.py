"""OS-level isolation of untrusted code: the `bubblewrap <https://github.com/containers/bubblewrap>`_
command line (the sandbox behind Flatpak) and a pids cgroup for one sandboxed process.

`sandbox_command` wraps ``python -I -B -c BOOTSTRAP`` so that the process gets

* **new user, mount, PID, IPC, UTS, network and cgroup namespaces** (``--unshare-all``; the
  network namespace holds only a loopback device that is down), no further user namespaces
  inside (``--disable-userns``, bubblewrap >= 0.8.0), uid/gid 65534 and no capabilities;
* ``--die-with-parent`` and ``--new-session`` (no ``TIOCSTI`` into the caller's terminal): when
  the outer ``bwrap`` process dies, the sandbox's PID 1 dies and the kernel kills every process
  of the PID namespace, whatever ``setsid`` / double fork it did;
* ``--clearenv`` plus an explicit allow-list of variables (`sandbox_env`);
* a **read-only** view of ``/usr`` (with the host's ``/lib``, ``/bin``... symlinks or binds) and of
  the interpreter's own prefixes (``sys.base_prefix``, the venv, ``site-packages``) — nothing
  else of the host: no ``/etc``, ``/home``, ``/root``, no repository, no other ``/tmp``;
* a private **tmpfs** at ``/tmp`` of ``tmpfs_bytes`` as the only writable path (working
  directory, ``HOME`` and ``TMPDIR``), gone when the sandbox ends;
* its own ``/proc`` (only the sandbox's processes are visible) and no devices but
  ``/dev/null`` and ``/dev/urandom``;
* **rlimits set from outside** by ``prlimit`` before ``bwrap`` starts (address space, CPU
  seconds, file size, open files, no core dumps); the process count is capped by a pids cgroup
  (`PidsCgroup`) when this machine lets us create one, and by ``RLIMIT_NPROC`` set by the
  bootstrap once the user namespace exists (set before ``bwrap``, the kernel would count every
  process of the calling user against it; it is not enforced when the caller is root on the
  host, hence the cgroup).

No seccomp filter is loaded (the namespaces and the missing capabilities are the boundary).
`check_isolation` says whether this machine gives all that, and the one-line error when not.
"""

from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "INSTALL_HINT",
    "IsolationError",
    "IsolationInfo",
    "PidsCgroup",
    "check_isolation",
    "python_roots",
    "sandbox_command",
    "sandbox_env",
]

INSTALL_HINT = (
    "install the `bubblewrap` package (`apt-get install -y bubblewrap`) or set "
    "unsafe_no_isolation: true in the tool config to run model code without OS isolation"
)
SANDBOX_UID = 65534  # "nobody": not root inside, so exec drops every capability
_HOST_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_DEVICES = ("/dev/null", "/dev/urandom")


class IsolationError(RuntimeError):
    """This machine cannot isolate sandboxed code (no ``bwrap``, or user namespaces refused)."""


@dataclass(frozen=True)
class IsolationInfo:
    """What `check_isolation` found.

    Attributes:
        bwrap: absolute path of ``bwrap``.
        version: ``bwrap --version`` (e.g. ``bubblewrap 0.8.0``).
        prlimit: absolute path of ``prlimit`` (util-linux).
        pids_cgroup: the writable pids cgroup directory new sandboxes go under, or None.
        disable_userns: pass ``--disable-userns`` (bubblewrap >= 0.8.0).
    """

    bwrap: str
    version: str
    prlimit: str
    pids_cgroup: str | None
    disable_userns: bool = True

    @property
    def process_cap(self) -> bool:
        """Whether the process count is capped: a pids cgroup, or ``RLIMIT_NPROC`` (which the
        kernel does not enforce for processes of host uid 0)."""
        return self.pids_cgroup is not None or os.geteuid() != 0

    def describe(self) -> str:
        """One line for logs and ``verl doctor``."""
        if self.pids_cgroup:
            pids = f"pids cgroup under {self.pids_cgroup}"
        elif self.process_cap:
            pids = "RLIMIT_NPROC (no writable pids cgroup)"
        else:
            pids = "NOT capped (root without a writable pids cgroup: only the wall timeout stops a fork bomb)"
        return (
            f"{self.version}: user/mount/pid/ipc/uts/net namespaces, read-only interpreter, private /tmp; "
            f"process count: {pids}"
        )


def python_roots() -> list[str]:
    """Directories the sandbox needs read-only to run this interpreter: its prefixes, the venv,
    the directory of the real executable and ``site-packages``; those under ``/usr`` are dropped
    (``/usr`` is bound whole), nested ones are dropped in favour of their parent."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *site.getsitepackages(),
    }
    real = sorted({os.path.realpath(p) for p in paths if p and os.path.isdir(p)})
    out: list[str] = []
    for p in real:
        if p == "/usr" or p.startswith("/usr/") or any(p.startswith(q + "/") for q in out):
            continue
        out.append(p)
    return out


def sandbox_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment of a sandboxed process (nothing of the caller's)."""
    # one BLAS thread: each extra thread reserves address space that RLIMIT_AS counts
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        **threads,
        **(extra or {}),
    }


def _rlimit_args(prlimit: str, limits: dict[str, int]) -> list[str]:
    cpu = int(limits["cpu_time_s"])
    return [
        prlimit,
        f"--as={int(limits['memory_bytes'])}",
        f"--cpu={cpu}:{cpu + 1}",
        f"--fsize={int(limits['max_file_bytes'])}",
        f"--nofile={int(limits['max_open_files'])}",
        "--core=0",
        "--",
    ]


def sandbox_command(
    info: IsolationInfo,
    python_argv: list[str],
    limits: dict[str, int],
    tmpfs_bytes: int,
    cgroup: PidsCgroup | None = None,
) -> list[str]:
    """The argv that runs ``python_argv`` (its first item an absolute interpreter path) isolated.

    Args:
        info: from `check_isolation`.
        python_argv: the interpreter and its arguments, as run inside the sandbox.
        limits: ``memory_bytes`` (RLIMIT_AS), ``cpu_time_s`` (RLIMIT_CPU; SIGXCPU, then SIGKILL one
            second later), ``max_file_bytes`` (RLIMIT_FSIZE), ``max_open_files`` (RLIMIT_NOFILE).
        tmpfs_bytes: size of the private writable ``/tmp``.
        cgroup: when given, the process joins it (``sh`` writes its own pid to ``cgroup.procs``
            and execs the rest, so nothing forks before it is inside).

    Returns:
        The full argv (``[sh -c ...] prlimit ... -- bwrap ... -- python ...``).
    """
    argv = _rlimit_args(info.prlimit, limits) + [info.bwrap, "--unshare-all", "--unshare-user"]
    argv += ["--disable-userns"] if info.disable_userns else []
    argv += [
        "--die-with-parent",
        "--new-session",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for link in _HOST_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    # the tmpfs comes before the interpreter's binds: bwrap mounts in argument order, and a venv
    # that lives under /tmp (a CI clone there) would otherwise be hidden by the empty /tmp
    argv += ["--size", str(int(tmpfs_bytes)), "--tmpfs", "/tmp"]
    for root in python_roots():
        argv += ["--ro-bind", root, root]
    argv += ["--proc", "/proc", "--dir", "/dev"]
    for dev in _DEVICES:
        argv += ["--dev-bind", dev, dev]
    # bwrap's own root is a tmpfs as large as half the host's memory: read-only once everything
    # is mounted, so the private /tmp (its own, size-capped mount) is the only writable path
    argv += ["--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    for key, value in sandbox_env().items():
        argv += ["--setenv", key, value]
    argv += ["--", *python_argv]
    if cgroup is not None:
        argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(cgroup.path, "cgroup.procs"), *argv]
    return argv


class PidsCgroup:
    """A pids cgroup for one sandbox: ``pids.max`` caps its process count (a fork bomb gets
    EAGAIN), and `kill` SIGKILLs whatever is still in it.

    Args:
        parent: a writable pids cgroup directory (`IsolationInfo.pids_cgroup`).
        max_pids: processes and threads at once.
    """

    def __init__(self, parent: str, max_pids: int) -> None:
        self.path = os.path.join(parent, f"verl-sandbox-{uuid.uuid4().hex[:12]}")
        os.mkdir(self.path)
        try:
            Path(self.path, "pids.max").write_text(str(int(max_pids)))
        except OSError:
            os.rmdir(self.path)
            raise

    def kill(self) -> None:
        """SIGKILL every process still in the cgroup (``cgroup.kill`` where the kernel has it)."""
        kill_file = Path(self.path, "cgroup.kill")
        if kill_file.exists():
            try:
                kill_file.write_text("1")
                return
            except OSError:
                pass
        try:
            pids = Path(self.path, "cgroup.procs").read_text().split()
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, PermissionError):
                pass

    def remove(self) -> None:
        """Kill what is left and remove the directory (best effort: a busy cgroup stays)."""
        for _ in range(50):
            self.kill()
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)  # the killed processes are still being reaped


def _find_pids_cgroup() -> str | None:
    """A pids cgroup directory we may create children in: cgroup v1 ``/sys/fs/cgroup/pids/<ours>``
    or our own cgroup v2 directory when it delegates ``pids``; None when neither is writable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "pids" in controllers.split(","):
            base = Path("/sys/fs/cgroup/pids") / rel.lstrip("/")
            if not base.is_dir():  # a container shows its own cgroup as the hierarchy's root
                base = Path("/sys/fs/cgroup/pids")
        elif controllers == "":
            base = Path("/sys/fs/cgroup") / rel.lstrip("/")
            try:
                if "pids" not in (base / "cgroup.subtree_control").read_text().split():
                    continue
            except OSError:
                continue
        else:
            continue
        try:
            probe = PidsCgroup(str(base), 1)
        except OSError:
            continue
        probe.remove()
        return str(base)
    return None


def _version_tuple(version: str) -> tuple[int, ...]:
    """``"bubblewrap 0.8.0"`` -> ``(0, 8, 0)``; unparsable -> ``()``."""
    try:
        return tuple(int(x) for x in version.split()[-1].split("."))
    except (IndexError, ValueError):
        return ()


@functools.lru_cache(maxsize=1)
def check_isolation() -> IsolationInfo:
    """Finds ``bwrap`` and ``prlimit`` and runs ``true`` in a sandbox once (cached per process).

    Returns:
        An `IsolationInfo`.

    Raises:
        IsolationError: one line naming what is missing and `INSTALL_HINT`.
    """
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    if bwrap is None:
        raise IsolationError(f"bubblewrap (`bwrap`) is not installed: {INSTALL_HINT}")
    if prlimit is None:
        raise IsolationError("`prlimit` (package util-linux) is not installed: it sets the sandbox's limits")
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    info = IsolationInfo(
        bwrap=bwrap,
        version=version or "bubblewrap",
        prlimit=prlimit,
        pids_cgroup=_find_pids_cgroup(),
        disable_userns=_version_tuple(version) >= (0, 8, 0),
    )
    limits = {"memory_bytes": 1 << 30, "cpu_time_s": 5, "max_file_bytes": 1 << 20, "max_open_files": 64}
    argv = sandbox_command(info, [os.path.realpath(sys.executable), "-I", "-S", "-c", "pass"], limits, 1 << 20)
    probe = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={})
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
        raise IsolationError(
            f"bubblewrap cannot create a sandbox here ({why}; user namespaces may be disabled, "
            f"see /proc/sys/kernel/unprivileged_userns_clone): {INSTALL_HINT}"
        )
    return info
