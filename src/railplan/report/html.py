"""Render the report's data as one self-contained HTML page and write it atomically.

plotly.js is inlined once (no CDN, no MathJax, no fonts fetched), every figure is a div drawn
by it; tables are plain HTML. The page is written to a temporary file beside the target and
renamed onto it, so an error or an interrupt never leaves a partial report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs

from railplan import __version__
from railplan.errors import RailplanError
from railplan.fileio import atomic_write, check_target
from railplan.report.figures import all_figures
from railplan.report.markup import (
    CSS,
    _space_values,
    esc,
    figure_div,
    fmt_int,
    fmt_musd,
    fmt_mw,
    fmt_pct,
    fmt_s,
    readable,
    table,
)
from railplan.report.network_html import cost_section, failures_section
from railplan.specs.strategy import strategy_label
from railplan.traffic.matrix import KINDS
from railplan.units import fmt_bytes

SUFFIXES = (".html", ".htm")


# ---------------------------------------------------------------------------------------------
# small formatters


# ---------------------------------------------------------------------------------------------
# sections


def title_of(r: dict[str, Any]) -> str:
    i = r["inputs"]
    return (
        f"{i['model']} on {i['gpus']:,} × {i['gpu']} ({i['system']}, K={i['hb_domain']}), "
        f"global batch {i['global_batch']:,}"
    )


def _time(b: dict[str, Any] | None) -> float | None:
    return None if b is None else float(b["iteration_s"])


def answers(r: dict[str, Any]) -> str:
    """The architect's questions answered in one line each."""
    perf, cost, tr = r["performance"], r["cost"], r["traffic"]["stats"]
    nets = perf["networks"]
    ro, rl, ideal = (nets[a]["best"] for a in ("rail-optimized", "rail-only", "ideal"))
    a, b = cost["rail_only"], cost["rail_optimized"]
    hb_share = tr["hb_bytes"] / tr["total_bytes"] if tr["total_bytes"] else None
    items = [
        f"<b>Do I need a spine?</b> Rail-only trains one iteration in {fmt_s(_time(rl))} vs "
        f"{fmt_s(_time(ro))} on rail-optimized "
        f"({fmt_pct(perf['rail_only_vs_rail_optimized'], signed=True)}); ideal (one HB domain) "
        f"would take {fmt_s(_time(ideal))}.",
        f"<b>What does it cost?</b> Rail-only needs {fmt_int(a['switches'])} switches and "
        f"{fmt_int(a['transceivers'])} transceivers vs {fmt_int(b['switches'])} and "
        f"{fmt_int(b['transceivers'])}: {fmt_musd(a['cost_usd'])} vs {fmt_musd(b['cost_usd'])}, "
        + (
            f"{fmt_mw(a['power_w'])} vs {fmt_mw(b['power_w'])} (saving "
            f"{fmt_pct(cost['savings']['cost'])} of cost, {fmt_pct(cost['savings']['power'])} "
            "of power)."
            if a["power_w"] is not None and b["power_w"] is not None
            else f"saving {fmt_pct(cost['savings']['cost'])} of cost; power unknown: price book "
            f"{esc(cost['inputs'].get('price_book', ''))} has no watts at "
            f"{cost['inputs'].get('nic_gbps', '?')} Gbps."
        ),
        f"<b>Which strategy?</b> On rail-only: {esc(strategy_label(rl and rl['strategy']))} "
        f"(MFU {fmt_pct(rl and rl['mfu'])}).",
        f"<b>Where do the bytes go?</b> {fmt_pct(hb_share)} of the bytes stay inside HB domains; "
        f"cross-rail NIC bytes: {fmt_bytes(tr['nic_cross_rail_bytes'])}; "
        f"{fmt_pct(1 - tr['pairs_with_traffic_fraction'], digits=3)} of GPU pairs exchange "
        "nothing.",
        _failure_answer(r["failures"]),
    ]
    return '<ul class="answers">' + "".join(f"<li>{x}</li>" for x in items) + "</ul>"


