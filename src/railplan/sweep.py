"""Design-space sweeps: a grid over spec fields, each point a strategy search (best strategy).

Every value of the grid is checked before any point runs. Results go to a CSV file (its
directory must exist), one line per finished point, appended and flushed as soon as the point
is done, so a killed sweep loses nothing: on restart, points already in the file are skipped (a
torn last line of a killed write is dropped first). A point where no strategy is valid or fits
is an answer; a point whose evaluation raised an error (any exception) is recorded as failed,
the sweep goes on, and the point is computed again on restart. When pyarrow is importable, a
Parquet copy of the whole CSV replaces the old one atomically at the end (`--output x.parquet`
logs to `x.csv`: the two never share a path); without pyarrow the result says so.

One sweep at a time writes an output: an exclusive `flock` on `OUTPUT.lock` beside it, holding
the holder's pid and host. A second sweep on the same output is a one-line error naming the
holder, or waits for it (`wait=True`). Worker processes of the local backend poll their parent
and exit when it is gone, so a kill -9 of the sweep leaves no process behind.

Backends: `local` (processes of concurrent.futures; the default) and `ray` (tasks on an existing
cluster via `ray.init(address=...)`, or a local one). Both call `evaluate_point`.
"""

from __future__ import annotations

import csv
import fcntl
import io
import itertools
import json
import math
import os
import socket
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from railplan.errors import RailplanError
from railplan.fileio import atomic_write, check_target, load_yaml, show_path
from railplan.limits import MAX_GLOBAL_BATCH, MAX_GPUS, check_int

# Spec fields a sweep can vary, with their parser; the defaults of a point.
FIELDS: dict[str, Callable[[str], Any]] = {
    "model": str,
    "system": str,
    "network": str,
    "oversubscription": float,
    "gpus": int,
    "global_batch": int,
    "hb_domain": int,
    "hb_tbps": float,
    "nic_gbps": float,
    "nics_per_gpu": float,
}
DEFAULTS: dict[str, Any] = {"system": "dgx-a100", "network": "rail-optimized"}
REQUIRED = ("model", "gpus", "global_batch")
MAX_POINTS = 100_000
"""Most grid points one sweep may have (each is a strategy search)."""
RESULT_COLUMNS = (
    "iteration_s",
    "mfu",
    "hfu",
    "memory_gib_per_gpu",
    "tp",
    "pp",
    "dp",
    "interleave",
    "micro_batch",
    "recompute",
    "sequence_parallel",
    "zero",
    "strategy",
    "configurations_evaluated",
    "feasible",
    "elapsed_s",
    "error",
)
COLUMNS = ("key", *FIELDS, *RESULT_COLUMNS)


