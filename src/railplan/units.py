"""Human-readable quantities, one rule for the CLI and the HTML report."""

from __future__ import annotations


def gbps_to_bytes_per_s(gbps: float) -> float:
    """A line rate in Gbit/s as bytes/s (decimal giga, 8 bits a byte)."""
    return gbps * 1e9 / 8


def bytes_per_s_to_gbps(bytes_per_s: float) -> float:
    """The inverse of `gbps_to_bytes_per_s`."""
    return bytes_per_s * 8 / 1e9


def fmt_bytes(x: float) -> str:
    """Bytes in the largest decimal unit that keeps the value ≥ 1 (2.31 PB, 40.59 TB, 12 B)."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} B"


# Below these, millions of dollars and megawatts would print as 0.0 or a fraction: thousands
# and kilowatts instead.
SMALL_USD = 100_000.0
SMALL_W = 1_000_000.0


def fmt_usd(x: float, like: float | None = None) -> str:
    """Dollars in millions ($12.3M; $0.16M below $1M), or thousands below $100k ($47.6k); $0
    for nothing. `like`:
    the value whose size picks the unit (a row's largest, so a row keeps one unit)."""
    if x == 0:
        return "$0"
    size = abs(x if like is None else like)
    if size < SMALL_USD:
        return f"${x / 1e3:,.1f}k"
    return f"${x / 1e6:,.2f}M" if size < 1e6 else f"${x / 1e6:,.1f}M"


def fmt_kw(x: float) -> str:
    """Watts in kilowatts (1.3 kW); 0 kW for nothing."""
    return "0 kW" if x == 0 else f"{x / 1e3:,.1f} kW"


def fmt_watts(x: float, like: float | None = None) -> str:
    """Watts in megawatts (1.25 MW), or kilowatts below 1 MW (350.0 kW); `like` as for
    `fmt_usd`."""
    size = abs(x if like is None else like)
    return fmt_kw(x) if size < SMALL_W else f"{x / 1e6:,.2f} MW"