def _failure_answer(failures: dict[str, Any]) -> str:
    """'What if a switch fails?' from the page's own failure data: what a leaf (rail) switch
    failure cuts off and moves in each design, then the Monte Carlo's interruptions and idle
    GPU-hours, with no verdict the numbers do not carry."""
    mc, archs = failures["monte_carlo"], failures["single"]["architectures"]
    v = mc["variants"]

    def leaf(arch: str) -> dict[str, Any]:
        found = [i for i in archs[arch]["impacts"] if i["component"] == "leaf_switch"]
        return found[0] if found else {"gpus_cut_off": 0, "gpus_moved": 0}

    ro, rl = leaf("rail-optimized"), leaf("rail-only")
    return (
        f"<b>What if a switch fails?</b> A leaf (rail) switch failure cuts off "
        f"{fmt_int(rl['gpus_cut_off'])} GPUs on rail-only and {fmt_int(ro['gpus_cut_off'])} on "
        f"rail-optimized, whose work moves off {fmt_int(rl['gpus_moved'])} vs "
        f"{fmt_int(ro['gpus_moved'])} GPUs; rail-only has {fmt_int(v['rail-only']['switches'])} "
        f"switches vs {fmt_int(v['rail-optimized']['switches'])}. Over {mc['days']:g} days the "
        f"Monte Carlo expects {v['rail-only']['expected_interruptions']:.0f} vs "
        f"{v['rail-optimized']['expected_interruptions']:.0f} interruptions and "
        f"{fmt_int(v['rail-only']['expected_idle_gpu_hours'])} vs "
        f"{fmt_int(v['rail-optimized']['expected_idle_gpu_hours'])} idle GPU-hours "
        "(rail-only first)"
        + (
            _with_ocs(failures["spare_per_domain"], v["rail-only+ocs"])
            if failures["ocs_tradeoff"] is not None
            else ""
        )
        + "."
    )


def _with_ocs(spares: int, ocs: dict[str, Any]) -> str:
    """The rail-only+ocs figure beside them, when there are spares to swap in."""
    if spares == 0:
        return ""
    return (
        f"; with an OCS layer and {spares} idle spare GPU{'s' if spares > 1 else ''} per HB "
        f"domain (every design holds them), rail-only's idle GPU-hours are "
        f"{fmt_int(ocs['expected_idle_gpu_hours'])}"
    )


def performance_section(r: dict[str, Any], figs: dict[str, str]) -> str:
    nets = r["performance"]["networks"]
    base = nets["rail-optimized"]["best"]["iteration_s"]
    rows = []
    for arch, v in nets.items():
        b = v["best"]
        rows.append(
            [
                arch,
                strategy_label(b and b["strategy"]),
                fmt_s(b and b["iteration_s"]),
                fmt_pct(b and b["iteration_s"] / base - 1, signed=True),
                fmt_pct(b and b["mfu"]),
                fmt_pct(b and b["hfu"]),
                "—" if b is None else f"{b['memory_gib_per_gpu']:.1f} GiB",
                f"{v['feasible']:,} of {v['configurations_evaluated']:,}",
            ]
        )
    head = [
        "network",
        "best strategy",
        "iteration",
        "vs rail-optimized",
        "MFU",
        "HFU",
        "memory/GPU",
        "strategies that fit",
    ]
    return (
        "<p>Every valid parallelization is evaluated by <code>railplan.explore.search</code> on "
        "each network; the fastest that fits in memory is shown.</p>"
        + table(head, rows, left=2)
        + figs["fig-breakdown"]
    )


def traffic_section(r: dict[str, Any], figs: dict[str, str]) -> str:
    t = r["traffic"]
    s = t["stats"]
    rows = [
        [
            k.upper(),
            fmt_bytes(s["bytes_by_kind"][k]),
            fmt_pct(s["share_by_kind"][k]),
            fmt_bytes(s["hb_bytes_by_kind"][k]),
            fmt_bytes(s["nic_bytes_by_kind"][k]),
            fmt_pct(s["pairs_by_kind_fraction"][k], digits=3),
        ]
        for k in KINDS
    ]
    rows.append(
        [
            "all",
            fmt_bytes(s["total_bytes"]),
            "100.0 %",
            fmt_bytes(s["hb_bytes"]),
            fmt_bytes(s["nic_bytes"]),
            fmt_pct(s["pairs_with_traffic_fraction"], digits=3),
        ]
    )
    return (
        f"<p>One iteration of the best rail-only strategy ({esc(strategy_label(t['strategy']))}), "
        f"placed <code>{esc(t['placement'])}</code> (order {esc(', '.join(t['order']))}). "
        f"Cross-rail NIC bytes: {fmt_bytes(s['nic_cross_rail_bytes'])}. Largest pair inside an HB "
        f"domain: {fmt_bytes(s['max_pair_bytes_hb'])}; across the NIC domain: "
        f"{fmt_bytes(s['max_pair_bytes_nic'])}.</p>"
        + "".join(f"<p>Note: {esc(n)}.</p>" for n in t.get("notes", []))
        + table(["kind", "bytes", "share", "in HB domains", "over NICs", "GPU pairs"], rows)
        + '<div class="grid">'
        + figs["fig-kinds"]
        + figs["fig-heatmap"]
        + "</div>"
    )


