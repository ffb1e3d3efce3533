"""CLI commands of the report part: `railplan report` (one self-contained HTML page)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from railplan.cli.options import (
    GpusOpt,
    HbDomainOpt,
    HbTbpsOpt,
    ModelOpt,
    NicGbpsOpt,
    PriceBookOpt,
    ReportNicsPerGpuOpt,
    SystemOpt,
)

# GPT-3 175B's batch: 3.2M tokens = 1536 sequences of 2048 (Brown et al. 2020, Table 2.1).
DEFAULT_GLOBAL_BATCH = 1536


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the report commands to the main app."""
    app.command()(report)


def report(
    model: ModelOpt,
    gpus: GpusOpt,
    system: SystemOpt = "dgx-a100",
    global_batch: Annotated[
        int, typer.Option(help="sequences per iteration (default: GPT-3's 1536)")
    ] = DEFAULT_GLOBAL_BATCH,
    radix: Annotated[int, typer.Option(help="switch radix of the NIC domain")] = 64,
    price_book: PriceBookOpt = None,
    hb_domain: HbDomainOpt = None,
    hb_tbps: HbTbpsOpt = None,
    nic_gbps: NicGbpsOpt = None,
    nics_per_gpu: ReportNicsPerGpuOpt = None,
    trials: Annotated[int, typer.Option(help="Monte Carlo trials of the failure section")] = (1000),
    workers: Annotated[
        int,
        typer.Option(help="processes for the strategy searches (0: one per core, 1: none)"),
    ] = 0,
    out: Annotated[Path, typer.Option(help="the HTML file to write")] = Path("report.html"),
) -> None:
    """One self-contained HTML page for an architect: best strategy per network, cost and
    power, traffic, sensitivities, failures, assumptions and sources."""
    import time

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from railplan.errors import RailplanError
    from railplan.network.cost import load_price_book
    from railplan.report import STEPS, ReportInputs, build, write_report
    from railplan.report.html import check_output
    from railplan.report.sections import check_inputs
    from railplan.specs import load_model
    from railplan.specs.build import build_system

    check_output(out)
    if trials < 1:
        raise RailplanError("trials", "must be a positive integer")
    if workers < 0:
        raise RailplanError("workers", "must be 0 (one per core) or a positive integer")
    inp = ReportInputs(
        model=load_model(model),
        system=build_system(system, hb_domain, hb_tbps, nic_gbps, nics_per_gpu),
        gpus=gpus,
        global_batch=global_batch,
        radix=radix,
        price_book=load_price_book(price_book),
        mc_trials=trials,
        workers=workers,
    )
    check_inputs(inp)  # before the progress bar, not after it
    t0 = time.perf_counter()
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description:<48}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,  # logs and pipes get the result line only
    ) as progress:
        task = progress.add_task(STEPS[0][1], total=len(STEPS) + 1)
        titles = [title for _, title, _ in STEPS[1:]] + ["writing the HTML page"]

        def step(_: str) -> None:
            progress.advance(task)
            if titles:
                progress.update(task, description=titles.pop(0))

        def searched(done: int, total: int) -> None:
            progress.update(task, description=f"strategy searches {done}/{total}")
            if done == total:
                progress.update(task, description=STEPS[0][1])

        data = build(inp, on_step=step, on_search=searched)
        path = write_report(data, out)
        progress.advance(task)
    size_mb = path.stat().st_size / 1e6
    typer.echo(f"wrote {path} ({size_mb:.1f} MB) in {time.perf_counter() - t0:.1f} s")
