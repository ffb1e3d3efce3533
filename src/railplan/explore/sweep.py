"""Design-space sweeps: a grid over spec fields and search settings, each point a strategy search
(best strategy).

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
cluster via `ray.init(address=...)`, or a local one). Both call `evaluate_point`. The grid is
`railplan.explore.sweep_spec`, the CSV log, Parquet copy and lock `railplan.explore.sweep_log`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Generator, Iterator
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from railplan.errors import RailplanError
from railplan.explore.pool import worker_pool
from railplan.explore.sweep_log import (
    CANDIDATE_COLUMNS,
    PARQUET_MISSING,
    RESULT_COLUMNS,
    STRATEGY_COLUMNS,
    append_row,
    is_done,
    open_log,
    output_lock,
    output_paths,
    prepare_log,
    read_rows,
    write_parquet,
)
from railplan.explore.sweep_spec import FIELDS, KEY_WHEN_SET, SweepSpec, search_space
from railplan.fileio import check_target
from railplan.specs.build import HARDWARE_OPTIONS, estimate_command


def point_key(point: dict[str, Any], zero: tuple[int, ...]) -> str:
    """Stable identity of a point (its fields and the search space) for resuming; a model or
    system given as a file is identified by its contents too, so editing the file computes the
    points again instead of reusing the old results."""
    named = {k: point.get(k) for k in FIELDS if k not in KEY_WHEN_SET or point.get(k) is not None}
    files = {f"{k}_sha256": d for k in ("model", "system") if (d := _file_digest(point.get(k)))}
    return json.dumps({**named, **files, "zero": sorted(set(zero))}, sort_keys=True)


def _file_digest(ref: Any) -> str | None:
    """The first 16 hex digits of a spec file's SHA-256 (None for a catalog name or an
    unreadable file, which the point's evaluation reports)."""
    if not isinstance(ref, str) or not (ref.endswith((".yaml", ".yml", ".json")) or "/" in ref):
        return None
    try:
        return hashlib.sha256(Path(ref).read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def failure_text(err: BaseException) -> str:
    """One line for the `error` column of a point that raised: the type and first line."""
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def failed_row(point: dict[str, Any], zero: tuple[int, ...], err: BaseException) -> dict[str, Any]:
    """The row of a point whose evaluation raised (only `error` set: retried on resume)."""
    return _empty_row(point, zero) | {"error": failure_text(err)}


def _empty_row(point: dict[str, Any], zero: tuple[int, ...]) -> dict[str, Any]:
    """A point's row before its results: its fields and key, every result column None."""
    row: dict[str, Any] = {k: point.get(k) for k in FIELDS}
    row["key"] = point_key(point, zero)
    row.update({c: None for c in RESULT_COLUMNS if c not in row})  # a fixed tp stays
    return row


def evaluate_point(point: dict[str, Any], zero: tuple[int, ...]) -> dict[str, Any]:
    """Search the best strategy for one point. When no strategy is valid or none fits, the
    row says so in `error` and is a finished answer; any exception raised on the way gives a
    row with only `error` set, which a resumed sweep computes again (see `is_done`)."""
    from railplan.explore.search import fixed_culprit, search
    from railplan.specs import Job, load_model
    from railplan.specs.build import build_network, build_system

    row = _empty_row(point, zero)
    try:
        m = load_model(point["model"])
        sy = build_system(
            point["system"],
            point.get("hb_domain"),
            point.get("hb_tbps"),
            point.get("nic_gbps"),
            point.get("nics_per_gpu"),
            nvls=point.get("nvls"),
        )
        net = build_network(point["network"], point.get("oversubscription"), point.get("sharp"))
        job = Job(m, sy, net, int(point["gpus"]), int(point["global_batch"]))
        space = search_space(point, zero)
        r = search(job, space, top=1)
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
        row["error"] = "no valid strategy fits in memory"
        if r.configurations_evaluated == 0:
            # a degree the point fixes that no strategy takes is named, as search names it
            culprit = fixed_culprit(job, space)
            row["error"] = (
                f"{culprit[0]}: {culprit[1]}"
                if culprit
                else "no valid strategy (tp·cp·pp·dp = gpus, dp | batch, tp | heads, pp ≤ layers)"
            )
        return row
    s = r.best.strategy
    row.update({c: getattr(r.best, c) for c in CANDIDATE_COLUMNS})
    row.update({c: getattr(s, c) for c in STRATEGY_COLUMNS}, strategy=s.label())
    row["estimate_command"] = estimate_command(
        point["model"],
        point["system"],
        int(point["gpus"]),
        s,
        **{k: point.get(k) for k in HARDWARE_OPTIONS},
    )
    return row


# ---- backends ------------------------------------------------------------------------------


Rows = Generator[dict[str, Any], None, None]


def _local(points: list[dict[str, Any]], zero: tuple[int, ...], workers: int) -> Rows:
    if workers == 1:
        for p in points:
            yield evaluate_point(p, zero)
        return
    # an error in the caller (disk full) or ^C: the rest is not computed
    with worker_pool(workers) as pool:
        futures: dict[Future[dict[str, Any]], dict[str, Any]] = {
            pool.submit(evaluate_point, p, zero): p for p in points
        }
        for f in as_completed(futures):
            try:
                yield f.result()
            except Exception as err:  # a worker that died: its point failed
                yield failed_row(futures[f], zero, err)


def _require_ray() -> None:
    """A one-line error, before anything is written, where Ray is not installed or does not
    import (it is imported here, as the sweep is about to use it)."""
    try:
        import ray  # noqa: F401
    except ImportError as err:
        installed = getattr(err, "name", None) != "ray"
        why = f"ray does not import ({err})" if installed else "ray is not installed"
        raise RailplanError("backend", f"{why}; pip install 'railplan[ray]'") from None


def _ray(
    points: list[dict[str, Any]], zero: tuple[int, ...], address: str | None, in_flight: int
) -> Rows:
    import ray  # run_sweep checked it imports (_require_ray)

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
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    if not console.is_terminal:  # a bar only where someone watches; pipes and logs stay clean
        yield from rows
        return
    with Progress(console=console) as bar:
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
    if backend == "ray":
        _require_ray()
    elif address is not None:
        raise RailplanError("ray_address", "takes effect only with --backend ray")
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
    done = prepare_log(output)
    points = spec.points()
    todo = [p for p in points if point_key(p, spec.zero) not in done]
    results = (
        _local(todo, spec.zero, workers)
        if backend == "local"
        else _ray(todo, spec.zero, address, workers)
    )
    computed = 0
    fd = open_log(output)
    try:
        for row in _with_progress(results, len(todo), f"sweep ({backend})", progress):
            append_row(fd, output, row)
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
