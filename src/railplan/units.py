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
