"""``verl builtin``: build the built-in models explicitly, and list where each one resolves.

    verl builtin list                          name, spec hash, and the directory used (or "not built")
    verl builtin build [NAME ...] [--force]    build each missing or stale NAME (default: all of them)
                                               into the cache $VERL_CACHE_DIR/builtin/<name>-<hash>
    verl builtin build NAME --out DIR          build NAME into DIR (e.g. verl/modules/assets/NAME to
                                               refresh the shipped asset after a spec change)

A build is a whole ``verl sft`` run (minutes on a CPU core); `verl.modules.builtin` only resolves
and raises a one-line error naming this command when a model is missing or stale.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from verl.modules.builtin import BUILTIN_MODELS, builtin_spec, cache_dir, get_builtin_model_dir, is_complete, spec_hash
from verl.utils.errors import ModelError

__all__ = ["BUILDERS", "build_into", "main"]


def _build_arithmetic(out: Path) -> Path:
    from verl.recipes.tiny_arithmetic import build_builtin_model

    return build_builtin_model(out, builtin_spec("tiny-arithmetic"))


def _build_calculator(out: Path) -> Path:
    from verl.recipes.tiny_calculator import build_tool_model

    return build_tool_model(out, builtin_spec("tiny-calculator"))


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "tiny-arithmetic": _build_arithmetic,
    "tiny-calculator": _build_calculator,
}
# Built-in model name -> recipe writing that model (with its current spec) into a directory.


def build_into(name: str, target: Path | None = None) -> Path:
    """Build built-in model ``name`` into ``target`` (default: its cache directory), atomically.

    The recipe writes into a temporary sibling directory that is then renamed, so concurrent or
    interrupted builds never leave a half-written model behind; an existing ``target`` is replaced.

    Returns:
        ``target``, a complete model directory of the current spec.

    Raises:
        ValueError: for an unknown name (the message lists the valid names).
    """
    spec = builtin_spec(name)
    target = Path(target) if target is not None else cache_dir(name, spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        BUILDERS[name](tmp)
        if target.exists():
            shutil.rmtree(target)
        try:
            tmp.rename(target)
        except OSError:
            # Another process finished the same directory in between: its complete copy wins.
            if not is_complete(target, spec):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _resolved(name: str) -> Path | None:
    """The directory ``builtin://name`` resolves to, or None when it is missing or stale."""
    try:
        return get_builtin_model_dir(name)
    except ModelError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``verl builtin``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="verl builtin", description="build or list the built-in models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="name, spec hash and the directory each built-in model resolves to")
    build = sub.add_parser("build", help="build missing or stale built-in models (a `verl sft` run each)")
    build.add_argument("names", nargs="*", metavar="NAME", help=f"default: all ({', '.join(BUILTIN_MODELS)})")
    build.add_argument("--force", action="store_true", help="rebuild even when a current directory exists")
    build.add_argument("--out", type=Path, default=None, help="write into this directory (one NAME only)")
    args = parser.parse_args(list(argv or []))
    if args.cmd == "list":
        for name in BUILTIN_MODELS:
            print(f"{name:<16} {spec_hash(BUILTIN_MODELS[name])}  {_resolved(name) or 'not built (missing or stale)'}")
        return 0
    names = args.names or list(BUILTIN_MODELS)
    unknown = [n for n in names if n not in BUILTIN_MODELS]
    if unknown:
        parser.error(f"unknown built-in model {unknown[0]!r}; valid names: {sorted(BUILTIN_MODELS)}")
    if args.out is not None and len(names) != 1:
        parser.error("--out takes exactly one NAME")
    for name in names:
        current = _resolved(name)
        if args.out is None and not args.force and current is not None:
            print(f"{name}: up to date at {current}")
            continue
        print(f"{name}: building (a `verl sft` run) ...", flush=True)
        print(f"{name}: built {build_into(name, args.out)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
