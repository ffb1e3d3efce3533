"""CLI commands of the core performance model (estimate, validate)."""

from __future__ import annotations

import typer


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the core commands."""
    return None
