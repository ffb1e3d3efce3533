"""The context a model serves (`Model.context_tokens`): the report's serving section fits its
example request into it, the spec refuses values no request fits, the refusal comes after the
output's own check, and infer-search notes a length beyond an unstated context."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from railplan import load_model, load_system
from railplan.errors import RailplanError
from railplan.inference import search as inf
from railplan.inference.engine import Deployment
from railplan.inference.estimate import infer
from railplan.report.sections import serving
from railplan.specs import Model
from tests.conftest import Cli, unstated_context_model


def test_the_report_serves_a_request_that_fits_a_short_context() -> None:
    """GPT-3 175B serves 2,048 tokens: the report's example request keeps its 256 output
    tokens and shortens the prompt to 1,792 (it failed with the 2,048-token prompt)."""
    h100 = load_system("dgx-h100")
    # the section reads the model, the system and the GPUs only
    inp = SimpleNamespace(model=load_model("gpt-3-175b"), system=h100, gpus=64)
    out = serving(inp)  # type: ignore[arg-type]
    assert out["tokens"] == {"input": 2048 - inf.EXAMPLE_OUTPUT_TOKENS, "output": 256}
    assert out["best"] is not None
    # a model serving a longer context keeps the example request
    inp = SimpleNamespace(model=load_model("llama-3.1-8b"), system=h100, gpus=8)
    long = serving(inp)  # type: ignore[arg-type]
    assert long["tokens"] == {
        "input": inf.EXAMPLE_INPUT_TOKENS,
        "output": inf.EXAMPLE_OUTPUT_TOKENS,
    }


@pytest.mark.parametrize("value", [0, 2, -5, True, "8192", 1.5])
def test_context_values_no_request_fits_are_refused(value: object) -> None:
    base = load_model("llama-3.1-8b").model_dump()
    with pytest.raises(RailplanError, match="context_tokens"):
        Model.parse(base | {"context_tokens": value}, "model")
    assert Model.parse(base | {"context_tokens": 3}, "model").context_tokens == 3


def test_the_output_is_checked_before_the_context() -> None:
    """One output token is refused for having no decode step, not with a prompt length that
    would be refused in its turn."""
    dep = Deployment(load_model("mixtral-8x7b"), "dgx-h100", None, gpus=8, tp=8)
    with pytest.raises(RailplanError, match=r"^output_tokens: must be at least 2"):
        infer(dep, 1, 40_000, 1)
    with pytest.raises(RailplanError, match="at most 32,568 tokens with 200 output"):
        infer(dep, 1, 40_000, 200)


def test_experts_without_an_moe_layer_are_refused() -> None:
    base = load_model("moe-1.3b").model_dump() | {"layers": 8, "moe_layer_interval": 9}
    with pytest.raises(RailplanError, match=r"moe_layer_interval .* must leave an MoE layer"):
        Model.parse(base, "model")


def test_infer_search_notes_a_length_beyond_an_unstated_context(cli: Cli, tmp_path: Path) -> None:
    spec = unstated_context_model(tmp_path, 4096, 32, 32, 14336, 128256, 2048)
    args = ("infer-search", "--model", spec, "--gpus", "2")
    beyond = cli.json(*args, "--input-tokens", "2048", "--output-tokens", "256")
    (note,) = beyond["notes"]
    assert "2,048 prompt + 256 output tokens exceed" in note
    inside = cli.json(*args, "--input-tokens", "1024", "--output-tokens", "256")
    assert "notes" not in inside
