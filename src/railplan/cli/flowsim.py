"""CLI commands of the flowsim part."""

from __future__ import annotations

import typer


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the flowsim commands to the main app and the `reproduce` group."""
    return None
