"""A training job before its strategy is chosen: the model, the system and network it runs on,
its GPU count and global batch."""

from __future__ import annotations

from dataclasses import dataclass

from railplan.limits import as_int
from railplan.specs.catalog import load_model, load_network, load_system
from railplan.specs.hardware import System
from railplan.specs.model import Model
from railplan.specs.network import Network


@dataclass(frozen=True)
class Job:
    """The (model, system, network, gpus, global_batch) the strategy search, the report and the
    paper reproductions pass together. The model and system may be given as catalog names,
    YAML paths or mappings and the network as an architecture name (loaded here, a one-line
    RailplanError if wrong); integers of any type become Python ints. Its numbers are checked
    where they are used (`railplan.explore.search.search` refuses a non-positive or too large
    count)."""

    model: Model
    system: System
    network: Network
    gpus: int
    global_batch: int

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen
        set_(self, "model", load_model(self.model))
        set_(self, "system", load_system(self.system))
        set_(self, "network", load_network(self.network))
        for name in ("gpus", "global_batch"):
            n = as_int(getattr(self, name))
            if n is not None:
                set_(self, name, n)
