"""Design-space sweeps: a grid over spec fields, each point a strategy search (best strategy).

Results go to a CSV file, one line per finished point, appended and flushed as soon as the
point is done, so a killed sweep loses nothing: on restart, points already in the file are
skipped (a torn last line of a killed write is dropped first). When pyarrow is importable, a
Parquet copy of the whole CSV is written next to it at the end.

Backends: `local` (processes of concurrent.futures; the default) and `ray` (tasks on an existing
cluster via `ray.init(address=...)`, or a local one). Both call `evaluate_point`.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from railplan.errors import RailplanError

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


def _parse_value(name: str, value: Any) -> Any:
    if name not in FIELDS:
        raise RailplanError("vary", f"unknown field {name!r}; one of {', '.join(FIELDS)}")
    try:
        return FIELDS[name](value)
    except (TypeError, ValueError):
        raise RailplanError(name, f"{value!r} is not a valid {FIELDS[name].__name__}") from None


def parse_vary(items: Iterable[str]) -> dict[str, list[Any]]:
    """['hb_domain=1,2,4', 'nic_gbps=100,400'] → {'hb_domain': [1, 2, 4], ...}."""
    out: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not values.strip():
            raise RailplanError("vary", f"{item!r}: write FIELD=v1,v2,...")
        out[name] = [_parse_value(name, v.strip()) for v in values.split(",") if v.strip()]
    return out


@dataclass(frozen=True)
class SweepSpec:
    """Base fields, the varied fields (a Cartesian grid, in the given order), ZeRO stages."""

    base: dict[str, Any]
    vary: dict[str, list[Any]]
    zero: tuple[int, ...] = (0, 1, 2, 3)

    @classmethod
    def build(
        cls,
        base: dict[str, Any],
        vary: dict[str, list[Any]],
        spec_file: Path | None = None,
        zero: tuple[int, ...] = (0, 1, 2, 3),
    ) -> SweepSpec:
        """Merge a YAML file (fields at the top level, a `vary` mapping, optional `zero`) with
        command-line values; the command line wins."""
        merged_base: dict[str, Any] = dict(DEFAULTS)
        merged_vary: dict[str, list[Any]] = {}
        if spec_file is not None:
            import yaml

            try:
                data = yaml.safe_load(Path(spec_file).read_text()) or {}
            except OSError as err:
                raise RailplanError("spec", f"cannot read {spec_file}: {err.strerror}") from None
            if not isinstance(data, dict):
                raise RailplanError("spec", "the YAML file must be a mapping")
            for name, values in (data.pop("vary", None) or {}).items():
                vals = values if isinstance(values, list) else [values]
                merged_vary[name] = [_parse_value(name, v) for v in vals]
            if "zero" in data:
                zero = tuple(int(z) for z in data.pop("zero"))
            for name, value in data.items():
                merged_base[name] = _parse_value(name, value)
        merged_base.update({k: _parse_value(k, v) for k, v in base.items()})
        merged_vary.update(vary)
        for name in REQUIRED:
            if name not in merged_base and name not in merged_vary:
                raise RailplanError(name, "required: give it as an option, in --spec or --vary")
        if not merged_vary:
            raise RailplanError("vary", "give at least one FIELD=v1,v2,... to sweep over")
        for name, values in merged_vary.items():
            if not values:
                raise RailplanError(name, "give at least one value")
        return cls(base=merged_base, vary=merged_vary, zero=zero)

    def points(self) -> list[dict[str, Any]]:
        """Every grid point: base fields overridden by one combination of the varied ones."""
        names = list(self.vary)
        out = []
        for combo in itertools.product(*(self.vary[n] for n in names)):
            p = {k: v for k, v in self.base.items() if k not in names}
            p.update(zip(names, combo, strict=True))
            out.append({k: p.get(k) for k in FIELDS})
        return out


def point_key(point: dict[str, Any], zero: tuple[int, ...]) -> str:
    """Stable identity of a point (its fields and the search space) for resuming."""
    return json.dumps({**{k: point.get(k) for k in FIELDS}, "zero": list(zero)}, sort_keys=True)


def evaluate_point(point: dict[str, Any], zero: tuple[int, ...]) -> dict[str, Any]:
    """Search the best strategy for one point; a bad point gives a row with `error` set."""
    from railplan.cli.core import build_network, build_system
    from railplan.search import SearchSpace, search
    from railplan.specs import load_model

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
    row.update(
        configurations_evaluated=r.configurations_evaluated,
        feasible=r.feasible,
        elapsed_s=r.elapsed_s,
    )
    if r.best is None:
        row["error"] = (
            "no valid strategy (tp·pp·dp = gpus, dp | batch, tp | heads, pp | layers)"
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
        strategy=f"tp{s.tp} pp{s.pp} dp{s.dp} v{s.interleave} mb{s.micro_batch} "
        f"{s.recompute}{' sp' if s.sequence_parallel else ''} zero{s.zero}",
    )
    return row


# ---- the CSV log: append one line per point, read back for resuming ------------------------


def _csv_line(row: dict[str, Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(
        ["" if row.get(c) is None else row.get(c) for c in COLUMNS]
    )
    return buf.getvalue()


def read_rows(path: Path) -> list[dict[str, str]]:
    """Complete rows of a sweep CSV (a torn last line of a killed write is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    lines = text.splitlines()
    if not lines or lines[0].split(",")[0] != "key":
        return []
    return list(csv.DictReader(lines))


def _prepare(path: Path) -> set[str]:
    """Make `path` a valid log (header, no torn line) and return the keys already done."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = read_rows(path)
    header = ",".join(COLUMNS) + "\n"
    if path.exists():
        text = path.read_text()
        first = text.split("\n", 1)[0] + "\n" if text else ""
        if text and first != header:
            raise RailplanError(
                "output", f"{path} exists but is not a railplan sweep CSV; choose another file"
            )
        if text and not text.endswith("\n"):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text[: text.rfind("\n") + 1])
            os.replace(tmp, path)
    if not path.exists() or path.stat().st_size == 0:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(header)
        os.replace(tmp, path)
    return {r["key"] for r in rows}


def _append(path: Path, row: dict[str, Any]) -> None:
    """One write of one complete line in append mode, flushed to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, _csv_line(row).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def write_parquet(csv_path: Path) -> Path | None:
    """A Parquet copy of the CSV (atomic replace) when pyarrow is importable, else None."""
    try:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        return None
    table = pacsv.read_csv(csv_path)
    out = csv_path.with_suffix(".parquet")
    tmp = out.with_name(out.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, out)
    return out


# ---- backends ------------------------------------------------------------------------------


def _local(
    points: list[dict[str, Any]], zero: tuple[int, ...], workers: int
) -> Iterator[dict[str, Any]]:
    if workers == 1:
        for p in points:
            yield evaluate_point(p, zero)
        return
    with ProcessPoolExecutor(max_workers=workers or None) as pool:
        futures: list[Future[dict[str, Any]]] = [
            pool.submit(evaluate_point, p, zero) for p in points
        ]
        for f in as_completed(futures):
            yield f.result()


def _ray(
    points: list[dict[str, Any]], zero: tuple[int, ...], address: str | None, in_flight: int
) -> Iterator[dict[str, Any]]:
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
    todo = list(points)
    while todo or pending:
        while todo and len(pending) < limit:
            pending.append(remote.remote(todo.pop(0), zero))
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            yield ray.get(ref)


@dataclass
class SweepResult:
    """Every row now in the CSV (earlier runs included) and what this run did."""

    csv_path: Path
    parquet_path: Path | None
    rows: list[dict[str, Any]]
    computed: int
    skipped: int
    vary: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "csv": str(self.csv_path),
            "parquet": str(self.parquet_path) if self.parquet_path else None,
            "computed": self.computed,
            "skipped": self.skipped,
            "vary": self.vary,
            "rows": self.rows,
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
) -> SweepResult:
    """Run the points not yet in `output`, appending each as it finishes."""
    if backend not in ("local", "ray"):
        raise RailplanError("backend", f"{backend!r} is not one of local, ray")
    if workers < 0:
        raise RailplanError("workers", "must be 0 (all cores) or a positive integer")
    output = Path(output)
    done = _prepare(output)
    points = spec.points()
    todo = [p for p in points if point_key(p, spec.zero) not in done]
    results = (
        _local(todo, spec.zero, workers)
        if backend == "local"
        else _ray(todo, spec.zero, address, workers)
    )
    computed = 0
    if progress and todo:
        from rich.progress import Progress

        with Progress() as bar:
            task = bar.add_task(f"sweep ({backend})", total=len(todo))
            for row in results:
                _append(output, row)
                computed += 1
                bar.advance(task)
    else:
        for row in results:
            _append(output, row)
            computed += 1
    keys = {point_key(p, spec.zero) for p in points}
    rows = [_typed(r) for r in read_rows(output) if r["key"] in keys]
    return SweepResult(
        csv_path=output,
        parquet_path=write_parquet(output),
        rows=rows,
        computed=computed,
        skipped=len(points) - len(todo),
        vary=list(spec.vary),
    )
