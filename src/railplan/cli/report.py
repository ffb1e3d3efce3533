"""CLI commands of the report part."""

from __future__ import annotations

import typer


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the report commands to the main app."""
    return None
