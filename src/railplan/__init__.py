"""railplan: Rail-only networks for LLM-training GPU clusters.

Top-level API: specs, loaders and the scalar `estimate`; the vectorized model lives in
`railplan.iteration` and `railplan.strategies`.
"""

from __future__ import annotations

from railplan.errors import RailplanError
from railplan.estimate import Estimate, estimate
from railplan.specs import (
    GPU,
    Model,
    Network,
    Strategy,
    System,
    load_gpu,
    load_model,
    load_system,
)

__version__ = "0.1.0"

__all__ = [
    "GPU",
    "Estimate",
    "Model",
    "Network",
    "RailplanError",
    "Strategy",
    "System",
    "estimate",
    "load_gpu",
    "load_model",
    "load_system",
]
