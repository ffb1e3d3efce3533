"""The HTML report's network sections: cost and power of the designs, and failures."""

from __future__ import annotations

from typing import Any

from railplan.report.markup import (
    esc,
    fmt_int,
    fmt_musd,
    fmt_mw,
    fmt_pct,
    table,
)
from railplan.units import fmt_usd


def cost_section(r: dict[str, Any], figs: dict[str, str]) -> str:
    c = r["cost"]
    a, b = c["rail_optimized"], c["rail_only"]
    keys = (
        ("tiers", fmt_int),
        ("switches", fmt_int),
        ("switch_ports", fmt_int),
        ("links", fmt_int),
        ("transceivers", fmt_int),
        ("switch_cost_usd", fmt_musd),
        ("transceiver_cost_usd", fmt_musd),
        ("cost_usd", fmt_musd),
        ("switch_power_w", fmt_mw),
        ("transceiver_power_w", fmt_mw),
        ("power_w", fmt_mw),
    )
    o = c.get("rail_only_ocs")  # rail-only with its OCS layer: same switches and optics
    rows: list[list[str]] = [
        [k.replace("_", " "), f(a[k]), f(b[k])] + ([f(o.get(k, b[k]))] if o else [])
        for k, f in keys
    ]
    if o:
        for k, f in (
            ("ocs_units", fmt_int),
            ("ocs_ports", fmt_int),
            ("ocs_cost_usd", fmt_musd),
            ("ocs_power_w", fmt_mw),
            ("spare_gpus", fmt_int),
        ):
            rows.append([k.replace("_", " ").replace("ocs", "OCS"), "", "", f(o[k])])
    rows.append(
        ["saving", ""]
        + [
            f"cost {fmt_pct(x['savings']['cost'])}, power {fmt_pct(x['savings']['power'])}"
            for x in (c, o)
            if x
        ]
    )
    i = c["inputs"]
    note = f'<p class="note">{esc(c["note"])}</p>' if c["note"] else ""
    if o:
        note += (
            '<p class="note">rail-only + OCS: an optical circuit switch layer between the GPUs '
            "and the rail switches lets an idle GPU of the HB domain take a failed one's rail "
            "(docs/network.md); the OCS price is the price book's labelled assumption.</p>"
        )
    return (
        f"<p>{i['gpus']:,} GPUs, K={i['hb_domain']}, switch radix {i['radix']}, "
        + (
            f"{i['nic_gbps']} Gbps"
            if c["system_nic_gbps"] == i["nic_gbps"]
            else f"{c['system_nic_gbps']:g} Gbps NICs counted and priced as {i['nic_gbps']} Gbps "
            "(the note below)"
        )
        + f", {i['nics_per_gpu']} NIC per GPU, price book "
        f"<code>{esc(i['price_book'])}</code>. Rail-optimized: one minimal-tier full-bisection "
        "Clos over all GPUs; rail-only: one Clos per rail (no spine joining the rails).</p>"
        + note
        + table(["", "rail-optimized", "rail-only"] + (["rail-only + OCS"] if o else []), rows)
        + figs["fig-cost"]
    )


def failures_section(r: dict[str, Any], figs: dict[str, str]) -> str:
    f = r["failures"]
    archs = f["single"]["architectures"]
    rows = []
    for variant, a in archs.items():
        for imp in a["impacts"]:
            if not imp["applicable"]:
                continue
            rows.append(
                [
                    variant,
                    imp["component"].replace("_", " "),
                    fmt_int(imp["gpus_cut_off"]),
                    fmt_int(imp["gpus_moved"]),
                    f"{imp['bandwidth_lost_gbps']:,.0f} Gbps",
                    fmt_pct(imp["bandwidth_lost_fraction"], digits=2),
                    imp["note"],
                ]
            )
    single = table(
        [
            "design",
            "component",
            "GPUs cut off",
            "GPUs moved",
            "NIC capacity lost",
            "of tier",
            "recovery",
        ],
        rows,
        left=2,
        text_last=True,
    )
    mc = f["monte_carlo"]
    mrows = [
        [
            n,
            fmt_int(v["switches"]),
            f"{v['expected_failures']:.1f}",
            f"{v['expected_interruptions']:.1f}",
            f"{v['expected_idle_gpus']:.1f}",
            fmt_int(v["expected_idle_gpu_hours"]),
            f"{v['expected_peak_unusable_gpus']:.1f}",
            fmt_int(v["spare_gpus_needed"]),
        ]
        for n, v in mc["variants"].items()
    ]
    mtable = table(
        [
            "design",
            "switches",
            "failures",
            "interruptions",
            "idle GPUs (mean)",
            "idle GPU-hours",
            "peak unusable GPUs",
            f"spare GPUs (p{100 * mc['target_quantile']:g})",
        ],
        mrows,
    )
    return (
        "<h3>One failure</h3>"
        + single
        + f"<h3>Monte Carlo of a {mc['days']:g}-day job on {mc['job_gpus']:,} GPUs</h3>"
        f"<p>Failure rates: {esc(mc['rates']['source'])}; repair time {mc['repair_hours']:g} h "
        "(an assumption); rail-only+ocs adds a small optical circuit switch per rail so an idle "
        "GPU of the same domain can take a failed GPU's place. Every design holds "
        f"{_spares(f['spare_per_domain'])} per HB domain"
        + (
            ", the spares the cost section counts beside the OCS layer (one per swap set)"
            if f["ocs_tradeoff"] is not None
            else " (no OCS layer is priced here: a domain of one GPU, or one domain with no "
            "rail switch)"
        )
        + "; rail-only cannot rewire a spare into a failed GPU's rails, rail-optimized and "
        "rail-only+ocs can (<code>railplan faults --spare-per-domain N</code> simulates N).</p>"
        + mtable
        + _ocs_tradeoff(f["ocs_tradeoff"], mc["days"])
        + figs["fig-failures"]
    )


def _spares(n: int) -> str:
    return "no idle spare GPU" if n == 0 else f"{n} idle spare GPU{'s' if n > 1 else ''}"


def _ocs_tradeoff(t: dict[str, Any] | None, days: float) -> str:
    """What the OCS layer costs beside the idle GPU-hours its spares recover (none without an
    OCS model in the price book)."""
    if t is None:
        return ""
    price = "" if t["ocs_cost_usd"] is None else f" costs {fmt_usd(t['ocs_cost_usd'])} and"
    recovered = t["recovered_gpu_hours"]
    if recovered <= 0:
        return f"<p>The OCS layer{price} recovers no idle GPU-hours here.</p>"
    per_hour = t["ocs_usd_per_recovered_gpu_hour"]
    value = "" if per_hour is None else f": ${per_hour:,.0f} of OCS per GPU-hour recovered"
    return (
        f"<p>The OCS layer{price} with {t['spare_gpus']:,} spare GPUs idle cuts the job's "
        f"idle GPU-hours over {days:g} days from {t['idle_gpu_hours_rail_only']:,.0f} "
        f"(rail-only) to {t['idle_gpu_hours_ocs']:,.0f}{value}.</p>"
    )
