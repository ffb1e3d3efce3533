"""Matplotlib figures drawn without pyplot.

Each figure is a `matplotlib.figure.Figure` of its own: writing it to a file neither switches
the user's backend (a notebook's inline one stays) nor adds to pyplot's list of open figures,
so nothing needs closing and nothing leaks between calls.
"""

from __future__ import annotations

from typing import Any


def subplots(
    nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] | None = None
) -> tuple[Any, Any]:
    """A new figure and its axes, as `pyplot.subplots` returns them."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols)


def color_cycle() -> list[str]:
    """The colors of matplotlib's default property cycle."""
    import matplotlib

    colors: list[str] = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return colors
