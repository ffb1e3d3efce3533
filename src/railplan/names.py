"""Names the library and the command line share, importable without pydantic or numpy.

The CLI's help text needs them before any command runs; keeping them here lets
`import railplan.cli` stay fast (the heavy modules load inside the command functions).
"""

from __future__ import annotations

#: NIC-domain architectures of the performance model (`railplan.specs.Network`).
ARCHITECTURES: tuple[str, ...] = ("rail-optimized", "rail-only", "ideal", "oversubscribed")


def price_book_names() -> list[str]:
    """Names of the price books shipped in railplan/catalog/pricebooks (no YAML parsed)."""
    from importlib import resources

    root = resources.files("railplan.catalog") / "pricebooks"
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))
