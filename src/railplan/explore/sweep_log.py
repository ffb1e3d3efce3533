"""A sweep's durable output: the CSV log (one line appended and flushed per finished point, read
back to resume; a torn last line of a killed write dropped first), the Parquet copy written at
the end, and the exclusive lock that lets one sweep at a time write an output."""

from __future__ import annotations

import csv
import fcntl
import io
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from railplan.errors import RailplanError
from railplan.explore.pool import INHERITED_FDS
from railplan.explore.sweep_spec import FIELDS
from railplan.fileio import atomic_write, check_target, show_path

CANDIDATE_COLUMNS = ("iteration_s", "mfu", "hfu", "memory_gib_per_gpu")
"""The best candidate's numbers a sweep row keeps."""
STRATEGY_COLUMNS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "interleave",
    "micro_batch",
    "recompute",
    "sequence_parallel",
    "zero",
)
"""The best strategy's fields a sweep row keeps (all of them in its `strategy` label)."""
RESULT_COLUMNS = (
    *CANDIDATE_COLUMNS,
    *STRATEGY_COLUMNS,
    "strategy",
    "estimate_command",
    "configurations_evaluated",
    "feasible",
    "elapsed_s",
    "error",
)


COLUMNS = tuple(dict.fromkeys(("key", *FIELDS, *RESULT_COLUMNS)))
"""A row's columns: tp, pp, cp and ep are fields a point may fix and the best strategy's
values (one column each: where fixed, the best has that value)."""
PREVIOUS_HEADER = (
    "key,model,system,network,oversubscription,gpus,global_batch,hb_domain,hb_tbps,nic_gbps,"
    "nics_per_gpu,nvls,sharp,iteration_s,mfu,hfu,memory_gib_per_gpu,tp,pp,dp,cp,ep,interleave,"
    "micro_batch,recompute,sequence_parallel,zero,strategy,configurations_evaluated,feasible,"
    "elapsed_s,error"
)
"""The header of a log written before a sweep had search fields and the estimate command:
read, and rewritten with today's (their rows' keys leave the unset search fields out, so they
are reused)."""


def _csv_line(row: dict[str, Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(
        ["" if row.get(c) is None else row.get(c) for c in COLUMNS]
    )
    return buf.getvalue()


def _rows(text: str) -> list[dict[str, str]]:
    """Complete rows of a sweep CSV's text (a torn last line of a killed write is left out)."""
    lines = text[: text.rfind("\n") + 1].splitlines()
    if not lines or lines[0].split(",")[0] != "key":
        return []
    return list(csv.DictReader(lines))


def read_rows(path: Path) -> list[dict[str, str]]:
    """Complete rows of a sweep CSV (a torn last line of a killed write is left out)."""
    return _rows(_read_log(path))


def is_done(row: dict[str, str]) -> bool:
    """Whether a CSV row is a finished answer: its search ran (`configurations_evaluated` is
    set), including "no valid strategy" and "nothing fits". A row whose evaluation raised an
    error has only `error` set; a resumed sweep drops it and computes the point again."""
    return row.get("configurations_evaluated", "") != ""


def _read_log(path: Path) -> str:
    """The CSV's text, "" when it does not exist yet; OS errors are one-line errors."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except UnicodeDecodeError:
        raise RailplanError(
            "output",
            f"{show_path(path)} exists but is not a railplan sweep CSV; choose another file",
        ) from None
    except OSError as err:
        raise RailplanError("output", f"cannot read {show_path(path)}: {err.strerror}") from None


def prepare_log(path: Path) -> set[str]:
    """Make `path` a valid log (header, complete lines, no rows to retry), replacing it
    atomically when it has to change, and return the keys already done."""
    check_target(path, "output")
    header = ",".join(COLUMNS) + "\n"
    text = _read_log(path)
    older = text.startswith(PREVIOUS_HEADER + "\n")
    if text and not text.startswith(header) and not older:
        other = text.startswith("key,")  # a sweep CSV with other columns: another version's
        why = "was written with other columns" if other else "is not a railplan sweep CSV"
        raise RailplanError("output", f"{path} exists but {why}; choose another file")
    rows = _rows(text)
    done = [r for r in rows if is_done(r)]
    # a log of the previous version is rewritten with today's columns (new fields empty)
    if older or len(done) < len(rows) or not text.endswith("\n"):

        def write(tmp: Path) -> None:
            tmp.write_text(header + "".join(_csv_line(r) for r in done))

        atomic_write(path, write, field="output")
    return {r["key"] for r in done}


def open_log(path: Path) -> int:
    """A descriptor to append to the prepared log, or a one-line error."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as err:
        raise RailplanError("output", f"cannot append to {str(path)!r}: {err.strerror}") from None


def append_row(fd: int, path: Path, row: dict[str, Any]) -> None:
    """One write of one complete line in append mode, flushed to disk."""
    try:
        os.write(fd, _csv_line(row).encode())
        os.fsync(fd)
    except OSError as err:
        raise RailplanError("output", f"cannot append to {str(path)!r}: {err.strerror}") from None


PARQUET_MISSING = "no Parquet copy: pyarrow is not installed (pip install 'railplan[parquet]')"


def output_paths(output: Path) -> tuple[Path, Path]:
    """The CSV log and the Parquet copy of `--output`: `x.csv` → (x.csv, x.parquet),
    `x.parquet` → (x.csv, x.parquet); never one path for both."""
    output = Path(output)
    if output.suffix == ".parquet":
        return output.with_suffix(".csv"), output
    return output, output.with_suffix(".parquet")


def write_parquet(csv_path: Path, out: Path | None = None) -> Path | None:
    """A Parquet copy of the CSV at `out` (default: beside it; atomic replace) when pyarrow is
    importable, else None."""
    try:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        return None
    out = output_paths(csv_path)[1] if out is None else out
    if Path(out) == Path(csv_path):
        raise RailplanError("output", f"the Parquet copy would overwrite {show_path(csv_path)}")
    table = pacsv.read_csv(csv_path)
    return atomic_write(out, lambda tmp: pq.write_table(table, str(tmp)), field="output")


@contextmanager
def output_lock(path: Path, wait: bool = False) -> Iterator[Path]:
    """Hold an exclusive `flock` on `PATH.lock` (created beside `path`, removed on release)
    while the body runs; the file names the holder's pid and host. When another process holds
    it, a one-line error names that holder, or with `wait` this blocks until it is released."""
    lock_path = path.with_name(path.name + ".lock")
    check_target(lock_path, "output")
    fd = _acquire(path, lock_path, wait)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        INHERITED_FDS.add(fd)
        yield lock_path
    finally:
        INHERITED_FDS.discard(fd)
        with suppress(OSError):
            os.unlink(lock_path)  # still held: a waiter re-checks the inode and retries
        os.close(fd)  # releases the lock


def _acquire(path: Path, lock_path: Path, wait: bool) -> int:
    """A descriptor of the lock file, locked; retried when the file was replaced meanwhile."""
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise RailplanError(
                "output", f"cannot open the lock file {show_path(lock_path)}: {err.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise RailplanError(
                "output",
                f"{show_path(path)} is being written by another sweep ({holder}, lock "
                f"{show_path(lock_path)}); wait for it to end, or pass --wait to queue behind it",
            ) from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder removed it as we waited: lock the current file
