"""``python -m verl.model_merger merge --backend fsdp --local_dir DIR --target_dir OUT``.

verl's command line for turning a checkpoint into a Hugging Face directory, as a thin front
end over `verl.run.hf_export.export_hf` (the same checks and output as ``verl merge``).
``--local_dir`` is a ``global_step_N/actor`` directory (or ``global_step_N``); the HF
``config.json`` and tokenizer come from its ``huggingface/`` subdirectory, or from
``--hf_model_path`` when given. Only the ``fsdp`` backend exists here; verl's options for
value models, word-embedding tying and hub upload raise a one-line "not supported yet" error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from verl.run.checkpoint import CheckpointError
from verl.run.hf_export import export_hf
from verl.utils.errors import CheckpointLoadError

# verl flags without an equivalent here: refused rather than silently ignored
_UNSUPPORTED = {
    "is_value_model": "--is-value-model is not supported yet: only the actor (a causal LM) can be merged",
    "tie_word_embedding": "--tie-word-embedding is not supported yet: tying is read from the saved config.json",
    "hf_upload_path": "--hf_upload_path is not supported yet: upload --target_dir with huggingface_hub yourself",
    "private": "--private is not supported yet: it only applies to --hf_upload_path",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m verl.model_merger", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="operation", required=True)
    merge = sub.add_parser("merge", help="write a checkpoint's actor as a Hugging Face directory")
    merge.add_argument("--backend", required=True, help="checkpoint format; only 'fsdp' is supported")
    merge.add_argument("--local_dir", required=True, help="global_step_N/actor (or global_step_N)")
    merge.add_argument("--target_dir", required=True, help="output Hugging Face directory (new or empty)")
    merge.add_argument("--hf_model_path", default=None, help="HF directory to take config.json and tokenizer from")
    merge.add_argument(
        "--trust-remote-code",
        "--trust_remote_code",
        dest="trust_remote_code",
        action="store_true",
        help="allow a model_type unknown to transformers: imports modelling code",
    )
    merge.add_argument(
        "--use_cpu_initialization",
        action="store_true",
        help="accepted for verl compatibility: the model is always built on the CPU here",
    )
    merge.add_argument("--is-value-model", "--is_value_model", dest="is_value_model", action="store_true")
    merge.add_argument("--tie-word-embedding", "--tie_word_embedding", dest="tie_word_embedding", action="store_true")
    merge.add_argument("--hf_upload_path", default=None)
    merge.add_argument("--private", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 refused or failed, one-line error)."""
    args = _parser().parse_args(argv)
    problem = None
    if args.backend != "fsdp":
        problem = f"--backend {args.backend} is not supported yet: only 'fsdp' checkpoints exist in this verl"
    for key, message in _UNSUPPORTED.items():
        if problem is None and getattr(args, key):
            problem = message
    if problem is not None:
        print(f"verl.model_merger: {problem}", file=sys.stderr)
        return 2
    try:
        out = export_hf(
            args.local_dir, args.target_dir, trust_remote_code=args.trust_remote_code, hf_dir=args.hf_model_path
        )
    except (OSError, ValueError, CheckpointError, CheckpointLoadError) as e:
        print(f"verl.model_merger: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
