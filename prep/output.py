"""An output directory that appears complete or not at all."""
import os
import shutil
import tempfile
from contextlib import contextmanager

from hs_prep.errors import PrepError


@contextmanager
def atomic_directory(output: str, overwrite: bool):
    """Yield a temporary sibling of output; rename it into place only if the body succeeds.

    The previous output (with overwrite) is swapped out, never half-overwritten; on any failure or
    interruption the temporary directory is removed and an existing output is untouched.
    """
    output = os.path.abspath(output)
    parent, name = os.path.split(output)
    if os.path.lexists(output):
        if not overwrite:
            raise PrepError(f"{output} already exists (pass --overwrite to replace it)")
        if not os.path.isdir(output):
            raise PrepError(f"{output} exists and is not a directory")
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would outlive the rename
    except OSError as e:
        raise PrepError(f"cannot write to {parent}: {e.strerror}") from None
    try:
        yield tmp
        if os.path.lexists(output):
            old = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
            os.rename(output, os.path.join(old, name))
            os.rename(tmp, output)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
