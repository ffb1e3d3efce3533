"""Plotly figures of the report, built only from the section data of `railplan.report.sections`.

Each function returns a `plotly.graph_objects.Figure`; `html.py` turns them into divs that share
one inlined copy of plotly.js.
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from railplan.traffic.matrix import KINDS

NETWORK_COLOURS = {"rail-optimized": "#1f77b4", "rail-only": "#ff7f0e", "ideal": "#2ca02c"}
BREAKDOWN_ORDER = (
    "compute",
    "recompute",
    "tp_comm",
    "ep_comm",
    "pp_comm",
    "zero_comm",
    "grad_accumulation",
    "fp8_amax",
    "pipeline_bubble",
    "dp_comm_exposed",
    "optimizer",
)
LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "height": 380,
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "legend": {"orientation": "h", "y": -0.2},
}


def _layout(fig: go.Figure, title: str, **extra: Any) -> go.Figure:
    fig.update_layout(**(LAYOUT | {"title": {"text": title, "x": 0.01}} | extra))
    return fig


def breakdown(perf: dict[str, Any]) -> go.Figure:
    """Stacked bars: where the best strategy's iteration time goes, per network."""
    nets = [n for n, v in perf["networks"].items() if v["best"] is not None]
    seen = {k for n in nets for k in perf["networks"][n]["best"]["breakdown_s"]}
    ordered = [*BREAKDOWN_ORDER, *sorted(seen - set(BREAKDOWN_ORDER))]  # none dropped
    parts = [
        k
        for k in ordered
        if any(perf["networks"][n]["best"]["breakdown_s"].get(k, 0.0) > 0 for n in nets)
    ]
    fig = go.Figure(
        [
            go.Bar(
                name=k,
                y=nets,
                x=[perf["networks"][n]["best"]["breakdown_s"].get(k, 0.0) for n in nets],
                orientation="h",
                hovertemplate="%{y}: " + k + " %{x:.3f} s<extra></extra>",
            )
            for k in parts
        ]
    )
    return _layout(
        fig,
        "Iteration time of the best strategy, by component",
        barmode="stack",
        xaxis_title="seconds per iteration",
    )


def cost_power(cost: dict[str, Any]) -> go.Figure:
    """Dollars and watts of both designs, split into switch ports and transceivers."""
    nets = ("rail_optimized", "rail_only")
    labels = ["rail-optimized", "rail-only"]
    total_w = [cost[n]["power_w"] or 0.0 for n in nets]
    w_unit, w_div = ("MW", 1e6) if max(total_w) >= 1e6 else ("kW", 1e3)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cost (million USD)", f"power ({w_unit})"))
    for part, colour in (("switch", "#1f77b4"), ("transceiver", "#ff7f0e")):
        fig.add_trace(
            go.Bar(
                name=f"{part} ports" if part == "switch" else "transceivers",
                x=labels,
                y=[cost[n][f"{part}_cost_usd"] / 1e6 for n in nets],
                marker_color=colour,
                legendgroup=part,
            ),
            row=1,
            col=1,
        )
        watts = [cost[n][f"{part}_power_w"] for n in nets]
        if all(w is not None for w in watts):
            fig.add_trace(
                go.Bar(
                    name=part,
                    x=labels,
                    y=[w / w_div for w in watts],
                    marker_color=colour,
                    legendgroup=part,
                    showlegend=False,
                ),
                row=1,
                col=2,
            )
    if any(cost[n]["power_w"] is None for n in nets):
        # A price book without watts (e.g. public-web-estimates at 800 Gbps): say so in the
        # panel instead of leaving it blank.
        fig.add_annotation(
            text="no watts in this price book<br>(give one with power figures)",
            xref="x2 domain",
            yref="y2 domain",
            x=0.5,
            y=0.5,
            showarrow=False,
        )
    return _layout(fig, "Network cost and power", barmode="stack")


def heatmap(tr: dict[str, Any]) -> go.Figure:
    """log10 bytes GPU i → GPU j of the first GPUs in one iteration."""
    n = tr["heatmap_gpus"]
    z = [[math.log10(b) if b > 0 else None for b in row] for row in tr["heatmap_bytes"]]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(n)),
            y=list(range(n)),
            colorscale="Viridis",
            colorbar={"title": {"text": "log10 bytes"}},
            hovertemplate="GPU %{y} → GPU %{x}: 10^%{z:.2f} bytes<extra></extra>",
        )
    )
    return _layout(
        fig,
        f"Bytes per GPU pair, first {n} GPUs (empty = no traffic)",
        height=520,
        xaxis_title="destination GPU",
        yaxis={"title": {"text": "source GPU"}, "autorange": "reversed", "scaleanchor": "x"},
    )


