"""``verl doctor [CONFIG] [key=value ...] [--ray]``: one screen to paste into a bug report.

Prints versions (Python, verl, torch, transformers, Ray, vLLM / SGLang when installed), the
devices and their memory, CPU threads, whether FSDP2 over gloo (and NCCL on GPU) and
TensorBoard actually work here (each is exercised for a fraction of a second: a one-process
gloo group all-reduces, a ``fully_shard`` linear layer does forward + backward, an event file
is written), which OS isolation the code-interpreter sandbox gets (bubblewrap namespaces, pids
cgroup; a sandbox is started once), the Hugging Face hub / offline settings, and — when a config or overrides are
given — the pre-flight checks of `verl.run.preflight` for that run. Ray is imported and
its version shown; starting a local cluster takes 10-20 s, so it is only exercised with
``--ray``. Exit status: 0 when every check passed, 1 otherwise. Runs in a few seconds (most of
it importing torch and transformers).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

OK, WARN, FAIL, SKIP = "ok", "WARN", "FAIL", "--"
HUB_VARS = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_HOME",
    "HF_ENDPOINT",
    "HF_TOKEN",
    "VERL_CACHE_DIR",
    "VERL_DEBUG",
)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def versions() -> list[tuple[str, str]]:
    """(name, version) of Python and the packages a verl run depends on (not imported here)."""
    from verl import __version__

    out = [("python", f"{platform.python_version()} ({sys.executable})"), ("verl", __version__)]
    out += [(d, _version(d)) for d in ("torch", "transformers", "ray", "tensordict", "peft", "vllm", "sglang")]
    return out


def devices() -> list[tuple[str, str]]:
    """Accelerators with their memory, CPU cores / threads and RAM."""
    import psutil
    import torch

    rows = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            prop = torch.cuda.get_device_properties(i)
            free, total = torch.cuda.mem_get_info(i)
            rows.append(
                (
                    f"cuda:{i}",
                    f"{prop.name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free), "
                    f"capability {prop.major}.{prop.minor}",
                )
            )
    else:
        build = f"torch built with CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only torch build"
        rows.append(("cuda", f"not available ({build})"))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = (
        f"{os.cpu_count()} logical cores, {usable} usable here, torch threads {torch.get_num_threads()}, "
        f"{torch.backends.cpu.get_cpu_capability()} kernels"
    )
    rows.append(("cpu", cpu))
    rows.append(("cpu half precision", _cpu_half()))
    mem = psutil.virtual_memory()
    rows.append(("memory", f"{mem.total / 2**30:.1f} GiB ({mem.available / 2**30:.1f} GiB available)"))
    return rows


def _cpu_half() -> str:
    """Measured bf16 / fp16 matmul time vs float32 on this CPU (`verl.utils.cpu_half`)."""
    import torch

    from verl.utils.cpu_half import SLOW_FACTOR, matmul_slowdown

    factors = {name: matmul_slowdown(dtype) for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16))}
    text = ", ".join(f"{name} matmul {f:.1f}x the float32 time" for name, f in factors.items())
    slow = [name for name, f in factors.items() if f >= SLOW_FACTOR]
    return text + (f" (no native {' / '.join(slow)} here: keep float32 on CPU)" if slow else "")


def _gloo_fsdp2(tmp: Path) -> str:
    """A one-process gloo group: all-reduce, then FSDP2 ``fully_shard`` forward + backward."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    store = dist.FileStore(str(tmp / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        x = torch.ones(2)
        dist.all_reduce(x)
        layer = fully_shard(torch.nn.Linear(4, 2))
        layer(torch.ones(3, 4)).sum().backward()
        assert layer.weight.grad is not None
    finally:
        dist.destroy_process_group()
    return "gloo all-reduce and FSDP2 fully_shard forward/backward work"


def _nccl() -> str | None:
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        return None
    if not dist.is_nccl_available():
        raise RuntimeError("torch was built without NCCL")
    return f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} available"


def _tensorboard(tmp: Path) -> str:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp / "tb"))
    writer.add_scalar("doctor", 1.0, 0)
    writer.close()
    if not any((tmp / "tb").iterdir()):
        raise RuntimeError("no event file written")
    return "event file written"


