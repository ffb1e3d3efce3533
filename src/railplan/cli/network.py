"""CLI commands of the network part (cost, faults, tiling, reproduce table2)."""

from __future__ import annotations

import typer


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the network commands to the main app and the `reproduce` group."""
    return None