def int_list(field_name: str, text: str) -> list[int]:
    """'0,1,2' → [0, 1, 2], or a one-line error naming the field."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise RailplanError(
            field_name, f"{text!r} is not a comma-separated list of integers"
        ) from None
    if not values:
        raise RailplanError(field_name, "give at least one integer")
    return values


_KIND_TEXT: dict[Callable[[str], Any], str] = {str: "a name", int: "an integer", float: "a number"}
SPEC_KEYS = (*FIELDS, "vary", "zero")


def _check_field(name: Any, where: str) -> str:
    if name not in FIELDS:
        raise RailplanError(where, f"unknown field {name!r}; one of {', '.join(FIELDS)}")
    return str(name)


def _parse_value(name: str, value: Any) -> Any:
    """One value of a field, as text (command line) or typed (YAML); a one-line error names
    the field. Booleans, 8.5 for an integer and non-finite numbers are refused."""
    kind = FIELDS[name]
    parsed: Any = None
    if isinstance(value, str) and value.strip():
        try:
            parsed = kind(value.strip())
        except ValueError:
            parsed = None
    elif kind is int and type(value) is int:
        parsed = value
    elif kind is float and type(value) in (int, float):
        parsed = float(value)
    if parsed is None or (kind is float and not math.isfinite(parsed)):
        raise RailplanError(name, f"{value!r} is not {_KIND_TEXT[kind]}")
    return parsed


def parse_vary(items: Iterable[str]) -> dict[str, list[Any]]:
    """['hb_domain=1,2,4', 'nic_gbps=100,400'] → {'hb_domain': [1, 2, 4], ...}.

    Each field may appear once: a repeated field is an error rather than a silent override."""
    out: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = _check_field(name.strip(), "vary")
        if not sep or not values.strip():
            raise RailplanError("vary", f"{item!r}: write FIELD=v1,v2,...")
        if name in out:
            raise RailplanError(
                "vary", f"{name} given twice; list all its values in one --vary {name}=v1,v2,..."
            )
        out[name] = [_parse_value(name, v.strip()) for v in values.split(",") if v.strip()]
    return out


def _read_spec_file(
    path: Path,
) -> tuple[dict[str, Any], dict[str, list[Any]], tuple[int, ...] | None]:
    """Base fields, varied fields and ZeRO stages of a YAML sweep file; one-line errors."""
    data = load_yaml(Path(path), "spec")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RailplanError("spec", f"{str(path)!r} must be a mapping of fields to values")
    for key in data:
        if key not in SPEC_KEYS:
            raise RailplanError("spec", f"unknown key {key!r}; one of {', '.join(SPEC_KEYS)}")
    vary_data = data.get("vary") or {}
    if not isinstance(vary_data, dict):
        raise RailplanError("vary", "must be a mapping of FIELD: [v1, v2, ...]")
    vary: dict[str, list[Any]] = {}
    for name, values in vary_data.items():
        name = _check_field(name, "vary")
        if not isinstance(values, list):
            raise RailplanError(f"vary.{name}", f"{values!r} is not a list; write [v1, v2, ...]")
        vary[name] = [_parse_value(name, v) for v in values]
    zero: tuple[int, ...] | None = None
    if "zero" in data:
        stages = data["zero"]
        if not isinstance(stages, list) or any(type(z) is not int for z in stages):
            raise RailplanError("zero", f"{stages!r}: give a list of ZeRO stages, e.g. [0, 1]")
        zero = tuple(stages)
    base = {k: _parse_value(k, v) for k, v in data.items() if k in FIELDS}
    return base, vary, zero


@dataclass(frozen=True)
class SweepSpec:
    """Base fields, the varied fields (a Cartesian grid, in the given order), ZeRO stages.

    Constructing one checks every value of the grid the way `railplan search` checks its
    options, so a bad value fails before any point is computed."""

    base: dict[str, Any]
    vary: dict[str, list[Any]]
    zero: tuple[int, ...] = (0, 1, 2, 3)

    def __post_init__(self) -> None:
        for name in REQUIRED:
            if name not in self.base and name not in self.vary:
                raise RailplanError(name, "required: give it as an option, in --spec or --vary")
        if not self.vary:
            raise RailplanError("vary", "give at least one FIELD=v1,v2,... to sweep over")
        for name in self.base:
            _check_field(name, "base")
        for name in self.vary:
            _check_field(name, "vary")
        for name, values in self.vary.items():
            if not values:
                raise RailplanError(name, "give at least one value")
        size = math.prod(len(dict.fromkeys(v)) for v in self.vary.values())
        if size > MAX_POINTS:
            raise RailplanError(
                "vary", f"the grid has {size:,} points; at most {MAX_POINTS:,} per sweep"
            )
        self._check_points()

    def _check_points(self) -> None:
        from railplan.search import SearchSpace
        from railplan.specs import load_model
        from railplan.specs.build import build_network, build_system

        SearchSpace(zero=self.zero)
        points = self.points()

        def distinct(*names: str) -> list[tuple[Any, ...]]:
            return list(dict.fromkeys(tuple(p[n] for n in names) for p in points))

        for name, high in (("gpus", MAX_GPUS), ("global_batch", MAX_GLOBAL_BATCH)):
            for (value,) in distinct(name):
                check_int(name, value, 1, high)
        for (model,) in distinct("model"):
            load_model(model)
        for system in distinct("system", "hb_domain", "hb_tbps", "nic_gbps", "nics_per_gpu"):
            build_system(*system)
        for network in distinct("network", "oversubscription"):
            build_network(*network)

    @classmethod
    def build(
        cls,
        base: dict[str, Any],
        vary: dict[str, list[Any]],
        spec_file: Path | None = None,
        zero: tuple[int, ...] | None = None,
    ) -> SweepSpec:
        """Merge a YAML file (fields at the top level, a `vary` mapping, optional `zero`) with
        command-line values; the command line wins (`zero` defaults to 0, 1, 2, 3)."""
        merged_base: dict[str, Any] = dict(DEFAULTS)
        merged_vary: dict[str, list[Any]] = {}
        file_zero: tuple[int, ...] | None = None
        if spec_file is not None:
            file_base, file_vary, file_zero = _read_spec_file(spec_file)
            merged_base.update(file_base)
            merged_vary.update(file_vary)
        merged_base.update({k: _parse_value(_check_field(k, "base"), v) for k, v in base.items()})
        merged_vary.update(vary)
        if zero is None:
            zero = file_zero if file_zero is not None else (0, 1, 2, 3)
        return cls(base=merged_base, vary=merged_vary, zero=zero)

    def points(self) -> list[dict[str, Any]]:
        """Every grid point: base fields overridden by one combination of the varied ones
        (a value listed twice gives one point)."""
        names = list(self.vary)
        out = []
        for combo in itertools.product(*(dict.fromkeys(self.vary[n]) for n in names)):
            p = {k: v for k, v in self.base.items() if k not in names}
            p.update(zip(names, combo, strict=True))
            out.append({k: p.get(k) for k in FIELDS})
        return out


def point_key(point: dict[str, Any], zero: tuple[int, ...]) -> str:
    """Stable identity of a point (its fields and the search space) for resuming."""
    return json.dumps({**{k: point.get(k) for k in FIELDS}, "zero": list(zero)}, sort_keys=True)


def failure_text(err: BaseException) -> str:
    """One line for the `error` column of a point that raised: the type and first line."""
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def failed_row(point: dict[str, Any], zero: tuple[int, ...], err: BaseException) -> dict[str, Any]:
    """The row of a point whose evaluation raised (only `error` set: retried on resume)."""
    row: dict[str, Any] = {k: point.get(k) for k in FIELDS}
    row["key"] = point_key(point, zero)
    row.update({c: None for c in RESULT_COLUMNS})
    row["error"] = failure_text(err)
    return row


def evaluate_point(point: dict[str, Any], zero: tuple[int, ...]) -> dict[str, Any]:
    """Search the best strategy for one point. When no strategy is valid or none fits, the
    row says so in `error` and is a finished answer; any exception raised on the way gives a
    row with only `error` set, which a resumed sweep computes again (see `is_done`)."""
    from railplan.search import SearchSpace, search
    from railplan.specs import load_model
    from railplan.specs.build import build_network, build_system

    row: dict[str, Any] = {k: point.get(k) for k in FIELDS}
    row["key"] = point_key(point, zero)
    row.update({c: None for c in RESULT_COLUMNS})
    try:
        m = load_model(point["model"])
        sy = build_system(
            point["system"],
            point.get("hb_domain"),
            point.get("hb_tbps"),
            point.get("nic_gbps"),
            point.get("nics_per_gpu"),
        )
        net = build_network(point["network"], point.get("oversubscription"))
        r = search(
            m,
            sy,
            net,
            int(point["gpus"]),
            int(point["global_batch"]),
            SearchSpace(zero=zero),
            top=1,
        )
    except RailplanError as err:
        row["error"] = str(err)
        return row
    except Exception as err:  # a point that raises fails alone; the sweep goes on
        row["error"] = failure_text(err)
        return row
    row.update(
        configurations_evaluated=r.configurations_evaluated,
        feasible=r.feasible,
        elapsed_s=r.elapsed_s,
    )
    if r.best is None:
        row["error"] = (
            "no valid strategy (tp·cp·pp·dp = gpus, dp | batch, tp | heads, pp ≤ layers)"
            if r.configurations_evaluated == 0
            else "no valid strategy fits in memory"
        )
        return row
    s = r.best.strategy
    row.update(
        iteration_s=r.best.iteration_s,
        mfu=r.best.mfu,
        hfu=r.best.hfu,
        memory_gib_per_gpu=r.best.memory_gib_per_gpu,
        tp=s.tp,
        pp=s.pp,
        dp=s.dp,
        interleave=s.interleave,
        micro_batch=s.micro_batch,
        recompute=s.recompute,
        sequence_parallel=s.sequence_parallel,
        zero=s.zero,
        strategy=s.label(),
    )
    return row


# ---- the CSV log: append one line per point, read back for resuming ------------------------


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


def _prepare(path: Path) -> set[str]:
    """Make `path` a valid log (header, complete lines, no rows to retry), replacing it
    atomically when it has to change, and return the keys already done."""
    check_target(path, "output")
    header = ",".join(COLUMNS) + "\n"
    text = _read_log(path)
    if text and not text.startswith(header):
        raise RailplanError(
            "output", f"{path} exists but is not a railplan sweep CSV; choose another file"
        )
    rows = _rows(text)
    done = [r for r in rows if is_done(r)]
    if len(done) < len(rows) or not text.endswith("\n"):

        def write(tmp: Path) -> None:
            tmp.write_text(header + "".join(_csv_line(r) for r in done))

        atomic_write(path, write, field="output")
    return {r["key"] for r in done}


def _open_log(path: Path) -> int:
    """A descriptor to append to the prepared log, or a one-line error."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as err:
        raise RailplanError("output", f"cannot append to {str(path)!r}: {err.strerror}") from None