def traffic_kinds(tr: dict[str, Any]) -> go.Figure:
    """Bytes by kind (TP, PP, DP, EP), inside HB domains vs over the NIC domain."""
    s = tr["stats"]
    kinds = [k for k in KINDS if s["bytes_by_kind"][k] > 0]
    fig = go.Figure(
        [
            go.Bar(
                name=where,
                x=[k.upper() for k in kinds],
                y=[s[f"{key}_bytes_by_kind"][k] / 1e9 for k in kinds],
                customdata=[100 * s["share_by_kind"][k] for k in kinds],
                hovertemplate="%{x} " + where + ": %{y:,.1f} GB (kind: %{customdata:.1f} % of all)"
                "<extra></extra>",
            )
            for where, key in (("HB domain", "hb"), ("NIC domain", "nic"))
        ]
    )
    return _layout(
        fig, "Bytes per iteration by kind", barmode="stack", yaxis_title="GB per iteration"
    )


LINE_STYLES: dict[str, dict[str, Any]] = {
    "rail-only": {"width": 4},
    "rail-optimized": {"width": 2, "dash": "dash"},  # drawn on top: visible where they agree
}


def _lines(points: list[dict[str, Any]], x: str, y: str) -> list[go.Scatter]:
    nets = sorted(dict.fromkeys(p["network"] for p in points), key=lambda n: n != "rail-only")
    return [
        go.Scatter(
            name=n,
            x=[p[x] for p in points if p["network"] == n],
            y=[p[y] for p in points if p["network"] == n],
            mode="lines+markers",
            line={"color": NETWORK_COLOURS.get(n)} | LINE_STYLES.get(n, {}),
        )
        for n in nets
    ]


def sweep_hb_domain(sens: dict[str, Any]) -> go.Figure:
    """Best iteration time vs HB-domain size K, with ideal as a horizontal line."""
    fig = go.Figure(_lines(sens["hb_domain"], "hb_domain", "iteration_s"))
    if sens["ideal_iteration_s"] is not None:
        fig.add_hline(
            y=sens["ideal_iteration_s"],
            line_dash="dot",
            line_color=NETWORK_COLOURS["ideal"],
            annotation_text="ideal",
        )
    return _layout(
        fig,
        "HB-domain size K",
        xaxis={"title": {"text": "K (GPUs per HB domain)"}, "type": "log", "dtick": math.log10(2)},
        yaxis_title="best iteration time (s)",
    )


def sweep_bandwidth(sens: dict[str, Any], key: str, title: str, unit: str) -> go.Figure:
    """Best iteration time vs a bandwidth (HB or NIC)."""
    fig = go.Figure(_lines(sens[key], key, "iteration_s"))
    return _layout(fig, title, xaxis_title=unit, yaxis_title="best iteration time (s)")


def sweep_batch(sens: dict[str, Any]) -> go.Figure:
    """Performance relative to ideal (t_ideal / t) vs global batch."""
    fig = go.Figure(_lines(sens["batch"], "global_batch", "relative_to_ideal"))
    missing = sorted(
        {p["global_batch"] for p in sens["batch"] if p.get("relative_to_ideal") is None}
    )
    title = "Global batch size" + (
        f" (no valid strategy at batch {', '.join(map(str, missing))})" if missing else ""
    )
    return _layout(
        fig,
        title,
        xaxis={"title": {"text": "global batch (sequences)"}, "type": "log"},
        yaxis={"title": {"text": "performance relative to ideal"}, "tickformat": ".0%"},
    )


def failures(fail: dict[str, Any]) -> go.Figure:
    """Monte Carlo: switches (failure points), interruptions and spare GPUs per design."""
    v = fail["monte_carlo"]["variants"]
    names = list(v)
    metrics = (
        ("switches", "switches"),
        ("expected_interruptions", "expected interruptions"),
        ("spare_gpus_needed", "spare GPUs needed"),
    )
    fig = make_subplots(rows=1, cols=3, subplot_titles=[t for _, t in metrics])
    for col, (key, _) in enumerate(metrics, 1):
        fig.add_trace(
            go.Bar(
                x=names,
                y=[v[n][key] for n in names],
                marker_color=["#1f77b4", "#ff7f0e", "#d62728"][: len(names)],
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    mc = fail["monte_carlo"]
    return _layout(
        fig, f"Monte Carlo of a {mc['days']:g}-day job ({mc['trials']} trials, seed {mc['seed']})"
    )


def all_figures(report: dict[str, Any]) -> dict[str, go.Figure]:
    """Every figure of the report, keyed by the id of its div."""
    sens = report["sensitivity"]
    return {
        "fig-breakdown": breakdown(report["performance"]),
        "fig-cost": cost_power(report["cost"]),
        "fig-heatmap": heatmap(report["traffic"]),
        "fig-kinds": traffic_kinds(report["traffic"]),
        "fig-k": sweep_hb_domain(sens),
        "fig-hb": sweep_bandwidth(sens, "hb_tbps", "HB bandwidth", "C_F per GPU (Tbps)"),
        "fig-nic": sweep_bandwidth(sens, "nic_gbps", "NIC bandwidth", "C_S per NIC (Gbps)"),
        "fig-batch": sweep_batch(sens),
        "fig-failures": failures(report["failures"]),
    }
