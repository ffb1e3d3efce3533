"""Every float field of the specs is a finite number in a stated range: nan, inf and absurd
values are one-line errors naming the field and the range; the catalog stays valid."""

from __future__ import annotations

from typing import Any

import pytest

from railplan.errors import RailplanError
from railplan.specs import GPU, Model, Network, Strategy, System, load_model, load_system, names
from railplan.specs.base import Range, Spec

BAD = [float("nan"), float("inf"), float("-inf"), 1e308, -1.0]


def _valid(cls: type[Spec]) -> dict[str, Any]:
    """A valid mapping for each spec, from the catalog (the GPU without its attention curves,
    which must stay below its peak: a cross-field check the ranges here do not test)."""
    system = load_system("dgx-h100")
    return {
        GPU: system.gpu.model_dump(exclude={"attention_curves"}),
        System: system.model_dump(),
        Model: load_model("moe-1.3b").model_dump(),
        Network: {"architecture": "oversubscribed", "oversubscription": 2.0},
        Strategy: {"global_batch": 8},
    }[cls]


def _float_fields(cls: type[Spec]) -> list[tuple[str, Range]]:
    out = []
    for name, info in cls.model_fields.items():
        if info.annotation is float:
            ranges = [m for m in info.metadata if isinstance(m, Range)]
            assert ranges, f"{cls.__name__}.{name} is a float without a Range"
            out.append((name, ranges[0]))
    return out


CASES = [
    (cls, name, rng, value)
    for cls in (GPU, System, Model, Network, Strategy)
    for name, rng in _float_fields(cls)
    for value in [*BAD, rng.low - 1e-9, rng.low / 2 if rng.low > 0 else rng.high * 2]
]


@pytest.mark.parametrize(("cls", "name", "rng", "value"), CASES)
def test_float_fields_reject_nan_inf_and_out_of_range(
    cls: type[Spec], name: str, rng: Range, value: float
) -> None:
    data = _valid(cls) | {name: value}
    with pytest.raises(RailplanError) as err:
        cls.parse(data, "spec")
    msg = str(err.value)
    assert msg.startswith(f"spec.{name}: must be a finite number in [{rng.low:g}, {rng.high:g}")
    assert "\n" not in msg


@pytest.mark.parametrize(("cls", "name", "rng"), [c[:3] for c in CASES[:: len(BAD) + 2]])
def test_float_fields_accept_their_bounds(cls: type[Spec], name: str, rng: Range) -> None:
    high = rng.high * (1 - 1e-9) if rng.high_open else rng.high
    for value in (rng.low, high):
        assert getattr(cls.parse(_valid(cls) | {name: value}, "spec"), name) == value


def test_nics_per_gpu_range_is_documented_in_the_error() -> None:
    base = load_system("dgx-a100").model_dump()
    for ok in (0.125, 0.25, 1.0, 2.0, 16.0):
        assert System.parse(base | {"nics_per_gpu": ok}).nics_per_gpu == ok
    with pytest.raises(RailplanError, match=r"nics_per_gpu: .*\[0\.125, 16\].*one NIC per 8 GPUs"):
        System.parse(base | {"nics_per_gpu": 0.001})
    with pytest.raises(RailplanError, match="nics_per_gpu"):
        System.parse(base | {"nics_per_gpu": 17})


def test_catalog_is_within_the_ranges() -> None:
    for name in names("systems"):
        load_system(name)
    for name in names("models"):
        load_model(name)
