"""Option groups (cli/options.with_option_groups): one declaration, spread into each command."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated

import typer
from typer.testing import CliRunner

from railplan.cli.options import HardwareOptions, OptionGroup, with_option_groups


@dataclass(frozen=True)
class _Pair(OptionGroup):
    first: Annotated[int, typer.Option(help="the first")]
    second: str = "b"


def test_a_group_is_spread_into_the_signature_and_built_from_the_options() -> None:
    seen: list[object] = []

    @with_option_groups
    def command(before: int, pair: _Pair, after: bool = False) -> None:
        seen.append((before, pair, after))

    names = list(inspect.signature(command).parameters)
    assert names == ["before", "first", "second", "after"]
    assert inspect.signature(command).parameters["second"].default == "b"
    app = typer.Typer()
    app.command()(command)
    app.command("other")(lambda: None)  # two commands: typer then wants the command's name
    result = CliRunner().invoke(app, ["command", "1", "--first", "2", "--after"])
    assert result.exit_code == 0, result.output
    assert seen == [(1, _Pair(2, "b"), True)]
    help_text = CliRunner().invoke(app, ["command", "--help"]).output
    assert "the first" in help_text and "--second" in help_text and "--pair" not in help_text


def test_hardware_options_apply_the_overrides() -> None:
    hw = HardwareOptions(network="rail-only", hb_domain=4, nic_gbps=200.0)
    sy = hw.system("dgx-a100", 40.0)
    assert (sy.hb_domain, sy.nic_gbps, sy.gpu.memory_gib) == (4, 200.0, 40.0)
    assert hw.network_spec().architecture == "rail-only"
