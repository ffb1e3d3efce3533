"""CLI commands of the moe part."""

from __future__ import annotations

import typer


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the moe commands to the main app and the `reproduce` group."""
    return None
