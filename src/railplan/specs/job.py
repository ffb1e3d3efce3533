"""A training job before its strategy is chosen: the model, the system and network it runs on,
its GPU count and global batch."""

from __future__ import annotations

from dataclasses import dataclass

from railplan.specs.hardware import System
from railplan.specs.model import Model
from railplan.specs.network import Network


@dataclass(frozen=True)
class Job:
    """The (model, system, network, gpus, global_batch) the strategy search, the report and the
    paper reproductions pass together. Its numbers are checked where they are used
    (`railplan.explore.search.search` refuses a non-positive or too large count)."""

    model: Model
    system: System
    network: Network
    gpus: int
    global_batch: int
