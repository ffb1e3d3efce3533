"""CLI commands of the flowsim part: `railplan flowsim` (flow-level check of the closed forms)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from railplan.cli.options import JsonOpt, RadixOpt
from railplan.cli.output import print_json, table

if TYPE_CHECKING:
    from railplan.network.flowsim.check import FlowsimReport


def _t(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:,.4f} ms"


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the flowsim commands to the main app and the `reproduce` group."""
    app.command()(flowsim)


def flowsim(
    system: Annotated[str, typer.Option(help="catalog system, e.g. dgx-h100")],
    gpus: Annotated[int, typer.Option(help="GPUs N (a multiple of the HB-domain size)")],
    arch: Annotated[
        str, typer.Option(help="rail-optimized, rail-only or oversubscribed")
    ] = "rail-optimized",
    oversubscription: Annotated[
        float | None,
        typer.Option(help="down:up ratio at the leaves; only with --arch oversubscribed [3]"),
    ] = None,
    collective: Annotated[
        str, typer.Option(help="alltoall, allreduce-ring or allreduce-hierarchical")
    ] = "alltoall",
    bytes_per_pair: Annotated[
        float | None, typer.Option(help="all-to-all bytes per ordered GPU pair (D)")
    ] = None,
    nbytes: Annotated[
        float | None,
        typer.Option("--bytes", help="all-reduce vector bytes; all-to-all bytes per GPU"),
    ] = None,
    radix: RadixOpt = 64,
    skew: Annotated[
        str | None, typer.Option(help="all-to-all traffic skew: zipf:S (expert load)")
    ] = None,
    schedule: Annotated[
        str, typer.Option(help="all-to-all: auto, direct or forwarding (via HB domain)")
    ] = "auto",
    no_aggregate: Annotated[
        bool, typer.Option("--no-aggregate", help="simulate every GPU pair as its own flow")
    ] = False,
    seed: Annotated[
        int | None, typer.Option(help="with --skew: seed of the Zipf expert ranking [0]")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Flow-level simulation (max-min fair, ECMP) of a collective beside its closed form."""
    from railplan.errors import RailplanError
    from railplan.network.flowsim import run

    if seed is not None and skew is None:
        raise RailplanError("seed", "takes effect only with --skew zipf:S (the expert ranking)")

    # a spinner on stderr (terminals only) while a large simulation runs
    with Console(stderr=True).status(f"simulating {collective} on {gpus:,} GPUs"):
        rep = run(
            system,
            gpus,
            arch,
            collective,
            pair_bytes=bytes_per_pair,
            size_bytes=nbytes,
            radix=radix,
            oversubscription=oversubscription,
            skew=skew,
            schedule=schedule,
            aggregate=not no_aggregate,
            seed=0 if seed is None else seed,
        )
    if as_json:
        print_json(rep.to_dict())
        return
    _print_report(rep, gpus, radix)


def _print_report(rep: FlowsimReport, gpus: int, radix: int) -> None:
    """The per-step table, then the simulated time beside the closed form and the cut bound."""
    inp = rep.inputs
    title = (
        f"{inp['collective']} ({inp['schedule']}) on {inp['arch']}: {inp['system']}, "
        f"N={gpus:,}, K={inp['hb_domain']}, radix {radix}, skew {inp['skew']}"
    )
    rows = [
        (
            s.name,
            str(s.repeat),
            f"{s.flows:,}",
            f"{s.classes:,}",
            str(s.events),
            _t(s.time_s),
            _t(s.link_bound_s),
        )
        for s in rep.step_detail
    ]
    columns = ("step", "×", "flows", "classes", "events", "time", "link bound")
    con = Console()
    con.print(table(title, columns, rows, left=("step",)))
    rel = "n/a" if rep.relative_error is None else f"{100 * rep.relative_error:+.2f}%"
    con.print(f"simulated      {_t(rep.simulated_s)}")
    note = "" if rep.closed_form_applies else "  (does not apply: skewed traffic)"
    con.print(f"closed form    {_t(rep.closed_form_s)}  {rep.closed_form}{note}")
    con.print(f"relative error {rel}")
    if rep.cut_bound_s is not None:
        con.print(f"cut bound      {_t(rep.cut_bound_s)}  (NIC, HB and leaf-uplink cuts)")
    con.print(
        f"{rep.flows:,} flows in {rep.classes:,} classes, {rep.links:,} links, "
        f"{rep.steps} steps, {rep.elapsed_s:.2f} s"
    )
