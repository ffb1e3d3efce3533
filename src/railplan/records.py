"""Result records: the frozen dataclasses whose JSON form (`to_dict`, what `--json` prints) is
their fields in order, nested dataclasses as dicts."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class Record:
    """Base of a result dataclass whose `to_dict` is `dataclasses.asdict` of it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(cast("DataclassInstance", self))