def _ray(start: bool) -> str | None:
    import ray

    if not start:
        address = os.environ.get("RAY_ADDRESS")
        return (
            f"ray {ray.__version__} importable; "
            f"{'RAY_ADDRESS=' + address if address else 'a local cluster is started per run'} (--ray to start one now)"
        )
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    t = time.perf_counter()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.get(ray.remote(lambda: 1).remote()) == 1
    finally:
        ray.shutdown()
    return f"local cluster started, ran a task and stopped in {time.perf_counter() - t:.1f} s"


def sandbox_isolation() -> tuple[str, str, str]:
    """("code sandbox", ok | WARN, detail): the OS isolation `verl.tools.sandbox` gets here (a sandbox
    is started once). WARN, not FAIL: only runs with the code-interpreter tool need it."""
    from verl.tools.isolation import IsolationError, check_isolation

    try:
        info = check_isolation()
        return "code sandbox", OK if info.process_cap else WARN, info.describe()
    except IsolationError as e:
        return "code sandbox", WARN, f"no OS isolation: {e}"


def capabilities(start_ray: bool = False) -> list[tuple[str, str, str]]:
    """(name, ok | FAIL | WARN | --, detail) for gloo+FSDP2, NCCL, Ray, TensorBoard and the code sandbox."""
    out = []
    with tempfile.TemporaryDirectory(prefix="verl_doctor_") as d:
        tmp = Path(d)
        checks: list[tuple[str, Callable[[], str | None]]] = [
            ("gloo + FSDP2", lambda: _gloo_fsdp2(tmp)),
            ("nccl", _nccl),
            ("ray", lambda: _ray(start_ray)),
            ("tensorboard", lambda: _tensorboard(tmp)),
        ]
        for name, fn in checks:
            try:
                detail = fn()
            except Exception as e:  # noqa: BLE001 - the report says what failed
                out.append((name, FAIL, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
                continue
            out.append((name, SKIP, "no CUDA device") if detail is None else (name, OK, detail))
    out.append(sandbox_isolation())
    return out


def hub_settings() -> list[tuple[str, str]]:
    """The environment variables that decide where models come from (HF_TOKEN is redacted)."""
    rows = []
    for key in HUB_VARS:
        value = os.environ.get(key)
        rows.append((key, "(unset)" if value is None else ("(set)" if key == "HF_TOKEN" else value)))
    from huggingface_hub import constants

    rows.append(("hf cache", str(constants.HF_HUB_CACHE)))
    return rows


def _table(title: str, rows: Sequence[tuple[str, ...]]) -> list[str]:
    width = max((len(r[0]) for r in rows), default=0)
    return [title] + [f"  {r[0]:<{width}}  " + "  ".join(r[1:]) for r in rows]


def report(config_path: str | None = None, overrides: Sequence[str] = (), start_ray: bool = False) -> tuple[str, bool]:
    """The whole report as text, and whether every check passed."""
    t = time.perf_counter()
    lines = _table("versions", versions()) + _table("devices", devices())
    caps = capabilities(start_ray)
    lines += _table("works here", caps) + _table("hub / offline", hub_settings())
    ok = all(status != FAIL for _, status, _ in caps)
    if config_path or overrides:
        from verl.config import load_config
        from verl.run.preflight import run_preflight

        cfg = load_config(config_path, list(overrides))
        checks = run_preflight(cfg, raise_on_failure=False)
        label = config_path or "(defaults)"
        lines += _table(f"pre-flight: {label} {' '.join(overrides)}".rstrip(), [_check_row(c) for c in checks])
        ok = ok and all(c.ok is not False for c in checks)
    lines.append(f"({time.perf_counter() - t:.1f} s)")
    return "\n".join(lines), ok


def _check_row(check: Any) -> tuple[str, str, str]:
    """(name, ok | WARN | FAIL | --, detail) of a pre-flight `Check`; a passed check whose detail
    starts with ``WARNING:`` (slow, not wrong: `verl.utils.cpu_half`) shows as WARN."""
    if check.ok and check.detail.startswith("WARNING: "):
        return check.name, WARN, check.detail.removeprefix("WARNING: ")
    return check.name, {True: OK, False: FAIL, None: SKIP}[check.ok], check.detail


def main(argv: Sequence[str] | None = None) -> int:
    """``verl doctor [CONFIG] [key=value ...] [--ray]``; returns 0 when every check passed."""
    from verl.config.cli import split_config_arg

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[0])
        return 0
    start_ray = "--ray" in argv
    argv = [a for a in argv if a != "--ray"]
    config_path, overrides = split_config_arg(argv, None) if argv else (None, [])
    text, ok = report(config_path, overrides, start_ray)
    print(text, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
