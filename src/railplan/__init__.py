"""railplan: Rail-only networks for LLM-training GPU clusters.

Top-level API: specs, loaders and the scalar `estimate`; the vectorized model lives in
`railplan.perf.iteration` and `railplan.specs.arrays`. The names load on first use (PEP 562), so
`import railplan.cli` does not pay for numpy and pydantic before a command needs them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from railplan.errors import RailplanError

if TYPE_CHECKING:
    from railplan.perf.estimate import Estimate, estimate
    from railplan.specs import (
        GPU,
        Model,
        Network,
        Strategy,
        System,
        load_gpu,
        load_model,
        load_network,
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
    "load_network",
    "load_system",
]

_HOMES = {
    "Estimate": "railplan.perf.estimate",
    "estimate": "railplan.perf.estimate",
} | dict.fromkeys(
    (
        "GPU",
        "Model",
        "Network",
        "Strategy",
        "System",
        "load_gpu",
        "load_model",
        "load_network",
        "load_system",
    ),
    "railplan.specs",
)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'railplan' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The lazy names too, so that tab completion lists them before their first use."""
    return sorted(set(globals()) | set(__all__))