def _append(fd: int, path: Path, row: dict[str, Any]) -> None:
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


# ---- one sweep per output: an exclusive lock beside it -------------------------------------

_LOCK_FDS: set[int] = set()


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
        _LOCK_FDS.add(fd)
        yield lock_path
    finally:
        _LOCK_FDS.discard(fd)
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


# ---- backends ------------------------------------------------------------------------------


Rows = Generator[dict[str, Any], None, None]


PARENT_POLL_S = 0.5
"""How often a worker process checks that the sweep that started it is still alive."""


def _watch_parent(parent_pid: int) -> None:
    """Worker initializer: drop the sweep's lock descriptors inherited by fork, and exit as
    soon as the parent is gone (kill -9 of the sweep), instead of waiting forever on a queue."""
    for fd in list(_LOCK_FDS):
        with suppress(OSError):
            os.close(fd)
    _LOCK_FDS.clear()

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            threading.Event().wait(PARENT_POLL_S)

    threading.Thread(target=watch, name="railplan-parent-watch", daemon=True).start()


def _local(points: list[dict[str, Any]], zero: tuple[int, ...], workers: int) -> Rows:
    if workers == 1:
        for p in points:
            yield evaluate_point(p, zero)
        return
    pool = ProcessPoolExecutor(
        max_workers=workers or None, initializer=_watch_parent, initargs=(os.getpid(),)
    )
    try:
        futures: dict[Future[dict[str, Any]], dict[str, Any]] = {
            pool.submit(evaluate_point, p, zero): p for p in points
        }
        for f in as_completed(futures):
            try:
                yield f.result()
            except Exception as err:  # a worker that died: its point failed
                yield failed_row(futures[f], zero, err)
    finally:  # an error in the caller (disk full) or ^C: do not compute the rest
        pool.shutdown(cancel_futures=True)


