"""Shared base for the spec models: immutable, unknown keys rejected, one-line errors."""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic

from railplan.errors import RailplanError

T = TypeVar("T", bound="Spec")


class Spec(pydantic.BaseModel):
    """Immutable value object; unknown keys are an error (typos must not pass silently)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def parse(cls: type[T], data: Any, where: str = "") -> T:
        """Validate `data`, turning pydantic's error into a one-line RailplanError."""
        try:
            return cls.model_validate(data)
        except pydantic.ValidationError as err:
            raise from_validation_error(err, where or cls.__name__.lower()) from None


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
