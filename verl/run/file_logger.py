"""verl's ``file`` logger: one JSON line per step, ``{"step": N, "data": {name: value}}``.

Where (verl's rule): ``$VERL_FILE_LOGGER_PATH`` when set; else
``$VERL_FILE_LOGGER_ROOT/<project_name>/<experiment_name>.jsonl`` (root default: the working
directory). Non-finite values are written as strings ("nan", "inf") so every line is valid JSON.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["FileLogger"]


class FileLogger:
    """Appends each step's metrics to a JSONL file (see module docstring).

    Args:
        project_name: ``trainer.project_name``.
        experiment_name: ``trainer.experiment_name``.
    """

    def __init__(self, project_name: str, experiment_name: str) -> None:
        path = os.environ.get("VERL_FILE_LOGGER_PATH")
        if path is None:
            root = Path(os.path.expanduser(os.environ.get("VERL_FILE_LOGGER_ROOT", ".")))
            path = str(root / project_name / f"{experiment_name}.jsonl")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fp = open(self.path, "a", encoding="utf-8")

    def log(self, data: dict[str, Any], step: int) -> None:
        """Append ``{"step": step, "data": data}`` (numbers only)."""
        clean = {
            k: (float(v) if math.isfinite(float(v)) else str(float(v)))
            for k, v in data.items()
            if isinstance(v, (int, float))
        }
        self._fp.write(json.dumps({"step": step, "data": clean}) + "\n")
        self._fp.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._fp.closed:
            self._fp.close()