def _ray(
    points: list[dict[str, Any]], zero: tuple[int, ...], address: str | None, in_flight: int
) -> Rows:
    try:
        import ray
    except ImportError:
        raise RailplanError(
            "backend", "ray is not installed; pip install 'railplan[ray]'"
        ) from None
    if not ray.is_initialized():
        if address:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        else:
            ray.init(ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
    remote = ray.remote(evaluate_point)
    resources: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
    limit = in_flight or max(1, int(resources.get("CPU", 1)) * 2)
    pending: list[Any] = []
    point_of: dict[Any, dict[str, Any]] = {}
    todo = list(points)
    while todo or pending:
        while todo and len(pending) < limit:
            point = todo.pop(0)
            ref = remote.remote(point, zero)
            point_of[ref] = point
            pending.append(ref)
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            point = point_of.pop(ref)
            try:
                yield ray.get(ref)
            except Exception as err:  # a task or worker that died: that point failed
                yield failed_row(point, zero, err)


def _with_progress(rows: Rows, total: int, label: str, show: bool) -> Iterator[dict[str, Any]]:
    if not show or not total:
        yield from rows
        return
    from rich.progress import Progress

    with Progress() as bar:
        task = bar.add_task(label, total=total)
        for row in rows:
            yield row
            bar.advance(task)


@dataclass
class SweepResult:
    """Every row now in the CSV (earlier runs included) and what this run did; `failed` rows
    raised an error while evaluating and are computed again by the next run."""

    csv_path: Path
    parquet_path: Path | None
    rows: list[dict[str, Any]]
    computed: int
    skipped: int
    failed: int = 0
    vary: list[str] = field(default_factory=list)
    note: str | None = None  # why there is no Parquet copy, when there is none

    def to_dict(self) -> dict[str, Any]:
        return {
            "csv": str(self.csv_path),
            "parquet": str(self.parquet_path) if self.parquet_path else None,
            "computed": self.computed,
            "skipped": self.skipped,
            "failed": self.failed,
            "vary": self.vary,
            "rows": self.rows,
            "note": self.note,
        }


def _typed(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if v == "":
            out[k] = None
        elif k in FIELDS:
            out[k] = FIELDS[k](v)
        elif k in ("iteration_s", "mfu", "hfu", "memory_gib_per_gpu", "elapsed_s"):
            out[k] = float(v)
        elif k in (
            "tp",
            "pp",
            "dp",
            "interleave",
            "micro_batch",
            "zero",
            "feasible",
            "configurations_evaluated",
        ):
            out[k] = int(v)
        elif k == "sequence_parallel":
            out[k] = v == "True"
        else:
            out[k] = v
    return out


def run_sweep(
    spec: SweepSpec,
    output: Path,
    backend: str = "local",
    workers: int = 0,
    address: str | None = None,
    progress: bool = True,
    wait: bool = False,
) -> SweepResult:
    """Run the points not yet in `output`, appending each as it finishes, under the output's
    lock (see `output_lock`); rows come back in grid order."""
    if backend not in ("local", "ray"):
        raise RailplanError("backend", f"{backend!r} is not one of local, ray")
    if workers < 0:
        raise RailplanError("workers", "must be 0 (all cores) or a positive integer")
    csv_path, parquet_path = output_paths(Path(output))
    csv_path = check_target(csv_path, "output")
    check_target(parquet_path, "output")
    with output_lock(csv_path, wait=wait):
        return _run_locked(spec, csv_path, parquet_path, backend, workers, address, progress)


def _run_locked(
    spec: SweepSpec,
    output: Path,
    parquet_path: Path,
    backend: str,
    workers: int,
    address: str | None,
    progress: bool,
) -> SweepResult:
    done = _prepare(output)
    points = spec.points()
    todo = [p for p in points if point_key(p, spec.zero) not in done]
    results = (
        _local(todo, spec.zero, workers)
        if backend == "local"
        else _ray(todo, spec.zero, address, workers)
    )
    computed = 0
    fd = _open_log(output)
    try:
        for row in _with_progress(results, len(todo), f"sweep ({backend})", progress):
            _append(fd, output, row)
            computed += 1
    finally:
        results.close()
        os.close(fd)
    order = {point_key(p, spec.zero): i for i, p in enumerate(points)}
    raw = sorted((r for r in read_rows(output) if r["key"] in order), key=lambda r: order[r["key"]])
    parquet = write_parquet(output, parquet_path)
    return SweepResult(
        csv_path=output,
        parquet_path=parquet,
        rows=[_typed(r) for r in raw],
        computed=computed,
        skipped=len(points) - len(todo),
        failed=sum(not is_done(r) for r in raw),
        vary=list(spec.vary),
        note=None if parquet is not None else PARQUET_MISSING,
    )
