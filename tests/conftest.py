"""Shared test helpers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from railplan.cli import app


class Cli:
    """Run `railplan` in-process the way the console script does (errors → exit 2)."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str) -> Any:
        from railplan.errors import RailplanError

        result = self.runner.invoke(app, list(args), catch_exceptions=True)
        if isinstance(result.exception, RailplanError):
            result.exit_code = 2  # what railplan.cli.main does
        return result

    def json(self, *args: str) -> Any:
        result = self(*args, "--json")
        assert result.exit_code == 0, result.output + repr(result.exception)
        return json.loads(result.stdout)


@pytest.fixture()
def cli() -> Cli:
    return Cli()


def unstated_context_model(
    directory: Any, hidden: int, layers: int, heads: int, ffn: int, vocab: int, seq: int
) -> str:
    """A dense GQA (8 KV heads, gated MLP) model file that does not state the context it serves
    (`Model.context_tokens`), in `directory`; its path."""
    spec = directory / "model.yaml"
    spec.write_text(
        f"name: unstated\nhidden: {hidden}\nlayers: {layers}\nheads: {heads}\nkv_heads: 8\n"
        f"ffn_hidden: {ffn}\ngated_mlp: true\nvocab: {vocab}\nseq: {seq}\n"
        "tied_embeddings: false\n"
    )
    return str(spec)
