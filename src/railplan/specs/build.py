"""Specs with overrides: the one place the CLI, the sweep and the report build a system, a
network or a strategy from names and flag values (each validated again, errors in one line)."""

from __future__ import annotations

from typing import Any

from railplan.errors import RailplanError
from railplan.names import ARCHITECTURES
from railplan.specs.catalog import load_network
from railplan.specs.hardware import System
from railplan.specs.network import Network
from railplan.specs.strategy import CODED_FIELDS, Strategy


def choice(field: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` if it is one of `allowed`, else a one-line error naming the field."""
    if value not in allowed:
        raise RailplanError(field, f"{value!r} is not allowed; choose one of {', '.join(allowed)}")
    return value


def build_system(
    system: str,
    hb_domain: int | None,
    hb_tbps: float | None,
    nic_gbps: float | None,
    nics_per_gpu: float | None,
    gpu_memory_gib: float | None = None,
    nvls: bool | None = None,
) -> System:
    """The catalog system with the command line's overrides applied (validated again)."""
    from railplan.specs.catalog import load_system

    base = load_system(system)
    if gpu_memory_gib is not None:
        gpu = base.gpu.model_dump() | {"memory_gib": gpu_memory_gib}
        base = System.parse(base.model_dump() | {"gpu": gpu}, "system")
    over = {
        k: v
        for k, v in {
            "hb_domain": hb_domain,
            "hb_tbps": hb_tbps,
            "nic_gbps": nic_gbps,
            "nics_per_gpu": nics_per_gpu,
            "nvls": nvls,
        }.items()
        if v is not None
    }
    if not over:
        return base
    data = base.model_dump() | over
    return System.parse(data, "system")


def build_network(
    network: str, oversubscription: float | None, sharp: bool | None = None
) -> Network:
    """The network spec `network` names (with its oversubscription, and SHARP in the rail
    switches when `sharp`)."""
    arch = choice("network", network, ARCHITECTURES)
    data: dict[str, Any] = {"architecture": arch}
    if oversubscription is not None:
        data["oversubscription"] = oversubscription
    if sharp is not None:
        data["sharp"] = sharp
    return load_network(data)


def build_strategy(**kwargs: Any) -> Strategy:
    from railplan.specs.base import from_validation_error

    for field, codes in CODED_FIELDS.items():
        if field in kwargs:
            choice(field, kwargs[field], tuple(codes))
    try:
        return Strategy.model_validate(kwargs)
    except Exception as err:
        import pydantic

        if isinstance(err, pydantic.ValidationError):
            raise from_validation_error(err, "strategy") from None
        raise


#: the system and network options of `railplan estimate`, in the order a command gives them
HARDWARE_OPTIONS = (
    "network",
    "oversubscription",
    "hb_domain",
    "hb_tbps",
    "nic_gbps",
    "nics_per_gpu",
    "nvls",
    "sharp",
    "radix",
    "gpu_memory_gib",
)


def estimate_command(model: str, system: str, gpus: int, s: Strategy, **given: Any) -> str:
    """The `railplan estimate` command that predicts strategy `s` of a job: the model and
    system as named, the system's and network's options `given` (HARDWARE_OPTIONS; None: not
    given; nvls False is `--no-nvls`, the system's own setting may be on; sharp False, every
    network's default, is left out; an ideal network takes no NIC option), then the
    strategy's flags, the batch among them (`Strategy.estimate_flags`)."""
    import shlex

    from railplan.specs.strategy import option_text

    nicless = ("nic_gbps", "nics_per_gpu", "sharp") if given.get("network") == "ideal" else ()
    args = ["railplan", "estimate", "--model", model, "--system", system, "--gpus", str(gpus)]
    for name in HARDWARE_OPTIONS:
        value = given.get(name)
        if value is None or (name == "sharp" and value is False) or name in nicless:
            continue
        option = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(option if value else "--no-" + option[2:])
        else:
            args += [option, option_text(value)]
    return shlex.join(args + s.estimate_flags())
