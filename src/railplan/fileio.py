"""Saving files the user asked for: all or nothing, and a clear error when the disk says no.

`atomic_write` runs the writer on a temporary file next to the target and renames it into place,
so an error or an interrupt leaves neither a partial file nor a damaged old one. Operating-system
errors (missing directory, no permission, disk full) become one-line `RailplanError`s that name
the path.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from railplan.errors import RailplanError


def check_target(path: Path, field: str = "output") -> Path:
    """Check, before any long work, that `path` can be a file we write: not a directory, and
    its directory exists (we never create directories the user did not ask for)."""
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()  # write through the link: replace the file it points to
    if path.is_dir():
        raise RailplanError(field, f"{str(path)!r} is a directory; give a file name")
    if path.exists() and not path.is_file():
        raise RailplanError(field, f"{str(path)!r} is not a regular file; give a file name")
    if not path.parent.is_dir():
        raise RailplanError(field, f"directory {str(path.parent)!r} does not exist")
    return path


def atomic_write(path: Path, write: Callable[[Path], None], field: str = "output") -> Path:
    """Run `write(tmp)` on a temporary file next to `path`, then rename it onto `path`."""
    path = check_target(path, field)
    try:
        fd, tmp_name = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent
        )
    except OSError as err:
        raise RailplanError(field, f"cannot write in {str(path.parent)!r}: {err.strerror}") from err
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except OSError as err:
        raise RailplanError(field, f"cannot write {str(path)!r}: {err.strerror or err}") from err
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
