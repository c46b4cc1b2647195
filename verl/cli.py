"""The ``verl`` console script: one sub-command per job, each implemented in its own package.

Every sub-command is a function ``(argv: list[str]) -> int`` (``module:function``, default
``main``) in a module that is imported only when
called, so ``verl --help`` and ``verl config show`` never import torch models or Ray.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("verl.trainer.main_ppo:train_cli", "run RL training (PPO, GRPO, ...): verl train [CONFIG] [key=value ...]"),
    "config": ("verl.config.cli", "inspect configs: verl config show [CONFIG] [key=value ...]"),
    "prepare": ("verl.data.prepare", "raw data -> training parquet: verl prepare gsm8k|math500 --input F --out DIR"),
    "init-model": ("verl.modules.init_model", "write a randomly initialised model: verl init-model --arch qwen2 ..."),
    "bench": ("verl.trainer.bench", "throughput / MFU / memory of N RL steps: verl bench [CONFIG|--shape gsm8k] [--compare trl]"),
    "plan": ("verl.trainer.plan", "pre-flight memory plan: verl plan [CONFIG] [key=value ...] [--device cpu|gpu:80GiB]"),
    "merge": ("verl.trainer.merge", "checkpoint -> Hugging Face directory: verl merge CKPT_DIR OUT_DIR"),
}


def _usage() -> str:
    lines = ["usage: verl <command> [args]", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``verl <command> ...`` to the command's module; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from verl import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        print(f"verl: unknown command '{name}'{hint}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, _, func = COMMANDS[name][0].partition(":")
    entry = getattr(importlib.import_module(module_name), func or "main")
    return int(entry(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