def sensitivity_section(r: dict[str, Any], figs: dict[str, str]) -> str:
    k_rows = [
        [
            p["hb_domain"],
            p["network"],
            fmt_s(p["iteration_s"]),
            fmt_pct(p["mfu"]),
            strategy_label(p["strategy"]),
        ]
        for p in r["sensitivity"]["hb_domain"]
    ]
    return (
        "<p>Each point is a full strategy search with one input changed: the HB-domain size K, "
        "the HB bandwidth (×1, ×2, ×4), the NIC bandwidth (×¼, ×½, ×1) or the global batch "
        "(×¼, ×½, ×1; relative to ideal = ideal's best time ÷ this network's). Rail-optimized "
        "is the dashed line on top of rail-only: where only one line shows, they are equal.</p>"
        '<div class="grid">'
        + figs["fig-k"]
        + figs["fig-hb"]
        + figs["fig-nic"]
        + figs["fig-batch"]
        + "</div>"
        + table(
            ["K", "network", "iteration", "MFU", "best strategy"], k_rows, left=2, text_last=True
        )
    )


def _spec_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[k, readable(v)] for k, v in d.items() if k != "source" and v is not None]


# The modern runs' source ids (modern_runs.csv) as a reader knows them.
SOURCE_NAMES = {
    "meg": "Megatron-Core README (H100)",
    "dgxc": "NVIDIA dgxc-benchmarking (NeMo, H100)",
    "mosaic": "MosaicML llm-foundry (A100, H100)",
}


def assumptions_section(r: dict[str, Any]) -> str:
    a = r["assumptions"]
    parts = []
    for title, spec in (("Model", a["model"]), ("System", a["system"]), ("GPU", a["gpu"])):
        src = spec.get("source") or "user file (no source given)"
        parts.append(
            f'<h3>{title}: {esc(spec.get("name", ""))}</h3><p class="muted">Source: '
            f"{esc(src)}</p>" + table(["field", "value"], _spec_rows(spec))
        )
    pb = a["price_book"]
    parts.append(
        f'<h3>Price book: {esc(pb["name"])}</h3><p class="muted">{esc(pb["description"])}'
        f" {esc(pb['header'])}</p>"
        + table(
            ["speed", "item", "value", "source"],
            [
                [f"{e['speed_gbps']} Gbps", e["item"], f"{e['value']:g}", e["source"]]
                for e in pb["entries"]
            ],
            left=2,
            text_last=True,
        )
    )
    fr = a["failure_rates"]
    parts.append(
        '<h3>Failure rates</h3><p class="muted">Source: '
        + esc(fr["source"])
        + "</p>"
        + table(["rate", "value"], [[k, f"{v:.3g}"] for k, v in fr.items() if k != "source"])
    )
    parts.append(
        "<h3>Search space and model constants</h3>"
        + table(
            ["search field", "values"],
            [[k, _space_values(v, k)] for k, v in a["search_space"].items()],
        )
        + table(
            ["constant", "value", "defined in"],
            [[c["name"], c["value"], c["where"]] for c in a["constants"]],
            left=3,
        )
    )
    v = a["validation"]
    g = v["goal"]
    m, h = v["modern"], v["heldout"]
    summ = [
        _accuracy_row(name, v[key])
        for key, name in (
            ("korthikanti2022", "Korthikanti et al. 2022 (iteration time)"),
            ("narayanan2021", "Narayanan et al. 2021 (TFLOP/s per GPU)"),
            ("all", "2021–22 runs, all"),
        )
    ]
    summ += [
        _accuracy_row(f"2023–24 stacks: {SOURCE_NAMES.get(src, src)}", x)
        for src, x in [*m["by_source"].items(), ("all", m["all"])]
    ]
    summ += [
        _accuracy_row(f"2025 stacks, held out: {grp}", x)
        for grp, x in [*h["by_group"].items(), ("all", h["all"])]
    ]
    summ.append(
        _accuracy_row("MoE training (DeepSeek-V3, H100 and GB200), held out", v["moe_heldout"])
    )
    c = v["calculon_korthikanti"]
    parts.append(
        "<h3>Validation accuracy</h3><p>The iteration model predicts published Megatron-LM runs "
        f"on DGX A100 (nothing fitted to them; goal: mean ≤ {g['mean_abs_pct']:g} %, max ≤ "
        f"{g['max_abs_pct']:g} %; Calculon on the Korthikanti rows: mean "
        f"{c['mean_abs_pct']:g} %, max {c['max_abs_pct']:g} %), runs of 2023–24 stacks on "
        "H100 and A100 (Megatron-Core, NeMo, MosaicML: the one fitted constant, the H100's "
        f"sustained tensor fraction, is fitted on them; goal: mean ≤ "
        f"{m['goal']['mean_abs_pct']:g} %, max ≤ {m['goal']['max_abs_pct']:g} %) and, never "
        "fitted on, NeMo 2 runs of 2025 on H100 and GB200 and MoE training runs (three modelling "
        "choices were made after seeing some of them; docs/validation.md).</p>"
        + table(["source", "runs", "mean |error|", "max |error|"], summ)
        + table(
            ["source", "run", "metric", "measured", "predicted", "error"],
            [
                [
                    x["source"],
                    x["label"],
                    x["metric"],
                    f"{x['measured']:.2f}",
                    f"{x['predicted']:.2f}",
                    f"{x['error_pct']:+.1f} %",
                ]
                for x in v["rows"]
            ],
            left=3,
        )
    )
    return "".join(parts)


