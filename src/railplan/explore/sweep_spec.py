"""A sweep's specification: the grid over spec fields (`--vary`, a spec file), checked in full
before any point runs, and the point list it expands to (`SweepSpec.points`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from railplan.errors import RailplanError
from railplan.fileio import load_yaml
from railplan.limits import MAX_GLOBAL_BATCH, MAX_GPUS, check_int

if TYPE_CHECKING:
    from railplan.explore.search import SearchSpace


def switch(text: str) -> bool:
    """'true'/'false' (also 'on'/'off', '1'/'0', any case) → bool; anything else ValueError."""
    words = {"true": True, "on": True, "1": True, "false": False, "off": False, "0": False}
    try:
        return words[text.strip().lower()]
    except KeyError:
        raise ValueError(text) from None


# Spec fields a sweep can vary, with their parser; the defaults of a point. `nvls` (System.nvls)
# and `sharp` (Network.sharp) are in-network all-reduce (docs/collectives.md); unset, the
# system's and network's own values hold, and a point's key leaves them out (so sweeps started
# before they existed resume).
FIELDS: dict[str, Callable[[str], Any]] = {
    "model": str,
    "system": str,
    "network": str,
    "oversubscription": float,
    "gpus": int,
    "global_batch": int,
    "hb_domain": int,
    "hb_tbps": float,
    "nic_gbps": float,
    "nics_per_gpu": float,
    "nvls": switch,
    "sharp": switch,
}
# The search's settings a sweep can fix or vary (`SearchSpace` fields, as `railplan search`
# takes them; one value per point: `precision=bf16,fp8` gives a bf16 and an fp8 point), and the
# parallel degrees a point can fix (`tp=8`: the search tries only tp 8 there). Unset, the
# search's defaults hold.
SEARCH_FIELDS: dict[str, Callable[[str], Any]] = {
    "tp": int,
    "pp": int,
    "cp": int,
    "ep": int,
    "precision": str,
    "attention": str,
    "cross_entropy": str,
    "optimizer_state": str,
    "grad_reduce_bytes": int,
    "overlap_dp": switch,
    "ep_dispatch": str,
    "router_dtype": str,
    "shared_expert_overlap": switch,
    "overlap_ep": switch,
    "fp8_param_gather": switch,
    "fp8_dispatch": switch,
    "pipeline_schedule": str,
    "microbatch_groups": switch,
    "defer_embedding_wgrad": switch,
}
FIELDS.update(SEARCH_FIELDS)
#: fields a point's key names only when set (sweeps started before they existed resume)
KEY_WHEN_SET: tuple[str, ...] = ("nvls", "sharp", *SEARCH_FIELDS)
# the search fields that apply to FP8 points only (as search applies them to FP8 candidates)
FP8_FIELDS = ("fp8_param_gather", "fp8_dispatch")
# the search fields that fix a list of values in `SearchSpace` (one value here)
_SPACE_LISTS = ("tp", "pp", "cp", "ep", "precision")


DEFAULTS: dict[str, Any] = {"system": "dgx-a100", "network": "rail-optimized"}


REQUIRED = ("model", "gpus", "global_batch")


MAX_POINTS = 100_000
"""Most grid points one sweep may have (each is a strategy search)."""


T = TypeVar("T")


def comma_list(
    field_name: str,
    text: str,
    kind: Callable[[str], T],
    bad: str = "{text!r} is not a comma-separated list of integers",
    empty: str = "give at least one integer",
    unique: bool = False,
) -> list[T]:
    """'0,1,2' → [kind('0'), kind('1'), kind('2')], or a one-line error naming the field: `bad`
    (with `{text!r}` for the text given) when a value does not parse or an item between commas
    is empty ('10,,20', '10,'), `empty` when none is given; `unique`: a value given twice is
    an error too (lists of choices, not of items such as job sizes)."""
    items = [x.strip() for x in text.split(",")]
    if not any(items):
        raise RailplanError(field_name, empty)
    if not all(items):
        raise RailplanError(field_name, bad.format(text=text))
    try:
        values = [kind(x) for x in items]
    except ValueError:
        raise RailplanError(field_name, bad.format(text=text)) from None
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None) if unique else None
    if twice is not None:  # a choice given twice would be computed and shown twice
        raise RailplanError(field_name, f"{twice!r} is given twice in {text!r}; give each once")
    return values


def int_list(field_name: str, text: str) -> list[int]:
    """'0,1,2' → [0, 1, 2] (each value once), or a one-line error naming the field."""
    return comma_list(field_name, text, int, unique=True)


_KIND_TEXT: dict[Callable[[str], Any], str] = {
    str: "a name",
    int: "an integer",
    float: "a number",
    switch: "true or false",
}


SPEC_KEYS = (*FIELDS, "vary", "zero")


def search_space(point: dict[str, Any], zero: tuple[int, ...]) -> SearchSpace:
    """The `SearchSpace` of one point: the ZeRO stages and the search fields it sets (a
    one-line error names a bad value, as `railplan search` does)."""
    from railplan.explore.search import SearchSpace  # numpy: loaded when a sweep runs
    from railplan.specs import PRECISION_CODES

    settings = {k: point[k] for k in SEARCH_FIELDS if point.get(k) is not None}
    precision = settings.get("precision", "bf16")
    if precision not in PRECISION_CODES:  # one per point here
        raise RailplanError("precision", "must be one of " + ", ".join(PRECISION_CODES))
    for k in _SPACE_LISTS:
        if k in settings:
            settings[k] = (settings[k],)
    return SearchSpace(zero=zero, **settings)


def _check_field(name: Any, where: str) -> str:
    if name not in FIELDS:
        raise RailplanError(where, f"unknown field {name!r}; one of {', '.join(FIELDS)}")
    return str(name)


def _parse_value(name: str, value: Any) -> Any:
    """One value of a field, as text (command line) or typed (YAML); a one-line error names
    the field. Booleans (but for a true/false field), 8.5 for an integer and non-finite numbers
    are refused."""
    kind = FIELDS[name]
    parsed: Any = None
    if isinstance(value, str) and value.strip():
        try:
            parsed = kind(value.strip())
        except ValueError:
            parsed = None
    elif kind is int and type(value) is int:
        parsed = value
    elif kind is float and type(value) in (int, float):
        parsed = float(value)
    elif kind is switch and type(value) is bool:
        parsed = value
    if parsed is None or (kind is float and not math.isfinite(parsed)):
        raise RailplanError(name, f"{value!r} is not {_KIND_TEXT[kind]}")
    return parsed


def parse_vary(items: Iterable[str]) -> dict[str, list[Any]]:
    """['hb_domain=1,2,4', 'nic_gbps=100,400'] → {'hb_domain': [1, 2, 4], ...}.

    Each field may appear once: a repeated field is an error rather than a silent override."""
    out: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = _check_field(name.strip(), "vary")
        if not sep or not values.strip():
            raise RailplanError("vary", f"{item!r}: write FIELD=v1,v2,...")
        if name in out:
            raise RailplanError(
                "vary", f"{name} given twice; list all its values in one --vary {name}=v1,v2,..."
            )
        parts = [v.strip() for v in values.split(",")]
        if not all(parts):
            raise RailplanError("vary", f"{item!r}: an empty value between commas")
        out[name] = [_parse_value(name, v) for v in parts]
    return out


def _read_spec_file(
    path: Path,
) -> tuple[dict[str, Any], dict[str, list[Any]], tuple[int, ...] | None]:
    """Base fields, varied fields and ZeRO stages of a YAML sweep file; one-line errors."""
    data = load_yaml(Path(path), "spec")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RailplanError("spec", f"{str(path)!r} must be a mapping of fields to values")
    for key in data:
        if key not in SPEC_KEYS:
            raise RailplanError("spec", f"unknown key {key!r}; one of {', '.join(SPEC_KEYS)}")
    vary_data = data.get("vary") or {}
    if not isinstance(vary_data, dict):
        raise RailplanError("vary", "must be a mapping of FIELD: [v1, v2, ...]")
    vary: dict[str, list[Any]] = {}
    for name, values in vary_data.items():
        name = _check_field(name, "vary")
        if not isinstance(values, list):
            raise RailplanError(f"vary.{name}", f"{values!r} is not a list; write [v1, v2, ...]")
        vary[name] = [_parse_value(name, v) for v in values]
    zero: tuple[int, ...] | None = None
    if "zero" in data:
        stages = data["zero"]
        if not isinstance(stages, list) or any(type(z) is not int for z in stages):
            raise RailplanError("zero", f"{stages!r}: give a list of ZeRO stages, e.g. [0, 1]")
        zero = tuple(stages)
    base = {k: _parse_value(k, v) for k, v in data.items() if k in FIELDS}
    return base, vary, zero


@dataclass(frozen=True)
class SweepSpec:
    """Base fields, the varied fields (a Cartesian grid, in the given order), ZeRO stages.

    Constructing one checks every value of the grid the way `railplan search` checks its
    options, so a bad value fails before any point is computed."""

    base: dict[str, Any]
    vary: dict[str, list[Any]]
    zero: tuple[int, ...] = (0, 1, 2, 3)

    def __post_init__(self) -> None:
        for name in REQUIRED:
            if name not in self.base and name not in self.vary:
                raise RailplanError(name, "required: give it as an option, in --spec or --vary")
        if not self.vary:
            raise RailplanError("vary", "give at least one FIELD=v1,v2,... to sweep over")
        for name in self.base:
            _check_field(name, "base")
        for name in self.vary:
            _check_field(name, "vary")
        for name, values in self.vary.items():
            if not values:
                raise RailplanError(name, "give at least one value")
        size = math.prod(len(dict.fromkeys(v)) for v in self.vary.values())
        if size > MAX_POINTS:
            raise RailplanError(
                "vary", f"the grid has {size:,} points; at most {MAX_POINTS:,} per sweep"
            )
        self._check_points()

    def _check_points(self) -> None:
        from railplan.explore.search import check_modules
        from railplan.network.topology import DEFAULT_RADIX, check_oversubscribable
        from railplan.perf.compute import fp8_peak_tflops
        from railplan.specs import load_model
        from railplan.specs.build import build_network, build_system

        points = self.points()

        def distinct(*names: str) -> list[tuple[Any, ...]]:
            return list(dict.fromkeys(tuple(p[n] for n in names) for p in points))

        for name, high in (("gpus", MAX_GPUS), ("global_batch", MAX_GLOBAL_BATCH)):
            for (value,) in distinct(name):
                check_int(name, value, 1, high)
        for name in FP8_FIELDS:  # an FP8 setting given where no point runs FP8
            given = [self.base.get(name), *self.vary.get(name, [])]
            if any(given) and not any(p["precision"] == "fp8" for p in points):
                raise RailplanError(name, "needs precision fp8 at some point of the grid")
        models = {model: load_model(model) for (model,) in distinct("model")}
        for model, *settings in distinct("model", *SEARCH_FIELDS):
            # the space alone, then against the model (router_dtype fp32 needs an MoE model)
            space = search_space(dict(zip(SEARCH_FIELDS, settings, strict=True)), self.zero)
            check_modules(models[model], space)
        # the systems and networks as `sweep.evaluate_point` builds them (NVLink SHARP on an
        # A100 is refused here), and what search refuses of them: fp8 on a GPU without fp8
        # tensor cores, an oversubscribed job whose NIC ports fit one switch
        held = ("system", "hb_domain", "hb_tbps", "nic_gbps", "nics_per_gpu", "nvls")
        systems = {
            (name, k, hb, nic, nics, nvls): build_system(name, k, hb, nic, nics, nvls=nvls)
            for name, k, hb, nic, nics, nvls in distinct(*held)
        }
        for *key, precision in distinct(*held, "precision"):
            if precision == "fp8":
                fp8_peak_tflops(systems[tuple(key)].gpu)
        for network, ratio, sharp in distinct("network", "oversubscription", "sharp"):
            build_network(network, ratio, sharp)
        for *key, gpus, ratio in distinct(*held, "gpus", "oversubscription"):
            if ratio is not None:
                nics = systems[tuple(key)].nics_per_gpu
                check_oversubscribable(gpus, nics, ratio, DEFAULT_RADIX, radix_option=False)

    @classmethod
    def build(
        cls,
        base: dict[str, Any],
        vary: dict[str, list[Any]],
        spec_file: Path | None = None,
        zero: tuple[int, ...] | None = None,
        fixed_wins: bool = False,
    ) -> SweepSpec:
        """Merge a YAML file (fields at the top level, a `vary` mapping, optional `zero`) with
        command-line values; the command line wins (`zero` defaults to 0, 1, 2, 3). A field of
        `base` that is also varied is a default the grid overrides, or, with `fixed_wins` (the
        command line's own values), an error: the value given would be lost."""
        merged_base: dict[str, Any] = dict(DEFAULTS)
        merged_vary: dict[str, list[Any]] = {}
        file_zero: tuple[int, ...] | None = None
        if spec_file is not None:
            file_base, file_vary, file_zero = _read_spec_file(spec_file)
            merged_base.update(file_base)
            merged_vary.update(file_vary)
        merged_base.update({k: _parse_value(_check_field(k, "base"), v) for k, v in base.items()})
        merged_vary.update(vary)
        for k in base if fixed_wins else ():  # a value given would be lost under a grid over it
            if k in merged_vary:
                raise RailplanError(
                    k,
                    f"is given as --{k.replace('_', '-')} and varied "
                    f"({', '.join(str(x) for x in merged_vary[k])}); give one or the other",
                )
        if zero is None:
            zero = file_zero if file_zero is not None else (0, 1, 2, 3)
        return cls(base=merged_base, vary=merged_vary, zero=zero)

    def points(self) -> list[dict[str, Any]]:
        """Every grid point: base fields overridden by one combination of the varied ones
        (a value listed twice gives one point; FP8_FIELDS are left empty at any precision but
        fp8, so such points are one point whatever their value)."""
        names = list(self.vary)
        out: dict[tuple[Any, ...], dict[str, Any]] = {}
        for combo in itertools.product(*(dict.fromkeys(self.vary[n]) for n in names)):
            p = {k: v for k, v in self.base.items() if k not in names}
            p.update(zip(names, combo, strict=True))
            if p.get("precision") != "fp8":  # FP8's own settings: nothing at another precision
                p.update(dict.fromkeys(FP8_FIELDS))  # (one point, not one per value)
            point = {k: p.get(k) for k in FIELDS}
            out.setdefault(tuple(point.values()), point)
        return list(out.values())
