"""Turn the exceptions a full disk, an unwritable path or a non-weights file raise deep inside
torch / safetensors into one-line `verl.utils.errors.UserError` s naming the path.

Used around checkpoint saves and restores by `RLTrainer`: a full disk during a save raises
`DiskError` (the half-written ``.tmp_global_step_N`` is never published, so the previous
checkpoint stays the latest); a checkpoint file that is not loadable raises
`CheckpointLoadError`. Errors from Ray workers arrive wrapped in ``WorkerError``; their cause
is inspected the same way.
"""

from __future__ import annotations

import errno
import pickle
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from verl.utils.errors import CheckpointLoadError, DiskError, UserError

DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOTDIR, errno.EISDIR}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = 0
    while exc is not None and seen < 8:
        yield exc
        exc = exc.__cause__ or exc.__context__
        seen += 1


def _is_safetensors_error(exc: BaseException) -> bool:
    return type(exc).__name__ == "SafetensorError" or "SafetensorError" in str(exc)


@contextmanager
def disk_errors(path: str | Path, action: str = "saving a checkpoint") -> Iterator[None]:
    """Re-raise a full disk / permission / safetensors write error as `DiskError` naming ``path``."""
    try:
        yield
    except UserError:
        raise
    except Exception as e:
        for cause in _chain(e):
            if isinstance(cause, OSError) and cause.errno in DISK_ERRNOS:
                raise DiskError(
                    f"{action} under {path} failed: {cause.strerror or cause} "
                    f"({errno.errorcode.get(cause.errno, cause.errno)}); the previous checkpoint is intact"
                ) from e
            if _is_safetensors_error(cause):
                raise DiskError(
                    f"{action} under {path} failed writing safetensors ({cause}); is the disk full? "
                    f"the previous checkpoint is intact"
                ) from e
        raise


@contextmanager
def load_errors(path: str | Path) -> Iterator[None]:
    """Re-raise "this file is not weights / state" errors as `CheckpointLoadError` naming ``path``."""
    try:
        yield
    except UserError:
        raise
    except Exception as e:
        from verl.utils.safe_load import refusal_reason

        for cause in _chain(e):
            if isinstance(cause, UserError):  # already one line naming the file (e.g. from a worker)
                raise cause from None
            if (
                isinstance(cause, (pickle.UnpicklingError, EOFError, zipfile.BadZipFile))
                or _is_safetensors_error(cause)
                or "PytorchStreamReader failed" in str(cause)
            ):
                # refusal_reason never relays torch's advice to load with weights_only=False
                raise CheckpointLoadError(
                    f"cannot load checkpoint {path}: a file there is not a loadable weights/state "
                    f"file ({refusal_reason(cause)})"
                ) from e
        raise
