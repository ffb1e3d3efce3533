"""Shared base for the spec models: immutable, unknown keys rejected, one-line errors."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
from pydantic_core import core_schema

from railplan.errors import RailplanError

T = TypeVar("T", bound="Spec")


if TYPE_CHECKING:  # (pydantic's metaclass by name, for the type checker only)
    from pydantic._internal._model_construction import ModelMetaclass as _ModelMeta
else:
    _ModelMeta = type(pydantic.BaseModel)


class _SpecMeta(_ModelMeta):
    """Calling a spec class (`Strategy(tp=0)`) fails as `Spec.parse` does: a one-line
    RailplanError naming the field ("strategy.tp: Input should be greater than 0"), not
    pydantic's multi-line report. (On the metaclass, not `__init__`: pydantic validates
    through a model's own `__init__`, nested specs and `parse` included, so an error raised
    there would come back wrapped in the parent's report.)"""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except pydantic.ValidationError as err:
            raise from_validation_error(err, cls.__name__.lower()) from None


class Spec(pydantic.BaseModel, metaclass=_SpecMeta):
    """Immutable value object; unknown keys are an error (typos must not pass silently)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def parse(cls: type[T], data: Any, where: str = "") -> T:
        """Validate `data`, turning pydantic's error into a one-line RailplanError."""
        try:
            return cls.model_validate(data)
        except pydantic.ValidationError as err:
            raise from_validation_error(err, where or cls.__name__.lower()) from None


@dataclass(frozen=True)
class Range:
    """A finite number in [low, high] (or [low, high) with ``high_open``), with its unit.

    Used as pydantic metadata (``Annotated[float, Range(0.01, 1)]``) and by ``check`` for plain
    arguments; both reject nan/inf and values outside the range with the same one-line text.
    """

    low: float
    high: float
    unit: str = ""
    hint: str = ""
    high_open: bool = False

    def problem(self, value: float) -> str | None:
        """None if ``value`` is allowed, else what is wrong with it."""
        below_high = value < self.high if self.high_open else value <= self.high
        if math.isfinite(value) and self.low <= value and below_high:
            return None
        close = ")" if self.high_open else "]"
        unit = f" {self.unit}" if self.unit else ""
        hint = f" ({self.hint})" if self.hint else ""
        allowed = f"[{self.low:g}, {self.high:g}{close}{unit}{hint}"
        return f"must be a finite number in {allowed}; got {value!r}"

    def check(self, field: str, value: float) -> float:
        """``value`` as a float, or a RailplanError naming ``field`` and the range."""
        problem = self.problem(float(value))
        if problem:
            raise RailplanError(field, problem)
        return float(value)

    def _validate(self, value: float) -> float:
        problem = self.problem(value)
        if problem:
            raise ValueError(problem)
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: pydantic.GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._validate, handler(source))


#: a message or buffer size: 1 byte to 1 PB
BYTES = Range(1.0, 1e15, "bytes")


def from_validation_error(err: pydantic.ValidationError, where: str) -> RailplanError:
    """The first problem of a pydantic error as a one-line RailplanError naming the field."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    field = f"{where}.{loc}" if loc else where
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        allowed = ", ".join(sorted(_field_names(err)))
        msg = f"unknown key; allowed keys: {allowed}" if allowed else "unknown key"
    return RailplanError(field, msg)


def _field_names(err: pydantic.ValidationError) -> list[str]:
    model = err.title
    for cls in _all_specs():
        if cls.__name__ == model:
            return list(cls.model_fields)
    return []


def _all_specs() -> list[type[Spec]]:
    out: list[type[Spec]] = []
    todo: list[type[Spec]] = [Spec]
    while todo:
        c = todo.pop()
        for sub in c.__subclasses__():
            out.append(sub)
            todo.append(sub)
    return out
