"""railplan: Rail-only networks for LLM-training GPU clusters.

Top-level API: specs, loaders and the scalar `estimate`; the vectorized model lives in
`railplan.iteration` and `railplan.strategies`. The names load on first use (PEP 562), so
`import railplan.cli` does not pay for numpy and pydantic before a command needs them.
"""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

from railplan.errors import RailplanError

if TYPE_CHECKING:
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

_HOMES = {"Estimate": "railplan.estimate", "estimate": "railplan.estimate"} | dict.fromkeys(
    ("GPU", "Model", "Network", "Strategy", "System", "load_gpu", "load_model", "load_system"),
    "railplan.specs",
)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'railplan' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


class _Package(ModuleType):
    """The submodule `railplan.estimate` shares its name with the function: importing the module
    sets the package attribute, which must stay the function (as `from railplan import estimate`
    always gave)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "estimate" and isinstance(value, ModuleType):
            value = value.estimate
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
