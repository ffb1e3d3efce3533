"""Every script in examples/ runs (as `python examples/NAME.py` would) and prints its result."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXPECTED = {
    "estimate_networks.py": ("rail-optimized", "rail-only", "ideal", "MFU"),
    "search_best.py": ("rail-only", "tp=", "strategies in"),
    "cost_comparison.py": ("2,560 → 1,536", "152.8 →  94.3", "76.6%"),
    "traffic_stats.py": ("TP", "NIC bytes crossing rails: 0", "GPU pairs with traffic"),
}


def test_every_example_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    for text in EXPECTED[name]:
        assert text in out, (text, out)
