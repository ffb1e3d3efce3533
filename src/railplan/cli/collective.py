"""CLI command `railplan collective`: one collective by every algorithm, beside the cut bound."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from railplan.cli.options import JsonOpt, OversubscriptionOpt, SystemOpt
from railplan.cli.output import print_json, table

if TYPE_CHECKING:
    from railplan.collective.algorithms import Built
    from railplan.specs import Network, System


def _sizes(text: str) -> list[float]:
    from railplan.explore.sweep_spec import comma_list

    bad = "{text!r} is not a comma-separated list of sizes"
    return comma_list("bytes", text, float, bad, "give at least one size in bytes, e.g. 1048576")


def _algorithms(text: str) -> tuple[str, ...]:
    """`--algorithm`: names, comma-separated; "all" stands for every closed form."""
    from railplan.collective import algorithms as alg
    from railplan.collective.sweep import ALL_ALGORITHMS
    from railplan.errors import RailplanError

    names: list[str] = []
    for name in (n.strip() for n in text.split(",")):
        if name not in (*ALL_ALGORITHMS, "all"):
            allowed = ", ".join((*ALL_ALGORITHMS, "all"))
            raise RailplanError("algorithm", f"{name!r} is not allowed; choose one of {allowed}")
        names += [a for a in (alg.ALGORITHMS if name == "all" else (name,)) if a not in names]
    return tuple(names)


#: the networks `railplan collective` builds
COLLECTIVE_NETWORKS = ("rail-optimized", "rail-only", "oversubscribed", "multi-plane", "ideal")


def _built(
    sysm: System, network: str, oversubscription: float | None, planes: int | None, radix: int
) -> tuple[Network, Built]:
    """The network the closed forms see and the one the graph algorithms build. Multi-plane
    splits each GPU's NIC bandwidth (NIC Gbps × NICs per GPU) into `planes` equal ports, one
    per rail-optimized plane; its closed forms are rail-optimized's at the same bandwidth."""
    from railplan.collective.algorithms import Built
    from railplan.errors import RailplanError
    from railplan.limits import check_int
    from railplan.network.topology import MAX_NICS_PER_GPU, NIC_SPEEDS_GBPS
    from railplan.specs.build import build_network

    if network not in COLLECTIVE_NETWORKS:
        raise RailplanError("network", f"choose one of {', '.join(COLLECTIVE_NETWORKS)}")
    if network != "multi-plane":
        if planes is not None:
            raise RailplanError("planes", "applies only to --network multi-plane")
        net = build_network(network, oversubscription)
        return net, Built(net.architecture, radix, int(sysm.nic_gbps), net.oversubscription)
    p = check_int("planes", 2 if planes is None else planes, 2, MAX_NICS_PER_GPU)
    total = sysm.nic_gbps * sysm.nics_per_gpu
    if total / p not in NIC_SPEEDS_GBPS:
        speeds = ", ".join(map(str, NIC_SPEEDS_GBPS))
        raise RailplanError(
            "planes",
            f"{p} planes split the GPU's {total:g} Gbps into {total / p:g} Gbps ports; a port "
            f"must be one of {speeds} Gbps",
        )
    return build_network("rail-optimized", oversubscription), Built(
        "multi-plane", radix, int(total // p), planes=p
    )


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the `collective` command."""
    app.command()(collective)


def collective(
    system: SystemOpt = "dgx-h100",
    gpus: Annotated[int, typer.Option(help="ranks in the group (≤ K or a multiple of K)")] = 8,
    op: Annotated[
        str, typer.Option(help="all-reduce | all-gather | reduce-scatter | all-to-all")
    ] = "all-reduce",
    algorithm: Annotated[
        str,
        typer.Option(
            help="ring | ring-ll | tree | hierarchical | nvls | sharp | custom | flow | optimal | "
            "all, or several "
            "comma-separated; all = the closed forms; flow = the hierarchical schedule (or "
            "all-to-all) simulated flow by flow on the built graph; optimal = the LP schedule "
            "(TE-CCL) on the built graph, at most 64 GPUs, seconds to minutes per size; a size "
            "the solver cannot schedule in its time is reported, not fatal"
        ),
    ] = "all",
    nbytes: Annotated[
        str, typer.Option("--bytes", help="size(s) as nccl-tests prints, comma-separated")
    ] = "1073741824",
    network: Annotated[str, typer.Option(help=" | ".join(COLLECTIVE_NETWORKS))] = (
        "rail-optimized"
    ),
    oversubscription: OversubscriptionOpt = None,
    planes: Annotated[
        int | None,
        typer.Option(help="planes (2-16) sharing each GPU's NIC bandwidth; with multi-plane [2]"),
    ] = None,
    radix: Annotated[int, typer.Option(help="switch radix of the built graph")] = 64,
    as_json: JsonOpt = False,
    plot: Annotated[
        str | None, typer.Option(help="write time and busbw vs size to a .png/.svg/.pdf")
    ] = None,
) -> None:
    """Time, algbw and busbw (as nccl-tests) per algorithm, and the max-flow lower bound."""
    from railplan.collective import algorithms as alg
    from railplan.collective.bound import bound_s
    from railplan.collective.sweep import sweep
    from railplan.errors import RailplanError
    from railplan.specs import load_system

    sysm = load_system(system)
    from railplan.network.topology import check_radix

    check_radix(radix)  # checked even where the group fits in one domain and builds no switch
    net, built = _built(sysm, network, oversubscription, planes, radix)
    names = _algorithms(algorithm)
    g = alg.group(sysm, net, gpus)
    sizes = _sizes(nbytes)
    if "optimal" in names:
        from railplan.collective.lp import MAX_RANKS

        if gpus > MAX_RANKS:
            raise RailplanError(
                "gpus", f"optimal (the LP schedule) takes at most {MAX_RANKS} GPUs; got {gpus}"
            )
        with Console(stderr=True).status("solving the LP schedule") as status:
            rows = sweep(g, op, sizes, names, built, progress=status.update)
    else:
        rows = sweep(g, op, sizes, names, built)
    for row in rows:
        row["bound_s"] = bound_s(g, op, row["bytes"], built)
    if plot is not None:
        from railplan.collective.sweep import plot as plot_sweep

        plot_sweep(rows, plot, f"{op} on {gpus} GPUs of {sysm.name}, {network}")
    if as_json:
        print_json({"system": sysm.name, "gpus": gpus, "op": op, "network": network, "sizes": rows})
        return
    cells = [
        (
            f"{row['bytes']:.0f}",
            r["algorithm"],
            f"{r['time_s'] * 1e6:,.1f}",
            f"{r['algbw_gb_per_s']:.1f}",
            f"{r['busbw_gb_per_s']:.1f}",
            f"{row['bound_s'] * 1e6:,.1f}",
        )
        for row in rows
        for r in row["algorithms"]
        if r["time_s"] is not None
    ]
    columns = ("bytes", "algorithm", "time (us)", "algbw GB/s", "busbw GB/s", "bound (us)")
    Console().print(table(f"{op} on {gpus} GPUs of {sysm.name}, {network}", columns, cells))
    # the algorithms that do not apply, once each with why (at which sizes, where others do)
    skipped: dict[str, tuple[str, list[float]]] = {}
    for row in rows:
        for r in row["algorithms"]:
            if r["time_s"] is None:
                why = str(r.get("note", "does not apply"))
                skipped.setdefault(r["algorithm"], (why, []))[1].append(row["bytes"])
    for name, (why, at) in skipped.items():
        where = "" if len(at) == len(rows) else " at " + ", ".join(f"{b:.0f}" for b in at) + " B"
        Console().print(f"{name}: not applicable{where}: {why}")
    # how the built-graph schedules came out (epochs, proof, solve time; the simulated steps)
    for row in rows:
        for r in row["algorithms"]:
            if r["time_s"] is not None and r["algorithm"] in ("flow", "optimal") and r.get("note"):
                Console().print(f"{r['algorithm']} at {row['bytes']:.0f} B: {r['note']}")
