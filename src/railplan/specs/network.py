"""Network spec: which NIC-domain architecture joins the HB domains."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import model_validator

from railplan.names import ARCHITECTURES
from railplan.specs.base import Range, Spec

__all__ = ["ARCHITECTURES", "OVERSUBSCRIPTION", "Architecture", "Network"]

Architecture = Literal["rail-optimized", "rail-only", "ideal", "oversubscribed"]
#: down:up bandwidth ratio above the leaves (1 = full bisection)
OVERSUBSCRIPTION = Range(1.0, 100.0, hint="down:up ratio, 1 = full bisection")


class Network(Spec):
    """rail-optimized: full-bisection any-to-any Clos; rail-only: one Clos per rail, cross-rail
    traffic forwarded through the HB domain; ideal: all GPUs in one HB domain; oversubscribed:
    rail-optimized with `oversubscription`:1 less bandwidth above the leaves."""

    architecture: Architecture = "rail-optimized"
    oversubscription: Annotated[float, OVERSUBSCRIPTION] = 1.0
    #: the rail switches aggregate all-reduces in the network (InfiniBand SHARP)
    sharp: bool = False

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.architecture != "oversubscribed" and self.oversubscription != 1.0:
            raise ValueError("oversubscription applies only to architecture 'oversubscribed'")
        return self

    @property
    def nic_bandwidth_factor(self) -> float:
        """Share of the NIC line rate left for traffic between HB domains."""
        return 1.0 / self.oversubscription
