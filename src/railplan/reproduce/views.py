"""How the evaluation reproductions look: the human tables and the matplotlib figures of Figs
7-10 and the NIC-count experiment, each drawn from a report's points alone (`evaluation.run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from railplan.errors import RailplanError
from railplan.figures import subplots
from railplan.fileio import atomic_write, check_target
from railplan.specs.strategy import strategy_label

PLOT_FORMATS = ("png", "svg", "pdf")


def _s(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def _unique(points: list[dict[str, Any]], key: str) -> list[Any]:
    """The values of `key` over the points, in first-seen order."""
    return list(dict.fromkeys(p[key] for p in points))


def fig7_table(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": "Fig 7: HFU, measured (Korthikanti 2022) vs ours",
        "columns": ["model", "GPUs", "measured HFU", "our HFU", "error %"],
        "rows": [
            [
                p["model"],
                str(p["gpus"]),
                f"{p['measured_hfu']:.1%}",
                f"{p['predicted_hfu']:.1%}",
                f"{p['error_pct']:+.1f}",
            ]
            for p in report["points"]
        ],
    }


SEARCH_COLUMNS = {
    "fig8": ["model", "gpus", "hb_domain", "network"],
    "fig9": ["hb_domain", "hb_tbps", "nic_gbps"],
    "fig10": ["batch", "hb_domain", "network"],
}


def search_table(report: dict[str, Any]) -> dict[str, Any]:
    """Figs 8-10: the best strategy at every point."""
    fig = report["figure"]
    cols = SEARCH_COLUMNS[fig]
    extra = ["relative_to_ideal"] if fig == "fig10" else []
    return {
        "title": f"{fig}: best strategy per point (ours)",
        "columns": [*cols, "iteration s", "MFU", *extra, "strategy", "largest overhead"],
        "rows": [
            [
                *(str(p[c]) for c in cols),
                _s(p["iteration_s"]),
                _s(p["mfu"], ".1%"),
                *(_s(p[e], ".1%") for e in extra),
                strategy_label(p["strategy"], "none fits"),
                str(p.get("largest_overhead", "")),
            ]
            for p in report["points"]
        ],
    }


def nic_count_table(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": "SK Telecom's TITAN talk: GPT-175B, NICs per DGX A100 node "
        "(relative iteration time)",
        "columns": [
            "NICs/node",
            "measured ms",
            "measured",
            "ours (fixed strategy)",
            "ours (searched)",
            "searched strategy",
        ],
        "rows": [
            [
                str(p["nics_per_node"]),
                f"{p['measured_ms']:.0f}",
                f"{p['measured_relative']:.2f}",
                f"{p['fixed_strategy_relative']:.2f}",
                f"{p['searched_relative']:.2f}",
                strategy_label(p["searched_strategy"], "none fits"),
            ]
            for p in report["points"]
        ],
    }


def comparison_table(report: dict[str, Any]) -> dict[str, Any]:
    """Paper vs ours, claim by claim."""
    return {
        "title": f"{report['figure']}: paper vs ours",
        "columns": ["claim", "paper", "ours", "ours − paper"],
        "rows": [
            [
                c["claim"],
                _s(c["paper"], ".1f"),
                _s(c["ours"], ".1f"),
                _s(c["diff_points"], "+.1f"),
            ]
            for c in report["comparisons"]
        ],
    }


def fig7_draw(pts: list[dict[str, Any]]) -> Any:
    fig, ax = subplots(figsize=(6, 3.5))
    labels = [f"({p['model'][4:]}, {p['gpus']})" for p in pts]
    xs = range(len(pts))
    ax.bar(
        [x - 0.2 for x in xs],
        [100 * p["measured_hfu"] for p in pts],
        0.4,
        label="measured (Korthikanti 2022)",
    )
    ax.bar([x + 0.2 for x in xs], [100 * p["predicted_hfu"] for p in pts], 0.4, label="railplan")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("HFU (%)")
    return fig


def fig8_draw(pts: list[dict[str, Any]]) -> Any:
    models = _unique(pts, "model")
    fig, axes = subplots(1, len(models), figsize=(10, 3.8))
    for ax, name in zip(axes, models, strict=True):
        for n in _unique([p for p in pts if p["model"] == name], "gpus"):
            own = [p for p in pts if p["model"] == name and p["gpus"] == n]
            ro = [p for p in own if p["network"] == "rail-only"]
            line = ax.plot(
                [p["hb_domain"] for p in ro],
                [p["iteration_s"] for p in ro],
                "o-",
                label=f"rail-only N={n}",
            )
            ideal = next(p for p in own if p["network"] == "ideal")
            ax.axhline(
                ideal["iteration_s"], ls="--", color=line[0].get_color(), label=f"ideal N={n}"
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("HB domain size K")
        ax.set_ylabel("iteration time (s)")
        ax.set_title(name)
    return fig


def fig9_draw(pts: list[dict[str, Any]]) -> Any:
    ks = _unique(pts, "hb_domain")
    fig, axes = subplots(1, len(ks), figsize=(10, 3.8))
    for ax, k in zip(axes, ks, strict=True):
        for hb in _unique(pts, "hb_tbps"):
            sel = [p for p in pts if p["hb_domain"] == k and p["hb_tbps"] == hb]
            ax.plot(
                [p["nic_gbps"] for p in sel],
                [p["iteration_s"] for p in sel],
                "o-",
                label=f"{hb} Tbps HBD",
            )
        ax.set_xlabel("network bandwidth (Gbps)")
        ax.set_ylabel("iteration time (s)")
        ax.set_title(f"K = {k}")
    return fig


def fig10_draw(pts: list[dict[str, Any]]) -> Any:
    fig, axes = subplots(1, 2, figsize=(10, 3.8))
    for k in _unique(pts, "hb_domain"):
        sel = [p for p in pts if p["hb_domain"] == k]
        lab = f"ideal (K={k})" if sel[0]["network"] == "ideal" else f"K={k}"
        axes[0].plot([p["batch"] for p in sel], [p["iteration_s"] for p in sel], "o-", label=lab)
        axes[1].plot(
            [p["batch"] for p in sel], [p["relative_to_ideal"] for p in sel], "o-", label=lab
        )
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("global batch")
    axes[0].set_ylabel("iteration time (s)")
    axes[1].set_ylabel("relative performance to ideal")
    return fig


def nic_count_draw(pts: list[dict[str, Any]]) -> Any:
    fig, ax = subplots(figsize=(5, 3.5))
    nics = [p["nics_per_node"] for p in pts]
    ax.plot(
        nics, [p["measured_relative"] for p in pts], "o-", label="measured (SK Telecom TITAN talk)"
    )
    ax.plot(
        nics, [p["fixed_strategy_relative"] for p in pts], "s-", label="railplan, fixed strategy"
    )
    ax.plot(nics, [p["searched_relative"] for p in pts], "^-", label="railplan, searched")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("NICs per node")
    ax.set_ylabel("relative iteration time")
    return fig


def check_plot_path(path: Path) -> str:
    """The image format of `path` (its suffix), checked before any work is done: a one-line
    error for another suffix or a missing directory."""
    fmt = Path(path).suffix[1:].lower()
    if fmt not in PLOT_FORMATS:
        raise RailplanError("plot", f"{Path(path).name!r}: use a .png, .svg or .pdf file name")
    check_target(Path(path), "plot")
    return fmt


def save(draw: Any, pts: list[dict[str, Any]], path: Path) -> None:
    """Draw with matplotlib (a figure of its own, `railplan.figures`) and write all or nothing
    to `path` (.png, .svg or .pdf)."""
    fmt = check_plot_path(path)
    fig = draw(pts)
    for ax in fig.axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic_write(Path(path), lambda tmp: fig.savefig(tmp, format=fmt), field="plot")
