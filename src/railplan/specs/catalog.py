"""Load specs by catalog name or from a YAML file, with one-line errors."""

from __future__ import annotations

import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from railplan.errors import RailplanError, unknown_name
from railplan.fileio import load_yaml
from railplan.specs.hardware import GPU, System
from railplan.specs.model import Model
from railplan.specs.network import Network

KINDS = ("models", "gpus", "systems")


def read_yaml(path: Path, field: str) -> Any:
    """Parse a YAML file with the bounded reader and loader of `railplan.fileio` (regular files
    only, size cap, UTF-8, alias budget); a missing or malformed file is a one-line error."""
    return load_yaml(path, field)


@cache
def _catalog(kind: str) -> dict[str, dict[str, Any]]:
    text = resources.files("railplan.catalog").joinpath(f"{kind}.yaml").read_text()
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def names(kind: str) -> list[str]:
    """Catalog names of `kind` ('models', 'gpus', 'systems')."""
    if kind not in KINDS:
        raise RailplanError("kind", f"must be one of {', '.join(KINDS)}; got {kind!r}")
    return sorted(_catalog(kind))


def _entry(kind: str, name: str, field: str) -> dict[str, Any]:
    cat = _catalog(kind)
    if name not in cat:
        raise unknown_name(field, name, cat)
    return dict(cat[name])


def _is_file(ref: str) -> bool:
    return ref.lower().endswith((".yaml", ".yml", ".json")) or "/" in ref or os.sep in ref


def _mapping(data: Any, field: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RailplanError(field, "expected a mapping of keys to values")
    return data


def _load_data(
    kind: str, field: str, ref: str | os.PathLike[str] | dict[str, Any]
) -> dict[str, Any]:
    """The mapping behind a reference: a dict as is, a YAML file, or a catalog entry."""
    if isinstance(ref, dict):
        return dict(ref)
    if isinstance(ref, os.PathLike):  # a pathlib.Path: always a file
        return dict(_mapping(read_yaml(Path(ref), field), field))
    if not isinstance(ref, str) or not ref:  # None, a number, a spec of another kind
        raise RailplanError(
            field,
            f"give a catalog name ({len(_catalog(kind))} in `railplan catalog {kind}`), a YAML "
            f"file, a mapping or a {field} spec; got {type(ref).__name__} {str(ref)[:40]!r}",
        )
    if _is_file(ref):
        return dict(_mapping(read_yaml(Path(ref), field), field))
    data = _entry(kind, ref, field)
    data.setdefault("name", ref)
    return data


def load_model(ref: str | os.PathLike[str] | Model | dict[str, Any]) -> Model:
    """A Model from a catalog name, a YAML path, a dict, or a Model."""
    if isinstance(ref, Model):
        return ref
    return Model.parse(_load_data("models", "model", ref), "model")


def load_gpu(ref: str | os.PathLike[str] | GPU | dict[str, Any]) -> GPU:
    """A GPU from a catalog name, a YAML path, a dict, or a GPU."""
    if isinstance(ref, GPU):
        return ref
    return GPU.parse(_load_data("gpus", "gpu", ref), "gpu")


def load_system(ref: str | os.PathLike[str] | System | dict[str, Any]) -> System:
    """A System from a catalog name, a YAML path, a dict, or a System. Its `gpu` may be a
    name, a YAML path, a mapping or a GPU."""
    if isinstance(ref, System):
        return ref
    data = _load_data("systems", "system", ref)
    if "gpu" not in data:
        raise RailplanError("system.gpu", "missing; give a GPU name or mapping")
    gpu_ref = data["gpu"]
    data["gpu"] = load_gpu(gpu_ref)
    return System.parse(data, "system")


def load_network(ref: str | Network | dict[str, Any] | None) -> Network:
    """A Network from an architecture name ('rail-only', as the CLI's --network takes it), a
    mapping of its fields, a Network, or None (rail-optimized)."""
    if ref is None:
        return Network()
    if isinstance(ref, Network):
        return ref
    if isinstance(ref, str):
        ref = {"architecture": ref}
    if not isinstance(ref, dict):
        raise RailplanError(
            "network",
            f"give a Network, an architecture name or a mapping; got {type(ref).__name__}",
        )
    if ref.get("architecture") == "oversubscribed" and "oversubscription" not in ref:
        raise RailplanError(
            "oversubscription",
            "an oversubscribed network needs its ratio (e.g. 2; 1 is rail-optimized)",
        )
    return Network.parse(ref, "network")
