"""The golden cases: every command whose JSON must stay byte-identical through a refactor (issue
14). Each case is a file name under tests/golden/ and the `railplan` arguments that make it."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from railplan.cli import app

GOLDEN_DIR = Path(__file__).resolve().parent

_GPT1T = ("--model", "gpt-1t", "--gpus", "16384", "--global-batch", "4096", "--system", "dgx-h100")
_MOE = ("--model", "moe-1.3b", "--system", "dgx-a100", "--gpus", "128", "--global-batch", "256")

CASES: dict[str, tuple[str, ...]] = {
    "validate": ("validate", "--json"),
    **{
        f"reproduce-{name}": ("reproduce", name, "--json")
        for name in ("table2", "traffic", "fig5", "fig7", "fig8", "fig9", "fig10", "nic-count")
    },
    # the 2022 command the README used to open with (GPT-3 175B on 64 A100)
    "estimate-readme-gpt175b": (
        "estimate", "--model", "gpt-175b", "--system", "dgx-a100", "--gpus", "64", "--tp", "8",
        "--pp", "8", "--interleave", "3", "--global-batch", "64", "--recompute", "selective",
        "--sequence-parallel", "--json",
    ),
    # README's first command (NeMo's GPT-3 175B on 128 H100)
    "estimate-readme-gpt3-h100": (
        "estimate", "--model", "gpt-3-175b", "--system", "dgx-h100", "--gpus", "128", "--tp",
        "4", "--pp", "8", "--interleave", "12", "--global-batch", "256", "--sequence-parallel",
        "--zero", "1", "--grad-reduce-bytes", "2", "--json",
    ),
    # docs/tutorial.md
    "search-tutorial-rail-optimized": (
        "search", *_GPT1T, "--network", "rail-optimized", "--top", "1", "--json",
    ),
    "search-tutorial-rail-only": (
        "search", *_GPT1T, "--network", "rail-only", "--top", "3", "--json",
    ),
    "search-tutorial-ideal": ("search", *_GPT1T, "--network", "ideal", "--top", "1", "--json"),
    "estimate-tutorial-gpt1t": (
        "estimate", *_GPT1T, "--tp", "8", "--pp", "32", "--interleave", "4",
        "--sequence-parallel", "--zero", "1", "--network", "rail-only", "--json",
    ),
    "estimate-tutorial-moe-rail-optimized": (
        "estimate", *_MOE, "--ep", "16", "--network", "rail-optimized", "--json",
    ),
    "estimate-tutorial-moe-rail-only": (
        "estimate", *_MOE, "--ep", "16", "--network", "rail-only", "--json",
    ),
}  # fmt: skip


def path_of(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.json"


# Wall-clock measurements of this machine (search's speed), not outputs of the model: their
# values are replaced by a fixed string, every other byte is compared.
_WALL_CLOCK = re.compile(r'^(\s*"(?:elapsed_s|configurations_per_s)": )[-0-9.e+]+(,?)$', re.M)


def render(args: tuple[str, ...]) -> str:
    """What `railplan ARGS` prints on stdout, run in-process, wall-clock values masked; a failing
    command is an error."""
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    if result.exit_code != 0:
        raise RuntimeError(f"railplan {' '.join(args)} exited {result.exit_code}: {result.output}")
    return _WALL_CLOCK.sub(r'\1"<wall clock>"\2', result.stdout)
