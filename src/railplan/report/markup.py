"""HTML building blocks of the report: the page's CSS, escaping, number formats, tables and
plotly figure divs (no section logic: that is `report.html`)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

import plotly.io as pio

from railplan.units import fmt_usd, fmt_watts

PLOT_CONFIG: dict[str, Any] = {"displaylogo": False, "responsive": True}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #222; background: #fafafa; }
main { max-width: 1180px; margin: 0 auto; padding: 24px; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { border-bottom: 2px solid #ddd; padding-bottom: 4px; margin-top: 2em; }
section { background: #fff; padding: 8px 20px 16px; margin: 16px 0; border-radius: 6px;
          box-shadow: 0 1px 3px rgba(0,0,0,.08); }
table { border-collapse: collapse; margin: 10px 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; vertical-align: top; }
th { background: #f0f3f7; }
td.l, th.l { text-align: left; }
td:not(.l), th:not(.l) { white-space: nowrap; }
.scroll { overflow-x: auto; max-width: 100%; }
.grid > * { min-width: 0; }
@media (max-width: 900px) { .grid { grid-template-columns: 1fr; } }
.answers li { margin: 6px 0; }
.grid { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.note { color: #8a5300; background: #fff7e6; padding: 6px 10px; border-radius: 4px; }
.muted { color: #666; font-size: 0.85em; }
nav a { margin-right: 12px; }
"""


def esc(x: Any) -> str:
    return html.escape(str(x))


# What None means for the search-space fields where it is not "every valid value".
SPACE_NONE = {"lighter_head_stage": "automatic (tried where the model has MTP layers)"}


def _space_values(v: object, key: str = "") -> str:
    """A search-space field: its values, or what None means there (every valid value)."""
    if v is None:
        return SPACE_NONE.get(key, "every valid value")
    if isinstance(v, list | tuple):
        return ", ".join(readable(x) for x in v)
    return readable(v)


def readable(v: object) -> str:
    """A spec value as a reader wants it: yes/no for booleans, lists shortened to their ends,
    tables (dicts) as their entries, never a Python repr."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list | tuple):
        if len(v) > 4:
            return f"{readable(v[0])} … {readable(v[-1])} ({len(v)} values)"
        return ", ".join(readable(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(
            f"{k}: {readable(x)}" if not isinstance(x, dict) else f"{k} ({len(x)} entries)"
            for k, x in v.items()
            if x is not None
        )
    return str(v)


def fmt_s(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f} s"


def fmt_pct(x: float | None, signed: bool = False, digits: int = 1) -> str:
    if x is None:
        return "—"
    return f"{100 * x:{'+' if signed else ''}.{digits}f} %"


def fmt_int(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def fmt_musd(x: float | None) -> str:
    return "—" if x is None else fmt_usd(x)


def fmt_mw(x: float | None) -> str:
    return "—" if x is None else fmt_watts(x)


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[Any]],
    left: int = 1,
    text_last: bool = False,
) -> str:
    """An HTML table; the first `left` columns (and the last with `text_last`) are
    left-aligned, the others (numbers) right-aligned. Every cell is escaped."""
    last = len(header) - 1

    def cell(tag: str, i: int, v: Any) -> str:
        cls = ' class="l"' if i < left or (text_last and i == last) else ""
        return f"<{tag}{cls}>{esc(v)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows
    )
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def figure_div(fig: Any, div_id: str) -> str:
    return str(
        pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            include_mathjax=False,
            div_id=div_id,
            config=PLOT_CONFIG,
        )
    )
