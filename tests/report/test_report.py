"""The report's data come from the library unchanged; the page is self-contained; the command
writes atomically and rejects bad input with one line (exit 2)."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from railplan import Network
from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace, search
from railplan.network.cost import compare
from railplan.network.topology import Cluster
from railplan.report import build, render, write_report
from railplan.report import html as report_html
from railplan.report import sections as report_sections
from railplan.report.sections import (
    SENSITIVITY_K,
    planned_searches,
    prefetch_searches,
    priced_speed,
)
from railplan.specs import Job
from tests.conftest import Cli
from tests.report.conftest import small_inputs

SMALL_ARGS = ["--model", "gpt-7.5b", "--gpus", "256", "--global-batch", "512", "--trials", "50"]


def test_best_strategies_are_the_searchs(report_data: dict[str, Any]) -> None:
    inp = small_inputs()
    for arch in ("rail-optimized", "rail-only", "ideal"):
        r = search(
            Job(inp.model, inp.system, Network(architecture=arch), 256, 512), inp.space, top=1
        )
        assert r.best is not None
        got = report_data["performance"]["networks"][arch]["best"]
        assert got["strategy"] == r.best.strategy.model_dump()
        assert got["iteration_s"] == pytest.approx(r.best.iteration_s)


def test_cost_is_the_comparison(report_data: dict[str, Any]) -> None:
    c = compare(Cluster(256, 8, 64, nic_gbps=400)).to_dict()
    got = report_data["cost"]
    assert got["rail_only"] == c["rail_only"] and got["rail_optimized"] == c["rail_optimized"]
    assert got["savings"] == c["savings"]
    assert "200 Gbps" in got["note"]  # DGX A100's NIC speed is not in the paper's price book
    ocs = got["rail_only_ocs"]
    assert ocs["ocs_units"] > 0 and ocs["switches"] == got["rail_only"]["switches"]
    from railplan.report.network_html import cost_section

    html = cost_section(report_data, {"fig-cost": ""})
    assert "rail-only + OCS" in html and "OCS units" in html
    assert f"{ocs['ocs_units']:,}" in html
    # the system's speed beside the one priced (it read "400 Gbps" for a 200 Gbps system)
    assert "200 Gbps NICs counted and priced as 400 Gbps" in html


def test_sensitivity_points(report_data: dict[str, Any]) -> None:
    s = report_data["sensitivity"]
    ks = sorted({p["hb_domain"] for p in s["hb_domain"]})
    assert ks == [k for k in SENSITIVITY_K if 256 % k == 0]
    assert [p["factor"] for p in s["hb_tbps"][::2]] == [1.0, 2.0, 4.0]
    assert [p["nic_gbps"] for p in s["nic_gbps"][::2]] == [50.0, 100.0, 200.0]
    assert [p["global_batch"] for p in s["batch"][::2]] == [128, 256, 512]
    for p in s["batch"]:
        assert p["relative_to_ideal"] is not None and 0 < p["relative_to_ideal"] <= 1 + 1e-9


def test_traffic_and_failures(report_data: dict[str, Any]) -> None:
    t = report_data["traffic"]
    assert t["stats"]["gpus"] == 256 and len(t["heatmap_bytes"]) == t["heatmap_gpus"] == 128
    assert t["stats"]["nic_cross_rail_bytes"] == 0.0  # rail-aligned placement
    assert t["notes"] == []  # no DeepEP dispatch: nothing departs from the timing model
    noted = report_html.traffic_section(
        report_data | {"traffic": t | {"notes": ["ep: shown as a plain all-to-all"]}},
        {"fig-kinds": "", "fig-heatmap": ""},
    )
    assert "<p>Note: ep: shown as a plain all-to-all.</p>" in noted
    mc = report_data["failures"]["monte_carlo"]
    assert set(mc["variants"]) == {"rail-optimized", "rail-only", "rail-only+ocs"}
    assert mc["variants"]["rail-only"]["switches"] < mc["variants"]["rail-optimized"]["switches"]


def test_the_monte_carlo_holds_the_spares_the_ocs_layer_is_priced_with(
    report_data: dict[str, Any],
) -> None:
    # one idle spare per swap set (here an HB domain of 8), as the cost section counts them:
    # rail-only cannot rewire it into a failed GPU's rails, rail-only+ocs and rail-optimized can
    f = report_data["failures"]
    ocs = report_data["cost"]["rail_only_ocs"]
    assert f["spare_per_domain"] == 1 == ocs["spare_gpus"] // (256 // 8)
    idle = {v: m["expected_idle_gpu_hours"] for v, m in f["monte_carlo"]["variants"].items()}
    assert max(idle["rail-only+ocs"], idle["rail-optimized"]) < idle["rail-only"]
    t = f["ocs_tradeoff"]
    assert t["spare_gpus"] == ocs["spare_gpus"]
    assert t["recovered_gpu_hours"] == pytest.approx(idle["rail-only"] - idle["rail-only+ocs"])
    from railplan.report.network_html import failures_section

    html = failures_section(report_data, {"fig-failures": ""})
    assert "1 idle spare GPU per HB domain" in html
    assert f"{t['spare_gpus']:,} spare GPUs idle cuts the job's idle GPU-hours" in html
    from railplan.report.html import _failure_answer

    answer = _failure_answer(f)
    ocs_idle = f"{idle['rail-only+ocs']:,.0f}"
    assert "1 idle spare GPU per HB domain (every design holds them)" in answer
    assert f"rail-only's idle GPU-hours are {ocs_idle}" in answer


def test_assumptions_have_sources(report_data: dict[str, Any]) -> None:
    a = report_data["assumptions"]
    for key in ("model", "system", "gpu"):
        assert len(a[key]["source"]) > 10
    assert all(len(e["source"]) > 10 for e in a["price_book"]["entries"])
    assert a["validation"]["all"]["rows"] == len(a["validation"]["rows"]) > 5
    assert a["validation"]["modern"]["all"]["rows"] == 32
    assert a["validation"]["heldout"]["all"]["rows"] == 54
    assert a["validation"]["moe_heldout"]["rows"] == 5
    assert "Llama 3" in a["failure_rates"]["source"]


def test_page_is_self_contained(report_data: dict[str, Any]) -> None:
    page = render(report_data)
    assert page.count("plotly.js v") >= 1 and page.count('<script type="text/javascript">/**')
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    assert not re.search(r"<img[^>]+src=\"?https?:", page)
    assert "cdn.plot.ly" not in page.split("</head>")[1]
    assert page.count('class="plotly-graph-div"') == 9
    for text in ("Do I need a spine?", "Cost and power", "Monte Carlo", "Validation accuracy"):
        assert text in page
    for text in ("2023–24 stacks: all", "2025 stacks, held out: gb200 fp8", "MoE training"):
        assert text in page


def test_price_book_speed() -> None:
    book = small_inputs().price_book
    assert priced_speed(book, 400.0) == 400
    assert priced_speed(book, 200.0) == 400


def test_cli_writes_report(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = cli("report", *SMALL_ARGS, "--out", str(out))
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 1_000_000 and "wrote" in r.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


@pytest.mark.parametrize(
    "args,field",
    [
        (["--model", "gpt-nope"], "model"),
        (["--system", "dgx-nope"], "system"),
        (["--gpus", "100"], "gpus"),
        (["--gpus", "8", "--model", "gpt-1t"], "gpus"),
        (["--radix", "63"], "radix"),
        (["--global-batch", "0"], "global_batch"),
        (["--out", "report.pdf"], "out"),
        (["--out", "/no/such/folder/r.html"], "out"),
        (["--price-book", "missing.yaml"], "price_book"),
        (["--workers", "-1"], "workers"),
        (["--global-batch", "9223372036854775807"], "global_batch"),
    ],
)
def test_cli_errors(cli: Cli, tmp_path: Path, args: list[str], field: str) -> None:
    base = dict(zip(SMALL_ARGS[::2], SMALL_ARGS[1::2], strict=True))
    base["--out"] = str(tmp_path / "r.html")
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    r = cli("report", *[x for kv in base.items() for x in kv])
    assert r.exit_code == 2, r.output
    assert str(r.exception).startswith(f"{field}:"), r.exception
    assert "\n" not in str(r.exception)
    assert list(tmp_path.iterdir()) == []


def test_console_script_error_is_one_line(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from railplan.cli import main; main()",
            "report",
            "--model",
            "gpt-nope",
            "--gpus",
            "256",
            "--out",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("error: model:")


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_write_is_atomic(
    report_data: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    out = tmp_path / "r.html"
    out.write_text("old report", encoding="utf-8")

    def fail(tmp: Path, page: str) -> None:
        tmp.write_text(page[:100], encoding="utf-8")
        raise exc

    monkeypatch.setattr(report_html, "_write_page", fail)
    with pytest.raises(type(exc)):
        write_report(report_data, out)
    assert out.read_text(encoding="utf-8") == "old report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_build_reports_progress() -> None:
    seen: list[str] = []
    build(small_inputs(model="gpt-1.7b", gpus=64, global_batch=128), on_step=seen.append)
    assert len(seen) == 7 and seen[0].startswith("best strategy")


def test_power_panel_says_when_the_price_book_has_no_watts() -> None:
    from railplan.network.cost import load_price_book
    from railplan.report.figures import cost_power

    book = load_price_book("public-web-estimates")
    cost = compare(Cluster(2048, 8, 64, nic_gbps=800), book=book).to_dict()
    assert cost["rail_only"]["power_w"] is None  # the book's 800 Gbps entry has no watts
    fig = cost_power(cost)
    assert any("no watts" in a.text for a in fig.layout.annotations)
    with_watts = cost_power(compare(Cluster(2048, 8, 64, nic_gbps=400)).to_dict())
    assert not any("no watts" in (a.text or "") for a in with_watts.layout.annotations)


def test_searches_in_processes_give_the_same_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """With workers, every search the sections ask for is run ahead (`planned_searches` misses
    none: the sections then never search), and the report is the same as run one by one."""
    alone = build(small_inputs(model="gpt-1.7b", gpus=64, global_batch=128))
    inp = replace(small_inputs(model="gpt-1.7b", gpus=64, global_batch=128), workers=2)
    seen: list[tuple[int, int]] = []
    prefetch_searches(inp, lambda done, total: seen.append((done, total)))
    total = len({(s.model_dump_json(), a, b) for s, a, b in planned_searches(inp)})
    assert seen == [(i, total) for i in range(1, total + 1)] and total > 10

    def no_more(*_: Any, **__: Any) -> None:
        raise AssertionError("a search the plan missed")

    monkeypatch.setattr(report_sections, "search", no_more)
    together = build(inp)
    assert json.dumps(together, sort_keys=True, default=str) == json.dumps(
        alone, sort_keys=True, default=str
    )


def test_errors_cross_from_the_search_processes() -> None:
    """A search that refuses its input in a worker gives the same one-line error as run here
    (RailplanError pickles by its parts); a model that fits nowhere stops the searches early."""
    err = RailplanError("precision", "fp8 needs a GPU with fp8 tensor cores")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.field, back.problem, str(back)) == (
        RailplanError,
        err.field,
        err.problem,
        str(err),
    )
    for model, space in (("gpt-1.7b", SearchSpace(precision=("fp8",))), ("gpt-1t", None)):
        messages = []
        for workers in (1, 2):
            inp = replace(small_inputs(model=model, gpus=64, global_batch=128), workers=workers)
            if space is not None:
                inp = replace(inp, space=space)
            with pytest.raises(RailplanError) as caught:
                build(inp)
            messages.append(str(caught.value))
        assert messages[0] == messages[1]


@pytest.mark.parametrize(
    ("change", "field"), [({"radix": 63}, "radix"), ({"mc_trials": 100_000}, "trials")]
)
def test_inputs_the_sections_refuse_are_refused_before_any_search(
    change: dict[str, int], field: str
) -> None:
    # check_inputs runs before the progress bar and the strategy searches: a radix or a
    # Monte Carlo size the network and failure sections would refuse fails there, at once
    from dataclasses import replace

    from railplan.errors import RailplanError
    from railplan.report.sections import check_inputs

    with pytest.raises(RailplanError) as err:
        check_inputs(replace(small_inputs(), **change))
    assert err.value.field == field


def test_a_fractional_nic_count_is_refused_naming_the_option_and_its_values() -> None:
    # the report counts switches and transceivers per NIC; its --help says "a whole number"
    from dataclasses import replace

    from railplan.report.sections import check_inputs

    inp = small_inputs()
    half = replace(inp, system=inp.system.model_copy(update={"nics_per_gpu": 0.5}))
    with pytest.raises(RailplanError) as err:
        check_inputs(half)
    assert err.value.field == "nics-per-gpu"
    assert "whole number" in err.value.problem and "1-16" in err.value.problem
    assert "got 0.5" in err.value.problem
