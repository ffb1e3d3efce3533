"""The Rail-only paper's published cost numbers, stored as data with their sources, and the
side-by-side reproduction of its Table II.

Two versions of the table exist:

* HotNets'23 text (``shared/reference/papers/rail-only-hotnets23.txt``, §4, "Table 2: Number of
  switches for different clusters"): K = 256, 400 Gbps, switch and transceiver counts for seven
  (N, radix) cells and the cost reduction at $748/port, $374/transceiver. Its percentages are
  truncated to whole percent (32,768 GPUs radix 32 prints 54 % for 54.5 %; radix 64 prints 37 % for
  37.5 %).
* HOTI 2024 / arXiv 2307.12169 v5 (§V-E, Table II) adds power and the N = 65,536 radix-32 cell,
  at $694/port, $199/transceiver, 18 W/port, 9 W/transceiver. Its full table is not in our
  reference folder; the cells we hold come from SYSTEM.md claim 8, the task brief and the paper's
  text (savings 38–77 % cost, $117M–$234M; 37–75 % power, 1.7–6.9 MW).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from railplan.network.cost import PriceBook, compare, load_price_book
from railplan.network.topology import Cluster

HB_DOMAIN = 256
NIC_GBPS = 400
CELLS: tuple[tuple[int, int], ...] = tuple(
    (n, r) for n in (32768, 65536) for r in (32, 64, 128, 256)
)

HOTNETS23_SOURCE = (
    "Rail-only HotNets'23 text, §4 Table 2 (shared/reference/papers/rail-only-hotnets23.txt)"
)
HOTI24_SOURCE = (
    "Rail-only HOTI 2024 / arXiv 2307.12169 v5 §V-E Table II, cells as quoted in SYSTEM.md "
    "claim 8 and the issue-4 brief"
)


@dataclass(frozen=True)
class PaperRow:
    """One published Table II row; None where that version of the paper has no value."""

    gpus: int
    radix: int
    sota_switches: int | None
    rail_only_switches: int | None
    sota_transceivers: int | None
    rail_only_transceivers: int | None
    cost_reduction_pct: float | None
    power_reduction_pct: float | None
    sota_cost_musd: float | None
    rail_only_cost_musd: float | None
    source: str


# HotNets'23 Table 2, every cell as printed (the 65,536 × radix 32 row is absent there).
HOTNETS23_TABLE2: tuple[PaperRow, ...] = (
    PaperRow(32768, 32, 7168, 3072, 262144, 131072, 54, None, None, None, HOTNETS23_SOURCE),
    PaperRow(32768, 64, 2560, 1536, 196608, 131072, 37, None, None, None, HOTNETS23_SOURCE),
    PaperRow(32768, 128, 1280, 256, 196608, 65536, 75, None, None, None, HOTNETS23_SOURCE),
    PaperRow(32768, 256, 384, 128, 131072, 65536, 60, None, None, None, HOTNETS23_SOURCE),
    PaperRow(65536, 64, 5120, 3072, 393216, 262144, 37, None, None, None, HOTNETS23_SOURCE),
    PaperRow(65536, 128, 2560, 1536, 393216, 262144, 37, None, None, None, HOTNETS23_SOURCE),
    PaperRow(65536, 256, 1280, 256, 393216, 131072, 75, None, None, None, HOTNETS23_SOURCE),
)

# HOTI 2024 Table II cells we hold (SYSTEM.md claim 8; brief of issue 4).
HOTI24_TABLE2: tuple[PaperRow, ...] = (
    PaperRow(32768, 64, 2560, 1536, 196608, 131072, 38.3, 37.5, 152.8, 94.3, HOTI24_SOURCE),
    PaperRow(32768, 128, 1280, 256, None, None, 76.6, 75.0, None, None, HOTI24_SOURCE),
)

# HOTI 2024 text ranges over the whole table (abstract and §V-E).
HOTI24_RANGES: dict[str, tuple[float, float]] = {
    "cost_reduction_pct": (38.0, 77.0),
    "cost_saving_musd": (117.0, 234.0),
    "power_reduction_pct": (37.0, 75.0),
    "power_saving_mw": (1.7, 6.9),
}


def _paper_row(table: tuple[PaperRow, ...], gpus: int, radix: int) -> PaperRow | None:
    return next((r for r in table if r.gpus == gpus and r.radix == radix), None)


@dataclass(frozen=True)
class Table2Row:
    """Our values for one (N, radix) cell beside the paper's."""

    gpus: int
    radix: int
    ours: dict[str, Any]
    hotnets23: PaperRow | None
    hoti24: PaperRow | None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "gpus": self.gpus,
            "radix": self.radix,
            "ours": self.ours,
            "paper_hotnets23": asdict(self.hotnets23) if self.hotnets23 else None,
            "paper_hoti24": asdict(self.hoti24) if self.hoti24 else None,
        }


def reproduce_table2(
    book: PriceBook | None = None, hotnets_book: PriceBook | None = None
) -> list[Table2Row]:
    """Table II (N = 32,768 and 65,536 × radix 32/64/128/256, K = 256, one 400 Gbps NIC)."""
    book = book or load_price_book("rail-only-hoti2024")
    hotnets_book = hotnets_book or load_price_book("rail-only-hotnets23")
    rows: list[Table2Row] = []
    for gpus, radix in CELLS:
        cluster = Cluster(gpus, HB_DOMAIN, radix, NIC_GBPS)
        c, old = compare(cluster, book), compare(cluster, hotnets_book)
        power_saving_w = None
        if c.rail_optimized_cost.power_w is not None and c.rail_only_cost.power_w is not None:
            power_saving_w = c.rail_optimized_cost.power_w - c.rail_only_cost.power_w
        ours = {
            "sota_tiers": c.rail_optimized.tiers,
            "rail_only_tiers": c.rail_only.tiers,
            "sota_switches": c.rail_optimized.switches,
            "rail_only_switches": c.rail_only.switches,
            "sota_transceivers": c.rail_optimized.transceivers,
            "rail_only_transceivers": c.rail_only.transceivers,
            "sota_cost_usd": c.rail_optimized_cost.cost_usd,
            "rail_only_cost_usd": c.rail_only_cost.cost_usd,
            "cost_saving_usd": c.rail_optimized_cost.cost_usd - c.rail_only_cost.cost_usd,
            "sota_power_w": c.rail_optimized_cost.power_w,
            "rail_only_power_w": c.rail_only_cost.power_w,
            "power_saving_w": power_saving_w,
            "savings_cost": c.savings_cost,
            "savings_power": c.savings_power,
            "savings_cost_hotnets23_prices": old.savings_cost,
        }
        rows.append(
            Table2Row(
                gpus,
                radix,
                ours,
                _paper_row(HOTNETS23_TABLE2, gpus, radix),
                _paper_row(HOTI24_TABLE2, gpus, radix),
            )
        )
    return rows
