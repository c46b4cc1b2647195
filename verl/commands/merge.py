"""``verl merge CKPT_DIR OUT_DIR``: a checkpoint's actor → a Hugging Face directory (`verl.run.hf_export`).

What is verified, refused and written is `verl.run.hf_export.export_hf`'s contract.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from verl.run.checkpoint import CheckpointError
from verl.run.hf_export import export_hf
from verl.utils.errors import CheckpointLoadError


def main(argv: Sequence[str] | None = None) -> int:
    """``verl merge CKPT_DIR OUT_DIR [--adapter-only] [--no-verify] [--trust-remote-code]``."""
    parser = argparse.ArgumentParser(prog="verl merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("ckpt_dir", help="a global_step_N checkpoint directory, or its actor subdirectory")
    parser.add_argument("out_dir", help="output Hugging Face directory")
    parser.add_argument("--adapter-only", action="store_true", help="LoRA: write the adapter, not merged weights")
    parser.add_argument("--no-verify", action="store_true", help="export a checkpoint that has no manifest.json")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow a model_type unknown to transformers: imports modelling code from the checkpoint",
    )
    args = parser.parse_args(argv)
    try:
        out = export_hf(
            args.ckpt_dir,
            args.out_dir,
            adapter_only=args.adapter_only,
            verify=not args.no_verify,
            trust_remote_code=args.trust_remote_code,
        )
    except (OSError, ValueError, CheckpointError, CheckpointLoadError) as e:
        print(f"verl merge: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
