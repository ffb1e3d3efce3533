"""Network equipment cost and power from switch-port and transceiver counts.

Paper model (Rail-only, HOTI 2024 / arXiv 2307.12169 v5, §V-E, eqs. 4–5):
cost = price_port × switch ports + price_TR × transceivers and
power = power_port × switch ports + power_TR × transceivers, with $694 and $199, 18 W and 9 W at
400 Gbps (footnote 1). Prices live in YAML price books (``railplan/catalog/pricebooks``), one
entry per NIC speed, every number with its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from railplan.errors import RailplanError
from railplan.fileio import load_yaml, parse_yaml
from railplan.names import price_book_names
from railplan.network.topology import Cluster, NetworkCounts, rail_only, rail_optimized

if TYPE_CHECKING:
    from railplan.network.ocs import OcsLayer

DEFAULT_PRICE_BOOK = "rail-only-hoti2024"


def require_sources(entry: BaseModel, keys: tuple[str, ...]) -> None:
    """Raise ValueError (pydantic reports it) if one of the optional numbers `keys` of a price-book
    entry is given without its `<key>_source`."""
    for key in keys:
        if getattr(entry, key) is not None and not getattr(entry, key + "_source"):
            raise ValueError(f"{key} needs {key}_source (every number needs its source)")


class SpeedPrices(BaseModel):
    """Per-port and per-transceiver price (USD) and power (W) at one NIC speed: finite and
    not negative (inf/nan refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    switch_port_usd: float = Field(ge=0)
    switch_port_usd_source: str = Field(min_length=3)
    transceiver_usd: float = Field(ge=0)
    transceiver_usd_source: str = Field(min_length=3)
    switch_port_w: float | None = Field(default=None, ge=0)
    switch_port_w_source: str | None = None
    transceiver_w: float | None = Field(default=None, ge=0)
    transceiver_w_source: str | None = None

    @model_validator(mode="after")
    def _sources(self) -> Self:
        require_sources(self, ("switch_port_w", "transceiver_w"))
        if (self.switch_port_w is None) != (self.transceiver_w is None):
            raise ValueError("give both switch_port_w and transceiver_w, or neither")
        return self

    @property
    def has_power(self) -> bool:
        return self.switch_port_w is not None and self.transceiver_w is not None


class OcsPrices(BaseModel):
    """An optical circuit switch (OCS) model for the rail-only+ocs design: ports (an N×N OCS has
    N), fibers each NIC link takes on each side, price per port and power per unit. An OCS
    passes light, so it is the same at every NIC speed; every number needs its source (a price
    with no public figure says so in its source and how it was derived)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(min_length=1)
    ports: int = Field(ge=2, le=100_000)
    ports_source: str = Field(min_length=3)
    fibers_per_link: int = Field(ge=1, le=16)
    fibers_per_link_source: str = Field(min_length=3)
    port_usd: float = Field(ge=0)
    port_usd_source: str = Field(min_length=3)
    unit_w: float | None = Field(default=None, ge=0)
    unit_w_source: str | None = None
    insertion_loss_db: float | None = Field(default=None, ge=0, le=60)
    insertion_loss_db_source: str | None = None

    @model_validator(mode="after")
    def _sources(self) -> Self:
        require_sources(self, ("unit_w", "insertion_loss_db"))
        return self


class PriceBook(BaseModel):
    """A named set of prices per NIC speed (Gbps), and optionally an OCS model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    speeds: dict[int, SpeedPrices] = Field(min_length=1)
    ocs: OcsPrices | None = None

    def at(self, nic_gbps: int) -> SpeedPrices:
        """Prices at ``nic_gbps``; a RailplanError lists the speeds this book has."""
        if nic_gbps not in self.speeds:
            have = ", ".join(str(s) for s in sorted(self.speeds))
            raise RailplanError(
                "nic_gbps",
                f"price book {self.name!r} has no prices for {nic_gbps} Gbps; it has: {have}; "
                f"pass --price-book FILE with that speed or a shipped book that has it: "
                f"{', '.join(_books_with(nic_gbps)) or 'none'}",
            )
        return self.speeds[nic_gbps]


def builtin_price_books() -> list[str]:
    """Names of the price books shipped in railplan/catalog/pricebooks."""
    return price_book_names()


def _books_with(nic_gbps: int) -> list[str]:
    """The shipped price books with prices at ``nic_gbps``."""
    return [n for n in builtin_price_books() if nic_gbps in load_price_book(n).speeds]


def parse_price_book(data: Any, where: str) -> PriceBook:
    """Validate YAML data into a PriceBook; errors name the file and field in one line."""
    try:
        return PriceBook.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise RailplanError(f"price_book {where}: {loc}", first["msg"]) from None


def load_price_book(name_or_path: str | Path | None = None) -> PriceBook:
    """A shipped price book by name, or a YAML file by path (default: the paper's)."""
    ref = str(name_or_path) if name_or_path is not None else DEFAULT_PRICE_BOOK
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return parse_price_book(load_yaml(path, "price_book"), ref)
    names = builtin_price_books()
    if ref not in names:
        raise RailplanError(
            "price_book", f"unknown {ref!r}; give a YAML file or one of {', '.join(names)}"
        )
    text = (resources.files("railplan.catalog") / "pricebooks" / f"{ref}.yaml").read_text(
        encoding="utf-8"
    )
    data = parse_yaml(text, "price_book", ref)
    return parse_price_book(data, ref)


@dataclass(frozen=True)
class CostPower:
    """Cost (USD) and power (W; None if the price book has no power figures)."""

    switch_cost_usd: float
    transceiver_cost_usd: float
    cost_usd: float
    switch_power_w: float | None
    transceiver_power_w: float | None
    power_w: float | None


def cost_power(counts: NetworkCounts, book: PriceBook) -> CostPower:
    """Paper eqs. 4–5 applied to ``counts`` at its NIC speed."""
    p = book.at(counts.nic_gbps)
    sw_usd = p.switch_port_usd * counts.switch_ports
    tr_usd = p.transceiver_usd * counts.transceivers
    if p.switch_port_w is not None and p.transceiver_w is not None:
        sw_w: float | None = p.switch_port_w * counts.switch_ports
        tr_w: float | None = p.transceiver_w * counts.transceivers
        total_w: float | None = (sw_w or 0.0) + (tr_w or 0.0)
    else:
        sw_w = tr_w = total_w = None
    return CostPower(sw_usd, tr_usd, sw_usd + tr_usd, sw_w, tr_w, total_w)


def saving(base: float | None, new: float | None) -> float | None:
    """Fractional saving 1 - new/base (None when undefined)."""
    if base is None or new is None or base == 0:
        return None
    return 1.0 - new / base


@dataclass(frozen=True)
class Comparison:
    """Rail-optimized baseline vs rail-only on the same cluster and price book."""

    rail_optimized: NetworkCounts
    rail_only: NetworkCounts
    rail_optimized_cost: CostPower
    rail_only_cost: CostPower
    price_book: str
    ocs: OcsLayer | None = None
    """The rail-only+ocs design's OCS layer (None when the price book has no ``ocs`` entry)."""

    @property
    def rail_only_ocs_cost_usd(self) -> float | None:
        return None if self.ocs is None else self.rail_only_cost.cost_usd + self.ocs.cost_usd

    @property
    def rail_only_ocs_power_w(self) -> float | None:
        if self.ocs is None or self.ocs.power_w is None or self.rail_only_cost.power_w is None:
            return None
        return self.rail_only_cost.power_w + self.ocs.power_w

    @property
    def savings_cost(self) -> float | None:
        return saving(self.rail_optimized_cost.cost_usd, self.rail_only_cost.cost_usd)

    @property
    def savings_power(self) -> float | None:
        return saving(self.rail_optimized_cost.power_w, self.rail_only_cost.power_w)

    def to_dict(self) -> dict[str, Any]:
        def one(c: NetworkCounts, cp: CostPower) -> dict[str, Any]:
            return {
                "switches": c.switches,
                "transceivers": c.transceivers,
                "switch_ports": c.switch_ports,
                "switch_ports_used": c.switch_ports_used,
                "links": c.links,
                "tiers": c.tiers,
                "fabrics": c.fabrics,
                "switches_per_tier": list(c.switches_per_tier),
                "tier_detail": c.tier_detail(),
                "cost_usd": cp.cost_usd,
                "switch_cost_usd": cp.switch_cost_usd,
                "transceiver_cost_usd": cp.transceiver_cost_usd,
                "power_w": cp.power_w,
                "switch_power_w": cp.switch_power_w,
                "transceiver_power_w": cp.transceiver_power_w,
            }

        c = self.rail_optimized
        return {
            "inputs": {
                "gpus": c.gpus,
                "hb_domain": c.hb_domain,
                "radix": c.radix,
                "nic_gbps": c.nic_gbps,
                "nics_per_gpu": c.nics_per_gpu,
                "price_book": self.price_book,
            },
            "rail_optimized": one(self.rail_optimized, self.rail_optimized_cost),
            "rail_only": one(self.rail_only, self.rail_only_cost),
            "savings": {"cost": self.savings_cost, "power": self.savings_power},
            "rail_only_ocs": self._ocs_dict(),
        }

    def _ocs_dict(self) -> dict[str, Any] | None:
        """Rail-only plus its OCS layer: same switches and transceivers (an OCS passes light)."""
        if self.ocs is None:
            return None
        base, only = self.rail_optimized_cost, self.rail_only_cost
        cost, power = self.rail_only_ocs_cost_usd, self.rail_only_ocs_power_w
        c = self.rail_only
        return {
            "tiers": c.tiers,
            "switches": c.switches,
            "switch_ports": c.switch_ports,
            "links": c.links,
            "transceivers": c.transceivers,
            "ocs": self.ocs.to_dict(),
            "ocs_units": self.ocs.units,
            "ocs_ports": self.ocs.ports_installed,
            "ocs_cost_usd": self.ocs.cost_usd,
            "ocs_power_w": self.ocs.power_w,
            "spare_gpus": self.ocs.spare_gpus,
            "cost_usd": cost,
            "power_w": power,
            "savings": {"cost": saving(base.cost_usd, cost), "power": saving(base.power_w, power)},
            "ocs_share": {
                "cost": None if not cost else self.ocs.cost_usd / cost,
                "power": (
                    None if not power or self.ocs.power_w is None else self.ocs.power_w / power
                ),
            },
            "over_rail_only": {
                "cost": None if not only.cost_usd else self.ocs.cost_usd / only.cost_usd,
                "power": (
                    None
                    if not only.power_w or self.ocs.power_w is None
                    else self.ocs.power_w / only.power_w
                ),
            },
        }


def compare(
    c: Cluster, book: PriceBook | None = None, spare_per_domain: int | None = None
) -> Comparison:
    """Counts, cost and power of both designs (the paper's Table II row for these inputs), and of
    rail-only+ocs when the price book has an OCS model (``spare_per_domain`` idle GPUs per swap
    set are counted beside it; None: one, or none where a swap set is a single GPU)."""
    book = book or load_price_book()
    book.at(c.nic_gbps)
    base, prop = rail_optimized(c), rail_only(c)
    layer = None
    if book.ocs is not None:
        from railplan.network.ocs import ocs_applies, ocs_layer

        if ocs_applies(prop):
            layer = ocs_layer(prop, book.ocs, spare_per_domain)
    return Comparison(base, prop, cost_power(base, book), cost_power(prop, book), book.name, layer)
