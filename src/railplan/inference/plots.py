"""The throughput-latency curve of a rate sweep (PNG or SVG)."""

from __future__ import annotations

from pathlib import Path

from railplan.figures import subplots
from railplan.inference.serving import ServingResult
from railplan.traffic.plots import FIGURE_SUFFIXES, _save, check_suffix


def rate_sweep_plot(results: list[ServingResult], path: str | Path, title: str) -> Path:
    """TTFT and TPOT (mean and p99), and the inter-token latency's p99 beside TPOT, against
    delivered output tokens/s per GPU."""
    p = check_suffix(path, FIGURE_SUFFIXES, "plot")
    fig, (a1, a2) = subplots(1, 2, figsize=(10, 4))
    x = [r.tokens_per_s_per_gpu for r in results]
    for ax, key, label in ((a1, "ttft", "TTFT"), (a2, "tpot", "TPOT")):
        ax.plot(x, [getattr(r, f"{key}_mean_s") for r in results], "o-", label="mean")
        ax.plot(x, [getattr(r, f"{key}_p99_s") for r in results], "s--", label="p99")
        if key == "tpot":
            ax.plot(x, [r.itl_p99_s for r in results], "^:", label="inter-token p99")
        ax.set_xlabel("output tokens/s per GPU")
        ax.set_ylabel(f"{label} (s)" if key == "ttft" else "TPOT, inter-token latency (s)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, p, "plot")
