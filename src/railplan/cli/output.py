"""What the commands print: JSON that never holds inf or nan, and rich tables of text cells."""

from __future__ import annotations

import json
import math
from collections.abc import Container, Iterable, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from railplan.errors import RailplanError
from railplan.units import fmt_kw, fmt_usd, fmt_watts


def print_json(data: Any) -> None:
    """Print `data` as JSON; a non-finite number (which JSON cannot hold) is an error naming its
    field, never `Infinity` or `NaN` in the output."""
    try:
        text = json.dumps(data, indent=2, default=float, allow_nan=False)
    except ValueError:
        field = _non_finite_field(data, "output") or "output"
        raise RailplanError(
            field, "is not a finite number (inf or nan); check the inputs that feed it"
        ) from None
    typer.echo(text)


def _non_finite_field(data: Any, path: str) -> str | None:
    """The dotted path of the first inf/nan number in `data`, or None."""
    if isinstance(data, dict):
        items: list[tuple[str, Any]] = [(f"{path}.{k}", v) for k, v in data.items()]
    elif isinstance(data, list | tuple):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(data)]
    else:
        if isinstance(data, str | bool) or data is None:
            return None
        try:
            return None if math.isfinite(float(data)) else path
        except (TypeError, ValueError):
            return None
    for sub, value in items:
        found = _non_finite_field(value, sub)
        if found is not None:
            return found
    return None


def table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    left: Container[str] = (),
) -> Table:
    """A table of text cells (rich markup allowed): numbers right-aligned, the `left` columns
    (labels) left-aligned and folded onto more lines rather than cut where the terminal is
    narrow (a run's id stays whole)."""
    t = Table(title=title)
    for col in columns:
        if col in left:
            t.add_column(col, justify="left", overflow="fold")
        else:
            t.add_column(col, justify="right")
    for row in rows:
        t.add_row(*row)
    return t


def quantity_table(title: str, rows: Iterable[tuple[str, str]]) -> Table:
    """A two-column table: each quantity beside its value."""
    return table(title, ("quantity", "value"), rows, left=("quantity",))


# Number formats of the network commands' tables and notes; "n/a" where a price book leaves a
# figure out (the HTML report has its own, report/markup.py).
def musd(usd: float | None, like: float | None = None) -> str:
    return "n/a" if usd is None else fmt_usd(usd, like)


def mw(w: float | None, like: float | None = None) -> str:
    return "n/a" if w is None else fmt_watts(w, like)


def kw(w: float | None) -> str:
    return "n/a" if w is None else fmt_kw(w)


def pct(x: float | None) -> str:
    """A fraction as a percentage to 0.1 % (two decimals where that would read as zero: a
    rail-only network 0.02 % dearer is not "-0.0%")."""
    if x is None:
        return "n/a"
    if x != 0 and abs(100 * x) < 0.05:
        return f"{100 * x:.2f}%"
    return f"{100 * x:.1f}%"


def count(x: int | None) -> str:
    return "n/a" if x is None else f"{x:,}"


def distinct_outputs(**paths: str | None) -> None:
    """Two outputs given the same file would leave only the last one written: refused."""
    seen: dict[Path, str] = {}
    for name, path in paths.items():
        if not path:
            continue
        try:
            key = Path(path).expanduser().resolve()
        except (RuntimeError, OSError):  # a symlink loop: check_target names it next
            key = Path(path).expanduser().absolute()
        if key in seen:
            raise RailplanError(name, f"{path} is also given as --{seen[key].replace('_', '-')}")
        seen[key] = name
