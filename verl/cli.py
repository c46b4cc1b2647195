"""The ``verl`` console script: one sub-command per job, each implemented in its own package.

Every sub-command is a function ``(argv: list[str]) -> int`` (``module:function``, default
``main``) in a module that is imported only when
called, so ``verl --help`` and ``verl config show`` never import torch models or Ray.

Every sub-command's errors go through one path, `run_reporting_user_errors`
(`verl.utils.errors`, so that the lower layers' entry points use it too): errors caused by the
user's input (`verl.utils.errors.UserError`, which includes ``ConfigError``) are printed as one
line ``verl <command>: <kind>: <message>`` with the error's exit status (2 for a config error),
the same for ``verl train``, ``sft``, ``dpo``, ``generate``, ``eval`` and the rest; ``--debug``
(anywhere on the command line) or ``VERL_DEBUG=1`` shows their traceback instead. The standard
library's input errors (`INPUT_ERRORS`) are one line too; any other exception is a bug and keeps
its traceback.
"""

from __future__ import annotations

import importlib
import os
import sys

from verl.utils.errors import INPUT_ERRORS, run_reporting_user_errors

__all__ = ["COMMANDS", "INPUT_ERRORS", "main", "run_reporting_user_errors"]

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("verl.commands.train:train_cli", "run RL training (PPO, GRPO, ...): verl train [CONFIG] [key=value ...]"),
    "sft": (
        "verl.commands.sft:main",
        "supervised fine-tuning (or trainer.algorithm=hybrid): verl sft [CONFIG] [key=value ...]",
    ),
    "dpo": ("verl.commands.sft:dpo_main", "DPO / IPO on preference pairs: verl dpo [CONFIG] [key=value ...]"),
    "generate": (
        "verl.commands.generate",
        "sample responses for a prompts file: verl generate [CONFIG] data.path=F data.output_path=G model.path=M",
    ),
    "eval": (
        "verl.commands.evaluate",
        "score generated responses (mean@n, best@n per data source): verl eval [CONFIG] data.path=G",
    ),
    "config": ("verl.config.cli", "inspect configs: verl config show [CONFIG] [key=value ...]"),
    "prepare": ("verl.data.prepare", "raw data -> training parquet: verl prepare gsm8k|math500 --input F --out DIR"),
    "builtin": (
        "verl.recipes.build",
        "build or list the built-in models: verl builtin build [NAME ...] | verl builtin list",
    ),
    "init-model": ("verl.modules.init_model", "write a randomly initialised model: verl init-model --arch qwen2 ..."),
    "bench": (
        "verl.commands.bench.bench",
        "throughput / MFU / memory of N RL steps: verl bench [CONFIG|--shape gsm8k] [--compare trl]",
    ),
    "plan": (
        "verl.commands.plan",
        "pre-flight memory plan: verl plan [CONFIG] [key=value ...] [--device cpu|gpu:80GiB]",
    ),
    "merge": ("verl.commands.merge", "checkpoint -> Hugging Face directory: verl merge CKPT_DIR OUT_DIR"),
    "doctor": ("verl.commands.doctor", "environment report + pre-flight checks: verl doctor [CONFIG] [key=value ...]"),
    "reward": (
        "verl.commands.reward_test",
        "probe the configured reward: verl reward test [CONFIG] [key=value ...] [--dump DIR] [--json]",
    ),
    "replay": (
        "verl.commands.replay",
        "re-run a sentinel incident step in-process (loss, grad norm): verl replay BUNDLE [--json]",
    ),
    "verify": (
        "verl.commands.verify",
        "paths that must agree (local/Ray, packed, micro-batched, resumed): verl verify [CONFIG] [key=value ...]",
    ),
    "view": (
        "verl.commands.viewer",
        "token-level trajectory inspector (HTML) of a rollout dump: verl view DIR [--out F] [--serve PORT]",
    ),
}


def _usage() -> str:
    lines = ["usage: verl [--debug] <command> [args]", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``verl <command> ...`` to the command's module; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:
        argv.remove("--debug")
        os.environ["VERL_DEBUG"] = "1"
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
    return run_reporting_user_errors(f"verl {name}", entry, rest)


if __name__ == "__main__":
    sys.exit(main())