def _accuracy_row(name: str, x: dict[str, Any]) -> list[Any]:
    """One line of the validation-accuracy table: runs, mean and max |error|."""
    return [name, x["rows"], f"{x['mean_abs_pct']:.1f} %", f"{x['max_abs_pct']:.1f} %"]


def serving_section(r: dict[str, Any]) -> str:
    """The best serving configuration per network (railplan infer-search)."""
    v = r["serving"]
    rows = []
    for net, c in v["by_network"].items():
        if c is None:
            rows.append([net, "no configuration meets the limits", "", "", "", "", ""])
            continue
        split = f"{c['prefill_gpus']}:{c['decode_gpus']}" if c["prefill_gpus"] else "-"
        rows.append(
            [
                net,
                f"{c['mode']}, tp {c['tp']} pp {c['pp']} ep {c['ep']}"
                + (", two-batch overlap" if c.get("two_batch_overlap") else ""),
                fmt_int(c["batch"]),
                split,
                f"{c['ttft_s']:.2f} s",
                f"{c['tpot_s'] * 1e3:.0f} ms",
                fmt_int(c["tokens_per_s_per_gpu"]),
            ]
        )
    lim, tok = v["limits"], v["tokens"]
    return (
        f"<p>Serving {esc(r['inputs']['model'])} on {fmt_int(v['gpus'])} of the GPUs "
        f"({esc(v['precision'])}; requests of {tok['input']} prompt and {tok['output']} output "
        f"tokens; limits TTFT ≤ {lim['ttft_s']:g} s, TPOT ≤ {lim['tpot_s'] * 1e3:g} ms, "
        f"MLPerf's server scenario). {esc(v['verdict'])}.</p>"
        + table(
            [
                "network",
                "configuration",
                "batch",
                "prefill:decode GPUs",
                "TTFT",
                "TPOT",
                "tokens/s per GPU",
            ],
            rows,
        )
    )


SECTIONS: tuple[tuple[str, str, Callable[[dict[str, Any], dict[str, str]], str]], ...] = (
    ("performance", "Best strategy and iteration time", performance_section),
    ("cost", "Cost and power", cost_section),
    ("traffic", "Traffic", traffic_section),
    ("sensitivity", "Sensitivities", sensitivity_section),
    ("failures", "Failures", failures_section),
    ("serving", "Serving (inference)", lambda r, _: serving_section(r)),
    ("assumptions", "Assumptions and sources", lambda r, _: assumptions_section(r)),
)


def render(report: dict[str, Any]) -> str:
    """The whole page as a string: inlined plotly.js, one div per figure, tables."""
    figs = {k: figure_div(f, k) for k, f in all_figures(report).items()}
    nav = "".join(f'<a href="#{key}">{esc(title)}</a>' for key, title, _ in SECTIONS)
    body = "".join(
        f'<section id="{key}"><h2>{esc(title)}</h2>{fn(report, figs)}</section>'
        for key, title, fn in SECTIONS
    )
    title = title_of(report)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>railplan report: {esc(title)}</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{CSS}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script>'
        "</head><body><main>"
        f"<h1>Rail-only vs rail-optimized: {esc(title)}</h1>"
        f'<p class="muted">railplan {esc(__version__)} — Rail-only network (Wang, Ghobadi et '
        "al., HOTI 2024 / arXiv 2307.12169). Every number below comes from railplan's library "
        "functions; the last section lists the inputs and their sources.</p>"
        f'<nav>{nav}</nav><section id="answers"><h2>Answers</h2>{answers(report)}</section>'
        f"{body}</main></body></html>\n"
    )


def check_output(path: str | Path) -> Path:
    """The output path, if it ends in .html and its folder exists (one-line error otherwise)."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise RailplanError("out", f"{p.name!r} must end in .html")
    if not p.parent.is_dir():
        raise RailplanError("out", f"folder {str(p.parent)!r} does not exist")
    if p.is_dir():
        raise RailplanError("out", f"{str(p)!r} is a folder")
    return check_target(p, "out")


def _write_page(tmp: Path, page: str) -> None:
    tmp.write_text(page, encoding="utf-8")


def write_report(report: dict[str, Any], path: str | Path) -> Path:
    """Render and write atomically (temporary file in the same folder, then rename)."""
    out = check_output(path)
    page = render(report)
    return atomic_write(out, lambda tmp: _write_page(tmp, page), "out")
