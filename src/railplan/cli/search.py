"""CLI commands of the search part."""

from __future__ import annotations

import typer


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the search commands to the main app and the `reproduce` group."""
    return None
